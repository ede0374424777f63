package db

import (
	"bytes"
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// root is the repository root (this package is internal/db).
const root = "../.."

// TestSQLCGeneratedIsCurrent fails when the committed sqlc output differs
// from what sqlc.yaml, the migrations and the queries/*.sql files generate.
// sqlc is the version pinned by go.mod's tool directive; CGO_ENABLED=0 makes
// it the pure-Go build (the one `make sqlc` runs), so it needs no C compiler.
func TestSQLCGeneratedIsCurrent(t *testing.T) {
	cmd := exec.Command("go", "tool", "sqlc", "diff")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the generated sqlc code is stale: run `make sqlc` and commit the result\n%s(%v)", out, err)
	}
	// sqlc diff does not see a generated file whose query file is gone:
	// <owner>/<name>db/x.sql.go comes from <owner>/queries/x.sql.
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".sql.go") {
			return nil
		}
		src := filepath.Join(filepath.Dir(filepath.Dir(path)), "queries", strings.TrimSuffix(d.Name(), ".go"))
		if _, err := os.Stat(src); err != nil {
			t.Errorf("%s has no query file %s: run `make sqlc` and delete it", path, src)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// owners names the one package that owns each table: all of the table's
// SQL lives in <owner>/queries/*.sql (generated into the owner's <name>db
// package), or, where sqlc cannot express it, in handWritten below.
var owners = map[string]string{
	"organizations":                      "internal/orgs",
	"automations":                        "internal/triggers/store",
	"sessions":                           "internal/sessions",
	"triggers":                           "internal/triggers/store",
	"schedules":                          "internal/triggers/store",
	"trigger_poll_groups":                "internal/triggers/pollgroups",
	"trigger_events":                     "internal/triggers/store",
	"trigger_llm_results":                "internal/triggers/llmgate",
	"automation_runs":                    "internal/runs",
	"automation_run_events":              "internal/runs",
	"repos":                              "internal/repos",
	"integrations":                       "internal/integrations",
	"billing_meter_closures":             "internal/sessions",
	"billing_events":                     "internal/billing",
	"billing_event_keys":                 "internal/billing",
	"billing_reconciliations":            "internal/billing",
	"session_billing":                    "internal/billing",
	"llm_virtual_keys":                   "internal/llmproxy",
	"llm_spend_cursors":                  "internal/llmproxy",
	"automation_side_effects":            "internal/sideeffects",
	"session_evidence":                   "internal/evidence",
	"configurations":                     "internal/prebuilds",
	"configuration_builds":               "internal/prebuilds",
	"configuration_repos":                "internal/prebuilds",
	"action_invocations":                 "internal/actions/invocations",
	"analytics_tool_calls":               "internal/analytics",
	"analytics_tool_daily":               "internal/analytics",
	"analytics_tool_durations":           "internal/analytics",
	"analytics_sessions":                 "internal/analytics",
	"analytics_session_usage":            "internal/analytics",
	"analytics_applied_events":           "internal/analytics",
	"audit_events":                       "internal/audit",
	"mail_queue":                         "internal/mailqueue",
	"notification_preferences":           "internal/notifyprefs",
	"user_identities":                    "internal/identity",
	"users":                              "internal/identity",
	"auth_sessions":                      "internal/identity",
	"auth_rotated_refresh_tokens":        "internal/identity",
	"verification_tokens":                "internal/identity",
	"password_reset_tokens":              "internal/identity",
	"api_keys":                           "internal/identity",
	"members":                            "internal/orgs",
	"invitations":                        "internal/orgs",
	"trial_requests":                     "internal/orgs",
	"audit_log":                          "internal/audit",
	"outbox":                             "internal/outbox",
	"outbox_dead_letters":                "internal/outbox",
	"preview_shares":                     "internal/sessions",
	"session_notification_subscriptions": "internal/sessionnotify",
	"secrets":                            "internal/secrets",
	"secret_bundles":                     "internal/secrets",
	"secret_bundle_secrets":              "internal/secrets",
	"repo_connections":                   "internal/integrations",
	"slack_installations":                "internal/integrations",
	"user_connections":                   "internal/integrations",
	"org_connectors":                     "internal/integrations",
	"automation_connections":             "internal/integrations",
	"session_connections":                "internal/integrations",
	"action_redactions":                  "internal/actions/redaction",
	"connector_tool_definitions":         "internal/actions/catalog",
	"sandbox_tokens":                     "internal/sessions",
	"session_tool_invocations":           "internal/sessions",
	"session_snapshots":                  "internal/snapshots",
	"session_snapshot_reservations":      "internal/snapshots",
	"session_messages":                   "internal/transcript",
	"session_message_search":             "internal/transcript",
	"session_message_search_queue":       "internal/transcript",
	"session_message_tombstones":         "internal/transcript",
}

// handWritten is SQL that stays in Go on purpose (dynamic filters, COPY),
// in the owner of its table: file → tables.
var handWritten = map[string][]string{
	// Apply's batch insert passes nullable columns as parallel arrays with
	// NULL elements, which sqlc cannot type.
	"internal/transcript/store.go": {"session_message_search_queue", "session_message_tombstones", "session_messages"},
}

// TestNoSQLOutsideOwners fails on SQL written in Go: every statement is in
// its table owner's queries/*.sql, except what handWritten lists (in the
// owner), and an entry of handWritten that no longer holds fails too.
//
// A table reference is a migrations table named after FROM, JOIN, INTO,
// UPDATE, COPY or TRUNCATE inside a Go string literal of a non-test file.
// Generated code, the migrations package and test-fixture packages (whose
// name ends in "test") are not scanned.
func TestNoSQLOutsideOwners(t *testing.T) {
	tables := migrationTables(t)
	found := sqlRefs(t, tables)
	var unexpected, stale []string
	for file, ts := range found {
		for _, tb := range ts {
			if slices.Contains(handWritten[file], tb) {
				if o, ok := owners[tb]; !ok || !strings.HasPrefix(file, o+"/") {
					unexpected = append(unexpected, fmt.Sprintf("%s: %s is hand-written outside its owner %q", file, tb, owners[tb]))
				}
				continue
			}
			where := "its owner"
			if o, ok := owners[tb]; ok {
				where = o + "/queries/*.sql"
			}
			unexpected = append(unexpected, fmt.Sprintf("%s: SQL on %s belongs in %s", file, tb, where))
		}
	}
	for file, ts := range handWritten {
		for _, tb := range ts {
			if !slices.Contains(found[file], tb) {
				stale = append(stale, fmt.Sprintf("%s: %s (handWritten)", file, tb))
			}
		}
	}
	sort.Strings(unexpected)
	sort.Strings(stale)
	if len(unexpected) > 0 {
		t.Errorf("SQL outside the table's owner (put it in the owner's queries/*.sql, see sqlc.yaml):\n%s", strings.Join(unexpected, "\n"))
	}
	if len(stale) > 0 {
		t.Errorf("handWritten lists references that are gone; remove them from the list:\n%s", strings.Join(stale, "\n"))
	}
	if t.Failed() {
		t.Logf("the current references:\n%s", goMap(found))
	}
}

// migrationTables are the tables the migrations create.
func migrationTables(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?([a-z_][a-z0-9_]*)`)
	paths, err := filepath.Glob(filepath.Join(root, "migrations", "sql", "*.sql"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no migrations: %v", err)
	}
	tables := map[string]bool{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			tables[strings.ToLower(string(m[1]))] = true
		}
	}
	return tables
}

var tableRef = regexp.MustCompile(`\b(?:FROM|JOIN|INTO|UPDATE|COPY|TRUNCATE)\s+(?:ONLY\s+)?([a-z_][a-z0-9_]*)\b`)

// sqlRefs maps each scanned Go file (slash path from the root) to the
// sorted tables its string literals name.
func sqlRefs(t *testing.T, tables map[string]bool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" ||
				name == "migrations" || strings.HasSuffix(name, "test")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(src, []byte("// Code generated ")) {
			return nil
		}
		seen := map[string]bool{}
		fset := token.NewFileSet()
		var s scanner.Scanner
		s.Init(fset.AddFile(rel, -1, len(src)), src, nil, 0)
		for {
			_, tok, lit := s.Scan()
			if tok == token.EOF {
				break
			}
			if tok != token.STRING {
				continue
			}
			for _, m := range tableRef.FindAllStringSubmatch(lit, -1) {
				if tables[m[1]] {
					seen[m[1]] = true
				}
			}
		}
		for tb := range seen {
			out[rel] = append(out[rel], tb)
		}
		sort.Strings(out[rel])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func goMap(m map[string][]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\t%q: {", k)
		for i, tb := range m[k] {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q", tb)
		}
		b.WriteString("},\n")
	}
	return b.String()
}
