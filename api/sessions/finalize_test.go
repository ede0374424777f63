package sessions_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	sessionsapi "github.com/proliferate/proliferate/api/sessions"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// POST /sessions/:id/finalize: a running setup session's snapshot (taken
// through the gateway) becomes its configuration's ready snapshot; other
// sessions, other states, other people and other organizations are refused
// with nothing changed. (The boot from the finalized snapshot is tested in
// app with the isolated provider.)
func TestFinalizeSetupSession(t *testing.T) {
	pool := testenv.Postgres(t)
	gw := &gateway{store: &sessions.Store{Pool: pool, Codec: codec}}
	o := sessionsapi.Options{Codec: codec, Runtime: gw, Prebuilt: &prebuilds.Resolver{Pool: pool, Toolchain: "test"}}
	e := &env{Env: apitest.New(t, []func(*api.Server) error{sessionsapi.RegisterWith(o)}), gw: gw}
	org := newOrg(t, e)
	cfg := e.configuration(t, org.ID)
	status := func() (string, *string) {
		var st string
		var snap *string
		if err := pool.QueryRow(context.Background(), `SELECT snapshot_status, snapshot_id FROM configurations WHERE id = $1`, cfg).Scan(&st, &snap); err != nil {
			t.Fatal(err)
		}
		return st, snap
	}
	newSession := func(typ, st string) string {
		return sessionstest.New(t, pool, org.ID, sessionstest.Options{CreatedBy: org.Member.ID, ConfigurationID: cfg,
			SessionType: typ, Status: st, SandboxID: "sb"})
	}
	finalize := func(id, tok string) *apitest.Response {
		return e.Do(t, http.MethodPost, "/sessions/"+id+"/finalize", tok, nil)
	}

	coding := newSession(sessions.TypeCoding, sessions.StatusRunning)
	finalize(coding, org.Member.Token).ExpectError(t, http.StatusConflict, "not_setup_session")
	paused := newSession(sessions.TypeSetup, sessions.StatusPaused)
	finalize(paused, org.Member.Token).ExpectError(t, http.StatusConflict, "invalid_transition")
	setup := newSession(sessions.TypeSetup, sessions.StatusRunning)
	finalize(setup, org.Member2.Token).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	stranger := newOrg(t, e)
	finalize(setup, stranger.Owner.Token).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if st, _ := status(); st != "none" || len(gw.Calls()) != 0 {
		t.Fatalf("refused finalizations changed something: status %s, gateway calls %v", st, gw.Calls())
	}

	var res sessionsapi.FinalizeResponse
	finalize(setup, org.Member.Token).Expect(t, http.StatusOK, &res)
	if res.SnapshotID != "snap-"+setup || res.ConfigurationID != cfg || res.SnapshotStatus != "ready" {
		t.Fatalf("finalize %+v", res)
	}
	if st, snap := status(); st != "ready" || snap == nil || *snap != res.SnapshotID {
		t.Fatalf("configuration snapshot %s %v, want ready %s", st, snap, res.SnapshotID)
	}
}
