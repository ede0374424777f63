package sessionhistory_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/sessionhistory"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/transcript"
	"github.com/proliferate/proliferate/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// materialize applies entries to session_messages as the group does, and
// indexes them for search as its indexer does.
func materialize(t *testing.T, e *apitest.Env, org, sess string, texts ...string) {
	t.Helper()
	var rows []transcript.Row
	for i, text := range texts {
		kind := schemas.TranscriptAgentMessage
		if i%2 == 0 {
			kind = schemas.TranscriptUserMessage
		}
		ev := transcript.Event(transcript.Entry{OrgID: org, SessionID: sess, Kind: kind, Text: text, MessageID: fmt.Sprintf("msg_%d", i/2)}, nil)
		r, err := transcript.RowFromEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if _, err := transcript.Apply(context.Background(), e.Deps.Pool, rows); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := transcript.IndexSearch(context.Background(), e.Deps.Pool, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if n < 1000 {
			return
		}
	}
}

func TestMessagesPagedInOrderAndOrgScoped(t *testing.T) {
	e := apitest.New(t, []func(*api.Server) error{sessionhistory.Register})
	alice, mallory := e.NewUser(t), e.NewUser(t)
	sess := sessionstest.New(t, e.Deps.Pool, alice.OrgID, sessionstest.Options{CreatedBy: alice.ID, Status: "stopped", Title: "Fix the flaky test"})
	var texts []string
	for i := range 7 {
		texts = append(texts, fmt.Sprintf("entry number %d", i))
	}
	materialize(t, e, alice.OrgID, sess, texts...)

	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		path := "/sessions/" + sess + "/messages?limit=3"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var page api.Page[transcript.Message]
		e.Do(t, http.MethodGet, path, alice.Token, nil).Expect(t, http.StatusOK, &page)
		for _, m := range page.Items {
			got = append(got, *m.Text)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(texts) {
		t.Fatalf("messages = %v, want %v", got, texts)
	}
	// Another organization's member: the session does not exist for them.
	e.Do(t, http.MethodGet, "/sessions/"+sess+"/messages", mallory.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")
	// Bad input: precise 400s.
	e.Do(t, http.MethodGet, "/sessions/"+sess+"/messages?cursor=garbage", alice.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
	e.Do(t, http.MethodGet, "/sessions/"+sess+"/messages?limit=0", alice.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
	e.Do(t, http.MethodGet, "/sessions/not-a-uuid/messages", alice.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")
}

func TestSearchRankedPagedAndOrgScoped(t *testing.T) {
	e := apitest.New(t, []func(*api.Server) error{sessionhistory.Register})
	alice, mallory := e.NewUser(t), e.NewUser(t)
	s1 := sessionstest.New(t, e.Deps.Pool, alice.OrgID, sessionstest.Options{CreatedBy: alice.ID, Title: "Flaky test"})
	s2 := sessionstest.New(t, e.Deps.Pool, alice.OrgID, sessionstest.Options{CreatedBy: alice.ID, Title: "Other"})
	m1 := sessionstest.New(t, e.Deps.Pool, mallory.OrgID, sessionstest.Options{CreatedBy: mallory.ID, Title: "Mallory's"})
	materialize(t, e, alice.OrgID, s1, "please fix the flaky retry test", "I fixed the flaky retry test by waiting on the channel; the retry test is no longer flaky")
	materialize(t, e, alice.OrgID, s2, "update the changelog", "the changelog mentions the retry")
	materialize(t, e, mallory.OrgID, m1, "mallory's flaky retry test secret plan")

	search := func(u *apitest.User, q string, extra string) sessionhistory.SearchPage {
		var page sessionhistory.SearchPage
		e.Do(t, http.MethodGet, "/sessions/search?q="+url.QueryEscape(q)+extra, u.Token, nil).Expect(t, http.StatusOK, &page)
		return page
	}
	page := search(alice, "flaky retry", "")
	if len(page.Items) != 2 {
		t.Fatalf("hits = %+v", page.Items)
	}
	for _, h := range page.Items {
		if h.SessionID != s1 || h.SessionTitle != "Flaky test" || h.Snippet == "" {
			t.Fatalf("hit = %+v", h)
		}
	}
	if page.Items[0].Rank < page.Items[1].Rank {
		t.Fatal("hits not ranked best first")
	}
	// Paged: one hit per page, all hits once, same order.
	var ids []string
	cursor := ""
	for range 5 {
		p := search(alice, "retry", "&limit=1"+map[bool]string{true: "", false: "&cursor=" + cursor}[cursor == ""])
		for _, h := range p.Items {
			ids = append(ids, h.MessageID)
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	all := search(alice, "retry", "")
	if len(ids) != 3 || len(all.Items) != 3 {
		t.Fatalf("paged %d hits, unpaged %d", len(ids), len(all.Items))
	}
	for i, h := range all.Items {
		if ids[i] != h.MessageID {
			t.Fatalf("paged order differs at %d", i)
		}
	}
	// Mallory finds only her own session's message.
	if p := search(mallory, "flaky retry", ""); len(p.Items) != 1 || p.Items[0].SessionID != m1 {
		t.Fatalf("mallory's hits = %+v", p.Items)
	}
	// A deleted session's messages are no longer found.
	if _, err := e.Deps.Pool.Exec(context.Background(), `DELETE FROM sessions WHERE id = $1`, s2); err != nil {
		t.Fatal(err)
	}
	if p := search(alice, "changelog", ""); len(p.Items) != 0 {
		t.Fatalf("deleted session found: %+v", p.Items)
	}
	e.Do(t, http.MethodGet, "/sessions/search", alice.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
	e.Do(t, http.MethodGet, "/sessions/search?q=x&cursor=nope", alice.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
	e.Do(t, http.MethodGet, "/sessions/search?q=x&limit=101", alice.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
}
