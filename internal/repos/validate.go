package repos

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of inputs (characters, not bytes).
const (
	NameMax            = 100  // configuration and service command names
	DescriptionMax     = 2000 // configuration description
	CommandMax         = 1000 // a service command
	PathMax            = 500  // workspace paths, cwd, env-file paths
	MinServiceCommands = 1
	MaxServiceCommands = 10
	MaxRepos           = 20  // repos of one configuration
	MaxEnvFiles        = 20  // env files of one configuration
	MaxEnvKeys         = 100 // keys of one env file
	EnvKeyMax          = 200
	RepoNameMax        = 140 // owner (39) + "/" + name (100)
	URLMax             = 500
	BranchMax          = 255
	SnapshotIDMax      = 500
	SnapshotErrorMax   = 4000
	SearchMax          = 200
)

var (
	ownerRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,38}$`)
	repoRE     = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	repoIDRE   = regexp.MustCompile(`^[0-9]{1,20}$`)
	envKeyRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	providerRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
)

func runes(s string) int { return utf8.RuneCountInString(s) }

func tooLong(max int) string { return fmt.Sprintf("must be at most %d characters", max) }

// hasControl reports control characters; newlines and tabs may be allowed
// (multi-line commands, descriptions). NUL is never allowed: Postgres cannot
// store it in text or jsonb.
func hasControl(s string, allowMultiline bool) bool {
	for _, r := range s {
		if allowMultiline && (r == '\n' || r == '\t' || r == '\r') {
			continue
		}
		if unicode.IsControl(r) || r == utf8.RuneError {
			return true
		}
	}
	return false
}

// CheckText validates a required single-line text of at most max characters
// and returns it trimmed, or the problem.
func CheckText(s string, max int) (string, string) {
	t := strings.TrimSpace(s)
	switch {
	case t == "":
		return "", "is required"
	case runes(s) > max:
		return "", tooLong(max)
	case hasControl(s, false):
		return "", "must not contain control characters"
	}
	return t, ""
}

// CheckDescription validates free text (newlines allowed).
func CheckDescription(s string) string {
	switch {
	case runes(s) > DescriptionMax:
		return tooLong(DescriptionMax)
	case hasControl(s, true):
		return "must not contain control characters"
	}
	return ""
}

// CheckRepoName validates "owner/name" as GitHub allows it.
func CheckRepoName(s string) string {
	if s == "" {
		return "is required"
	}
	if runes(s) > RepoNameMax {
		return tooLong(RepoNameMax)
	}
	owner, name, ok := strings.Cut(s, "/")
	if !ok || !ownerRE.MatchString(owner) || !repoRE.MatchString(name) || name == "." || name == ".." {
		return `must be "owner/name" (letters, digits, "-" in the owner; letters, digits, ".", "_", "-" in the name)`
	}
	return ""
}

// RepoShortName is the name part of "owner/name".
func RepoShortName(full string) string {
	_, name, ok := strings.Cut(full, "/")
	if !ok {
		return full
	}
	return name
}

// CheckGitHubURL validates a repository URL: absolute http(s), with a host,
// and without credentials (a token in a URL would be stored and shown).
func CheckGitHubURL(s string) string {
	if runes(s) > URLMax {
		return tooLong(URLMax)
	}
	if hasControl(s, false) || strings.ContainsAny(s, " ") {
		return "must be a URL"
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Opaque != "" {
		return "must be an http(s) URL"
	}
	if u.User != nil {
		return "must not contain credentials"
	}
	return ""
}

// CheckBranch validates a branch name by git's ref-name rules.
func CheckBranch(s string) string {
	if s == "" {
		return "is required"
	}
	if runes(s) > BranchMax {
		return tooLong(BranchMax)
	}
	bad := hasControl(s, false) || strings.ContainsAny(s, " ~^:?*[\\") || strings.Contains(s, "..") ||
		strings.Contains(s, "@{") || strings.Contains(s, "//") || s == "@" ||
		strings.HasPrefix(s, "-") || strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") ||
		strings.HasSuffix(s, ".") || strings.HasSuffix(s, ".lock")
	for seg := range strings.SplitSeq(s, "/") {
		if strings.HasPrefix(seg, ".") {
			bad = true
		}
	}
	if bad {
		return "must be a valid git branch name"
	}
	return ""
}

// CheckGitHubRepoID validates GitHub's numeric repository id.
func CheckGitHubRepoID(s string) string {
	if !repoIDRE.MatchString(s) {
		return "must be GitHub's numeric repository id, as a string"
	}
	return ""
}

// CleanRelPath validates a path relative to a workspace (or the workspace
// root) and returns it cleaned ("./app/" is "app"). It refuses absolute
// paths, "~", ".." segments, backslashes and control characters: every path
// stays inside the sandbox workspace.
func CleanRelPath(p string) (string, string) {
	switch {
	case p == "":
		return "", "must not be empty"
	case runes(p) > PathMax:
		return "", tooLong(PathMax)
	case hasControl(p, false):
		return "", "must not contain control characters"
	case strings.ContainsRune(p, '\\'):
		return "", `must use "/" as the separator`
	case strings.HasPrefix(p, "/"), strings.HasPrefix(p, "~"),
		len(p) >= 2 && p[1] == ':' && (p[0]|0x20) >= 'a' && (p[0]|0x20) <= 'z':
		return "", "must be a relative path"
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return "", `must not contain ".." segments`
		}
	}
	return path.Clean(p), ""
}

// within reports whether workspace path b is a or inside a.
func within(a, b string) bool {
	return a == b || a == "." || strings.HasPrefix(b, a+"/")
}

// CheckServiceCommandName validates a command name: it names the process and
// its log file in the sandbox, so it cannot be a path.
func CheckServiceCommandName(s string) (string, string) {
	t, problem := CheckText(s, NameMax)
	if problem != "" {
		return "", problem
	}
	if strings.ContainsAny(t, `/\`) || t == "." || t == ".." {
		return "", `must not contain "/" or "\" or be "." or ".."`
	}
	return t, ""
}

