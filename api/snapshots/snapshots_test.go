package snapshots_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	identityapi "github.com/proliferate/proliferate/api/identity"
	snapshotsapi "github.com/proliferate/proliferate/api/snapshots"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/snapshots"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	*apitest.Env
	t    *testing.T
	dir  string
	book *snapshots.Book
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	prov, err := local.New(local.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	limits := snapshots.StaticLimits{MaxPerOrg: 25, RetentionDays: 10}
	e := apitest.New(t, []func(*api.Server) error{identityapi.Register,
		snapshotsapi.RegisterWith(snapshotsapi.Options{Limits: limits, Providers: []sandbox.Provider{prov}})})
	return &env{Env: e, t: t, dir: dir,
		book: snapshots.New(snapshots.Deps{Pool: e.Deps.Pool, Limits: limits, Providers: []sandbox.Provider{prov}})}
}

var seq atomic.Int64

func (e *env) file(id string) string { return filepath.Join(e.dir, "snapshots", id+".tar.gz") }

// snap stores a snapshot file of the session, records it created age ago
// and makes it the session's snapshot when current.
func (e *env) snap(org, session string, age time.Duration, bytes int64, current bool) string {
	e.t.Helper()
	ctx := context.Background()
	id := fmt.Sprintf("snap_api%d_%d", seq.Add(1), time.Now().UnixNano())
	if err := os.WriteFile(e.file(id), []byte("tar"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if err := e.book.Record(ctx, sessions.Session{ID: session, OrgID: org, SandboxProvider: "local"},
		sandbox.SnapshotInfo{ID: id, Bytes: bytes}, "idle"); err != nil {
		e.t.Fatal(err)
	}
	e.exec(`UPDATE session_snapshots SET created_at = now() - $2::interval WHERE id = $1`, id, age)
	if current {
		e.exec(`UPDATE sessions SET snapshot_id = $2 WHERE id = $1`, session, id)
	}
	return id
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.Deps.Pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatal(err)
	}
}

func TestListShowsTheOrgsLiveSnapshotsWithSummaryAndPages(t *testing.T) {
	e := newEnv(t)
	owner, member := e.NewUser(t), e.NewUser(t)
	e.AddMember(t, member, owner.OrgID, auth.RoleMember)
	org := owner.OrgID
	s1 := sessionstest.New(t, e.Deps.Pool, org, sessionstest.Options{Status: sessions.StatusPaused})
	s2 := sessionstest.New(t, e.Deps.Pool, org, sessionstest.Options{Status: sessions.StatusRunning})
	e.exec(`UPDATE sessions SET auto_delete_days = 3 WHERE id = $1`, s1)
	oldest := e.snap(org, s1, 3*time.Hour, 100, false)
	middle := e.snap(org, s1, 2*time.Hour, 200, true)
	newest := e.snap(org, s2, time.Hour, 400, true)
	deleted := e.snap(org, s2, 30*time.Minute, 800, false)
	e.exec(`UPDATE session_snapshots SET deleted_at = now(), delete_reason = 'manual' WHERE id = $1`, deleted)
	stranger := e.NewUser(t)
	e.snap(stranger.OrgID, sessionstest.New(t, e.Deps.Pool, stranger.OrgID, sessionstest.Options{}), time.Hour, 1600, false)

	var p1, p2 snapshotsapi.List
	e.Do(t, http.MethodGet, "/snapshots?limit=2", member.Token, nil).Expect(t, http.StatusOK, &p1)
	if len(p1.Items) != 2 || p1.Items[0].ID != newest || p1.Items[1].ID != middle || p1.NextCursor == "" {
		t.Fatalf("first page = %+v", p1)
	}
	want := snapshotsapi.Summary{Count: 3, Bytes: 700, Limit: 25, RetentionDays: 10}
	if p1.Summary != want {
		t.Fatalf("summary = %+v, want %+v", p1.Summary, want)
	}
	if !p1.Items[0].InUse || p1.Items[0].SessionID != s2 || p1.Items[0].Kind != "idle" || p1.Items[0].Bytes != 400 {
		t.Fatalf("item = %+v", p1.Items[0])
	}
	// Retention: the lesser of the session's 3 days and the org's 10.
	if exp := p1.Items[1].ExpiresAt; exp == nil || exp.Sub(p1.Items[1].CreatedAt) != 3*24*time.Hour {
		t.Fatalf("expires_at of a 3-day session's snapshot = %v (created %v)", exp, p1.Items[1].CreatedAt)
	}
	if exp := p1.Items[0].ExpiresAt; exp == nil || exp.Sub(p1.Items[0].CreatedAt) != 7*24*time.Hour {
		t.Fatalf("expires_at with the default 7 auto_delete_days = %v", exp)
	}
	e.Do(t, http.MethodGet, "/snapshots?limit=2&cursor="+p1.NextCursor, member.Token, nil).Expect(t, http.StatusOK, &p2)
	if len(p2.Items) != 1 || p2.Items[0].ID != oldest || p2.Items[0].InUse || p2.NextCursor != "" {
		t.Fatalf("second page = %+v", p2)
	}

	var bySession snapshotsapi.List
	e.Do(t, http.MethodGet, "/snapshots?session_id="+s1, member.Token, nil).Expect(t, http.StatusOK, &bySession)
	if len(bySession.Items) != 2 || bySession.Items[0].ID != middle || bySession.Items[1].ID != oldest {
		t.Fatalf("session filter = %+v", bySession.Items)
	}
	// Another organization's session filters to nothing.
	var none snapshotsapi.List
	e.Do(t, http.MethodGet, "/snapshots?session_id="+s1, stranger.Token, nil).Expect(t, http.StatusOK, &none)
	if len(none.Items) != 0 || none.Summary.Count != 1 {
		t.Fatalf("stranger sees %+v", none)
	}

	e.Do(t, http.MethodGet, "/snapshots?session_id=nope", member.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	e.Do(t, http.MethodGet, "/snapshots?cursor=garbage", member.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	e.Do(t, http.MethodGet, "/snapshots?limit=0", member.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	e.Do(t, http.MethodGet, "/snapshots", "", nil).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)
}

func TestDeleteIsForAdminsOfTheOrgAndClearsTheSession(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	owner, admin, member, org := o.Owner, o.Admin, o.Member, o.ID
	sess := sessionstest.New(t, e.Deps.Pool, org, sessionstest.Options{Status: sessions.StatusPaused})
	id := e.snap(org, sess, time.Hour, 100, true)
	stranger := e.NewUser(t)
	foreign := e.snap(stranger.OrgID, sessionstest.New(t, e.Deps.Pool, stranger.OrgID, sessionstest.Options{}), time.Hour, 1, false)

	e.Do(t, http.MethodDelete, "/snapshots/"+id, member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	// Another organization's snapshot is not found, and stays.
	e.Do(t, http.MethodDelete, "/snapshots/"+foreign, admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if _, err := os.Stat(e.file(foreign)); err != nil || e.CountRows(t, "session_snapshots", "id = $1 AND deleted_at IS NULL", foreign) != 1 {
		t.Fatal("another organization's snapshot was touched")
	}
	for _, bad := range []string{"..%2F..%2Fetc", "snap%20x", "does_not_exist"} {
		e.Do(t, http.MethodDelete, "/snapshots/"+bad, admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	if e.CountRows(t, "session_snapshots", "id = $1 AND deleted_at IS NULL", id) != 1 {
		t.Fatal("refused deletes changed the snapshot")
	}

	e.Do(t, http.MethodDelete, "/snapshots/"+id, admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	if e.CountRows(t, "session_snapshots", `id = $1 AND delete_reason = 'manual' AND provider_deleted_at IS NOT NULL`, id) != 1 {
		t.Fatal("snapshot not marked deleted (manual) and purged")
	}
	if _, err := os.Stat(e.file(id)); !os.IsNotExist(err) {
		t.Fatalf("snapshot file still on the provider: %v", err)
	}
	if e.CountRows(t, "sessions", "id = $1 AND snapshot_id IS NULL", sess) != 1 {
		t.Fatal("session still references the deleted snapshot")
	}
	e.Do(t, http.MethodDelete, "/snapshots/"+id, owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)

	var l snapshotsapi.List
	e.Do(t, http.MethodGet, "/snapshots", owner.Token, nil).Expect(t, http.StatusOK, &l)
	if len(l.Items) != 0 || l.Summary.Count != 0 {
		t.Fatalf("list after delete = %+v", l)
	}
}

func TestRoutesAreDocumented(t *testing.T) {
	e := newEnv(t)
	doc := e.Server.OpenAPI()
	paths, _ := doc["paths"].(map[string]map[string]any)
	for p, method := range map[string]string{"/api/v1/snapshots": "get", "/api/v1/snapshots/{id}": "delete"} {
		if _, ok := paths[p][method]; !ok {
			t.Errorf("OpenAPI lacks %s %s", method, p)
		}
	}
}
