package sessions_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	sessionsapi "github.com/proliferate/proliferate/api/sessions"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/evidence"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

// A session's verification evidence is listed for the members of its
// organization (no blob reference in the answer) and downloaded as an
// attachment with its sniffed type (HTML as text/plain), never sniffed nor
// run by the browser; another organization, another session's path and
// unknown or malformed ids are 404.
func TestEvidenceListAndDownload(t *testing.T) {
	blobs, err := blobstore.Filesystem(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	e := apitest.New(t, []func(*api.Server) error{sessionsapi.RegisterWith(sessionsapi.Options{Codec: codec, Blobs: blobs})})
	owner, member, stranger := e.NewUser(t), e.NewUser(t), e.NewUser(t)
	e.AddMember(t, member, owner.OrgID, auth.RoleMember)
	sid := sessionstest.New(t, e.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	other := sessionstest.New(t, e.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	store := &evidence.Store{Pool: e.Deps.Pool, Blobs: blobs}
	ctx := context.Background()
	items, err := store.Record(ctx, evidence.Call{OrgID: owner.OrgID, SessionID: sid, ToolCallID: "call-1", Summary: "tests pass",
		Files: []evidence.File{{Path: "out/report.txt", Data: []byte("PASS\n")}, {Path: "out/page.html", Data: []byte("<html><script>alert(1)</script>")}}})
	if err != nil || len(items) != 2 {
		t.Fatalf("%+v %v", items, err)
	}
	otherItems, err := store.Record(ctx, evidence.Call{OrgID: owner.OrgID, SessionID: other, ToolCallID: "call-1",
		Files: []evidence.File{{Path: "x.txt", Data: []byte("x")}}})
	if err != nil {
		t.Fatal(err)
	}

	var list sessionsapi.EvidenceList
	r := e.Do(t, "GET", "/sessions/"+sid+"/evidence", member.Token, nil)
	r.Expect(t, http.StatusOK, &list)
	if len(list.Items) != 2 || list.Items[0].Path != "out/report.txt" || list.Items[1].ContentType != "text/plain; charset=utf-8" ||
		list.Items[0].Summary != "tests pass" || strings.Contains(string(r.Body), "file:") {
		t.Fatalf("list %s", r.Body)
	}
	r = e.Do(t, "GET", "/sessions/"+sid+"/evidence/"+items[1].ID+"/content", member.Token, nil)
	if r.Status != http.StatusOK || string(r.Body) != "<html><script>alert(1)</script>" ||
		r.Header.Get("Content-Type") != "text/plain; charset=utf-8" || r.Header.Get("X-Content-Type-Options") != "nosniff" ||
		r.Header.Get("Content-Disposition") != "attachment; filename=page.html" || !strings.HasPrefix(r.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Fatalf("content %d %v %q", r.Status, r.Header, r.Body)
	}

	for _, path := range []string{
		"/sessions/" + sid + "/evidence/" + otherItems[0].ID + "/content",
		"/sessions/" + sid + "/evidence/" + uuid.NewString() + "/content",
		"/sessions/" + sid + "/evidence/nope/content",
		"/sessions/nope/evidence",
	} {
		e.Do(t, "GET", path, owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	e.Do(t, "GET", "/sessions/"+sid+"/evidence", stranger.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, "GET", "/sessions/"+sid+"/evidence/"+items[0].ID+"/content", stranger.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)

	// A session without evidence lists none.
	empty := sessionstest.New(t, e.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	e.Do(t, "GET", "/sessions/"+empty+"/evidence", owner.Token, nil).Expect(t, http.StatusOK, &list)
	if list.Items == nil || len(list.Items) != 0 {
		t.Fatalf("empty list %+v", list)
	}
}