func checkCommand(s string) string {
	switch {
	case strings.TrimSpace(s) == "":
		return "is required"
	case runes(s) > CommandMax:
		return tooLong(CommandMax)
	case hasControl(s, true):
		return "must not contain control characters other than newlines and tabs"
	}
	return ""
}

func checkCount(field string, n, min, max int) []FieldError {
	switch {
	case n < min:
		return []FieldError{{field, fmt.Sprintf("must have at least %d items", min)}}
	case n > max:
		return []FieldError{{field, fmt.Sprintf("must have at most %d items", max)}}
	}
	return nil
}

// CheckServiceCommands validates configuration-level commands (1–10, names
// unique) and returns them normalized (trimmed names, cleaned paths).
func CheckServiceCommands(field string, cmds []ServiceCommand) ([]ServiceCommand, []FieldError) {
	if fes := checkCount(field, len(cmds), MinServiceCommands, MaxServiceCommands); fes != nil {
		return nil, fes
	}
	var fes []FieldError
	out := make([]ServiceCommand, len(cmds))
	seen := map[string]int{}
	for i, c := range cmds {
		at := fmt.Sprintf("%s[%d].", field, i)
		n, fe := checkCommandCore(at, c.Name, c.Command, c.Cwd, seen, i, field)
		fes = append(fes, fe...)
		if c.WorkspacePath != "" {
			wp, problem := CleanRelPath(c.WorkspacePath)
			if problem != "" {
				fes = append(fes, FieldError{at + "workspace_path", problem})
			}
			n.WorkspacePath = wp
		}
		out[i] = n
	}
	return out, fes
}

// CheckRepoServiceCommands validates repo-level commands.
func CheckRepoServiceCommands(field string, cmds []RepoServiceCommand) ([]RepoServiceCommand, []FieldError) {
	if fes := checkCount(field, len(cmds), MinServiceCommands, MaxServiceCommands); fes != nil {
		return nil, fes
	}
	var fes []FieldError
	out := make([]RepoServiceCommand, len(cmds))
	seen := map[string]int{}
	for i, c := range cmds {
		n, fe := checkCommandCore(fmt.Sprintf("%s[%d].", field, i), c.Name, c.Command, c.Cwd, seen, i, field)
		fes = append(fes, fe...)
		out[i] = RepoServiceCommand{Name: n.Name, Command: n.Command, Cwd: n.Cwd}
	}
	return out, fes
}

func checkCommandCore(at, name, command, cwd string, seen map[string]int, i int, field string) (ServiceCommand, []FieldError) {
	var fes []FieldError
	var out ServiceCommand
	n, problem := CheckServiceCommandName(name)
	if problem != "" {
		fes = append(fes, FieldError{at + "name", problem})
	} else if j, dup := seen[n]; dup {
		fes = append(fes, FieldError{at + "name", fmt.Sprintf("duplicates %s[%d].name", field, j)})
	} else {
		seen[n] = i
	}
	out.Name = n
	if problem := checkCommand(command); problem != "" {
		fes = append(fes, FieldError{at + "command", problem})
	}
	out.Command = command
	if cwd != "" {
		c, problem := CleanRelPath(cwd)
		if problem != "" {
			fes = append(fes, FieldError{at + "cwd", problem})
		}
		if c == "." {
			c = ""
		}
		out.Cwd = c
	}
	return out, fes
}

