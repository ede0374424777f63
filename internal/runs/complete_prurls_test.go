package runs_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/testenv"
)

// The completion stored on the run (and so its completion artifact and
// notification) carries the pull requests of the run's session, as the
// session recorded them; what the agent claims in pr_urls is not taken.
func TestCompletionCarriesTheSessionsPullRequests(t *testing.T) {
	src, codec, id := runningRun(t, "complete-prs")
	pool := testenv.Postgres(t)
	ctx := context.Background()
	const sid = "00000000-0000-0000-0000-00000000abcd"
	if _, err := pool.Exec(ctx, `INSERT INTO sessions (id, org_id, pr_urls) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET pr_urls = EXCLUDED.pr_urls`,
		sid, src.OrgID, []string{"https://github.com/acme/app/pull/7"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DELETE FROM sessions WHERE id = $1`, sid) })
	res, err := complete(t, codec, src.OrgID, sid, runs.Completion{RunID: id, CompletionID: "cmp-prs", Outcome: "succeeded",
		SummaryMarkdown: "Opened a PR", PRURLs: []string{"https://github.com/evil/x/pull/1"}})
	if err != nil || res.Run.Status != runs.StatusSucceeded {
		t.Fatalf("%+v %v", res, err)
	}
	var raw []byte
	if err := pool.QueryRow(ctx, `SELECT completion_json FROM automation_runs WHERE id = $1`, id).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var got runs.Completion
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.PRURLs, []string{"https://github.com/acme/app/pull/7"}) {
		t.Fatalf("completion pr_urls %v", got.PRURLs)
	}
}
