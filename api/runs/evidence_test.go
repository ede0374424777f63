package runs_test

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/evidence"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/query"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

// A run's detail lists the verification evidence its session's agent
// uploaded (verify), with the session to download it from; a run without
// evidence lists none, and another organization sees nothing.
func TestRunDetailListsEvidence(t *testing.T) {
	e := newEnv(t)
	o := newOrg(t, e)
	id := run(t, e, o, runs.StatusRunning)
	bare := run(t, e, o, runs.StatusRunning)
	sid := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{SessionType: "automation", ClientType: "automation",
		AutomationID: o.AutomationID, RunID: id})
	blobs, err := blobstore.Filesystem(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&evidence.Store{Pool: e.Deps.Pool, Blobs: blobs}).Record(t.Context(), evidence.Call{OrgID: o.ID, SessionID: sid,
		RunID: &id, ToolCallID: "v-1", Summary: "green", Files: []evidence.File{{Path: "report.txt", Data: []byte("ok\n")}}}); err != nil {
		t.Fatal(err)
	}
	var d query.Detail
	e.Do(t, http.MethodGet, "/runs/"+id, o.Member.Token, nil).Expect(t, http.StatusOK, &d)
	if len(d.Evidence) != 1 || d.Evidence[0].SessionID != sid || d.Evidence[0].Path != "report.txt" ||
		d.Evidence[0].RunID == nil || *d.Evidence[0].RunID != id || d.Evidence[0].SizeBytes != 3 {
		t.Fatalf("evidence %+v", d.Evidence)
	}
	e.Do(t, http.MethodGet, "/runs/"+bare, o.Member.Token, nil).Expect(t, http.StatusOK, &d)
	if d.Evidence == nil || len(d.Evidence) != 0 {
		t.Fatalf("a run without evidence: %+v", d.Evidence)
	}
	e.Do(t, http.MethodGet, "/runs/"+id, newOrg(t, e).Member.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")
}