// EnvFileInput is an env-file spec as clients send it (defaults unapplied).
type EnvFileInput struct {
	WorkspacePath string        `json:"workspace_path" binding:"max=500"`
	Path          string        `json:"path" binding:"required,max=500"`
	Format        string        `json:"format" binding:"required,oneof=env"`
	Mode          string        `json:"mode" binding:"omitempty,oneof=secret plain"`
	Keys          []EnvKeyInput `json:"keys" binding:"required,min=1,max=100,dive"`
}

// EnvKeyInput is a key as clients send it; Required defaults to true.
type EnvKeyInput struct {
	Key      string `json:"key" binding:"required,max=200"`
	Required *bool  `json:"required"`
}

// CheckEnvFiles validates env-file specs (0–20; an empty list clears them)
// and applies defaults: workspace ".", mode secret, keys required.
func CheckEnvFiles(field string, files []EnvFileInput) ([]EnvFile, []FieldError) {
	if fes := checkCount(field, len(files), 0, MaxEnvFiles); fes != nil {
		return nil, fes
	}
	var fes []FieldError
	out := make([]EnvFile, len(files))
	seen := map[string]int{}
	for i, f := range files {
		at := fmt.Sprintf("%s[%d].", field, i)
		e := EnvFile{WorkspacePath: ".", Format: f.Format, Mode: f.Mode, Keys: []EnvKey{}}
		if f.WorkspacePath != "" {
			wp, problem := CleanRelPath(f.WorkspacePath)
			if problem != "" {
				fes = append(fes, FieldError{at + "workspace_path", problem})
			}
			e.WorkspacePath = wp
		}
		if f.Path == "" {
			fes = append(fes, FieldError{at + "path", "is required"})
		} else if p, problem := CleanRelPath(f.Path); problem != "" {
			fes = append(fes, FieldError{at + "path", problem})
		} else if p == "." {
			fes = append(fes, FieldError{at + "path", "must name a file"})
		} else {
			e.Path = p
			full := path.Join(e.WorkspacePath, p)
			if j, dup := seen[full]; dup {
				fes = append(fes, FieldError{at + "path", fmt.Sprintf("is the same file as %s[%d]", field, j)})
			} else {
				seen[full] = i
			}
		}
		switch f.Format {
		case "":
			fes = append(fes, FieldError{at + "format", "is required"})
		case EnvFormatEnv:
		default:
			fes = append(fes, FieldError{at + "format", "must be one of env"})
		}
		switch f.Mode {
		case "":
			e.Mode = EnvModeSecret
		case EnvModeSecret, EnvModePlain:
		default:
			fes = append(fes, FieldError{at + "mode", "must be one of secret, plain"})
		}
		if kfes := checkCount(at+"keys", len(f.Keys), 1, MaxEnvKeys); kfes != nil {
			fes = append(fes, kfes...)
		} else {
			keys := map[string]int{}
			for k, key := range f.Keys {
				kat := fmt.Sprintf("%skeys[%d].key", at, k)
				switch {
				case key.Key == "":
					fes = append(fes, FieldError{kat, "is required"})
				case runes(key.Key) > EnvKeyMax:
					fes = append(fes, FieldError{kat, tooLong(EnvKeyMax)})
				case !envKeyRE.MatchString(key.Key):
					fes = append(fes, FieldError{kat, "must be an environment variable name (letters, digits, _; not starting with a digit)"})
				default:
					if j, dup := keys[key.Key]; dup {
						fes = append(fes, FieldError{kat, fmt.Sprintf("duplicates %skeys[%d].key", at, j)})
					}
					keys[key.Key] = k
				}
				required := key.Required == nil || *key.Required
				e.Keys = append(e.Keys, EnvKey{Key: key.Key, Required: required})
			}
		}
		out[i] = e
	}
	return out, fes
}

// CheckRepoRefs validates the shape of a configuration's repo list: 1–20
// distinct repo ids, workspace paths (when given) relative and inside the
// workspace. Whether the repos exist in the organization, and whether the
// derived paths overlap, is checked against the database by the store.
func CheckRepoRefs(field string, refs []RepoRef, isUUID func(string) bool) ([]RepoRef, []FieldError) {
	if fes := checkCount(field, len(refs), 1, MaxRepos); fes != nil {
		return nil, fes
	}
	var fes []FieldError
	out := make([]RepoRef, len(refs))
	seen := map[string]int{}
	for i, r := range refs {
		at := fmt.Sprintf("%s[%d].", field, i)
		id := strings.ToLower(r.RepoID)
		switch {
		case r.RepoID == "":
			fes = append(fes, FieldError{at + "repo_id", "is required"})
		case !isUUID(r.RepoID):
			fes = append(fes, FieldError{at + "repo_id", "must be a UUID"})
		default:
			if j, dup := seen[id]; dup {
				fes = append(fes, FieldError{at + "repo_id", fmt.Sprintf("duplicates %s[%d].repo_id", field, j)})
			}
			seen[id] = i
		}
		out[i].RepoID = id
		if r.WorkspacePath != "" {
			wp, problem := CleanRelPath(r.WorkspacePath)
			if problem != "" {
				fes = append(fes, FieldError{at + "workspace_path", problem})
			}
			out[i].WorkspacePath = wp
		}
	}
	return out, fes
}

// CheckWorkspaces rejects workspace paths that are equal or nested (one repo
// would be cloned inside another's checkout). paths[i] is repo i's path.
func CheckWorkspaces(field string, paths []string) []FieldError {
	var fes []FieldError
	for i := range paths {
		for j := range i {
			if within(paths[j], paths[i]) || within(paths[i], paths[j]) {
				problem := fmt.Sprintf("%q overlaps %s[%d].workspace_path %q", paths[i], field, j, paths[j])
				if paths[i] == paths[j] {
					problem = fmt.Sprintf("%q duplicates %s[%d].workspace_path", paths[i], field, j)
				}
				fes = append(fes, FieldError{fmt.Sprintf("%s[%d].workspace_path", field, i), problem})
				break
			}
		}
	}
	return fes
}

// DeriveWorkspacePaths fills empty workspace paths the way the original does:
// "." for a single repo, the repo's short name for several.
func DeriveWorkspacePaths(refs []RepoRef, names []string) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		switch {
		case r.WorkspacePath != "":
			out[i] = r.WorkspacePath
		case len(refs) == 1:
			out[i] = "."
		default:
			out[i] = RepoShortName(names[i])
		}
	}
	return out
}

// CheckSnapshotReport validates the builder's report (shape only; the
// transition is checked against the current status).
func CheckSnapshotReport(r SnapshotReport) []FieldError {
	var fes []FieldError
	known := false
	for _, s := range SnapshotStatuses {
		known = known || s == r.Status
	}
	if r.Status == "" {
		return []FieldError{{"status", "is required"}}
	}
	if !known {
		return []FieldError{{"status", "must be one of " + strings.Join(SnapshotStatuses, ", ")}}
	}
	built := r.Status == SnapshotDefault || r.Status == SnapshotReady
	switch {
	case built && r.SnapshotID == "":
		fes = append(fes, FieldError{"snapshot_id", "is required when status is " + r.Status})
	case !built && r.SnapshotID != "":
		fes = append(fes, FieldError{"snapshot_id", "must be set only when status is default or ready"})
	case runes(r.SnapshotID) > SnapshotIDMax:
		fes = append(fes, FieldError{"snapshot_id", tooLong(SnapshotIDMax)})
	case hasControl(r.SnapshotID, false):
		fes = append(fes, FieldError{"snapshot_id", "must not contain control characters"})
	}
	switch {
	case !built && r.Provider != "":
		fes = append(fes, FieldError{"provider", "must be set only when status is default or ready"})
	case r.Provider != "" && !providerRE.MatchString(r.Provider):
		fes = append(fes, FieldError{"provider", "must be a provider name such as modal or e2b"})
	}
	switch {
	case r.Status == SnapshotFailed && strings.TrimSpace(r.Error) == "":
		fes = append(fes, FieldError{"error", "is required when status is failed"})
	case r.Status != SnapshotFailed && r.Error != "":
		fes = append(fes, FieldError{"error", "must be set only when status is failed"})
	case runes(r.Error) > SnapshotErrorMax:
		fes = append(fes, FieldError{"error", tooLong(SnapshotErrorMax)})
	case hasControl(r.Error, true):
		fes = append(fes, FieldError{"error", "must not contain control characters"})
	}
	return fes
}

// CanTransition is the snapshot state machine:
//
//	none     -> building | ready
//	building -> building (a retried job re-marks) | default | ready | failed
//	default  -> building (rebuild) | ready (finalized)
//	ready    -> building (rebuild) | ready (finalized again)
//	failed   -> building (retry) | ready (finalized)
//
// "default" and "failed" are only results of a build in progress, so a
// finished auto-build can never replace a snapshot finalized meanwhile, and
// nothing returns to "none".
func CanTransition(from, to string) bool {
	return transitions[from][to]
}

var transitions = map[string]map[string]bool{
	SnapshotNone:     {SnapshotBuilding: true, SnapshotReady: true},
	SnapshotBuilding: {SnapshotBuilding: true, SnapshotDefault: true, SnapshotReady: true, SnapshotFailed: true},
	SnapshotDefault:  {SnapshotBuilding: true, SnapshotReady: true},
	SnapshotReady:    {SnapshotBuilding: true, SnapshotReady: true},
	SnapshotFailed:   {SnapshotBuilding: true, SnapshotReady: true},
}
