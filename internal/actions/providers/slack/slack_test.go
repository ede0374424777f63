package slack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/providers/remote"
	"github.com/proliferate/proliferate/internal/actions/providers/slack"
	"github.com/proliferate/proliferate/internal/slack/slackfake"
)

const token = "xoxb-1234-5678-secretbot"

// recorder sits in front of slackfake (which does not keep thread_ts) and
// records each request as sent.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	Method, Path, Auth, ContentType string
	Body                            map[string]any
}

func (r *recorder) last(t *testing.T) recorded {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		t.Fatal("no request")
	}
	return r.reqs[len(r.reqs)-1]
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

type world struct {
	fake *slackfake.Server
	rec  *recorder
	src  *slack.Source
	ec   actions.ExecContext
}

func setup(t *testing.T) world {
	t.Helper()
	fake := slackfake.New(t)
	fake.AddToken(token, "T1")
	fake.AddChannel("T1", "C100")
	target, _ := url.Parse(fake.URL())
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, recorded{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), body})
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(raw))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return world{fake: fake, rec: rec, src: slack.New(slack.Options{BaseURL: srv.URL + "/api"}),
		ec: actions.ExecContext{OrgID: "org-1", SessionID: "sess-1", Token: token}}
}

func (w world) send(params string) (json.RawMessage, error) {
	return w.src.Execute(context.Background(), "send_message", json.RawMessage(params), w.ec)
}

func TestCatalogAndGuide(t *testing.T) {
	src := slack.New(slack.Options{})
	defs, _ := src.ListActions(context.Background(), actions.ExecContext{})
	if len(defs) != 1 || defs[0].ID != "send_message" || defs[0].Risk != actions.RiskWrite {
		t.Fatalf("catalog %+v", defs)
	}
	for _, bad := range []string{`{"channel":"C1"}`, `{"text":"x"}`, `{"channel":"C1","text":"x","blocks":[]}`, `{"channel":"C1","text":""}`} {
		if actions.Validate(defs[0], json.RawMessage(bad)) == nil {
			t.Errorf("schema accepted %s", bad)
		}
	}
	guide, _ := src.Guide(context.Background(), actions.ExecContext{})
	examples := regexp.MustCompile(`--action send_message --params '(\{[^']*)'`).FindAllStringSubmatch(guide, -1)
	if len(examples) < 2 {
		t.Fatalf("guide has %d examples", len(examples))
	}
	for _, m := range examples {
		if err := actions.Validate(defs[0], json.RawMessage(m[1])); err != nil {
			t.Errorf("guide example %s: %v", m[1], err)
		}
	}
}

func TestSendMessageAndThreadReply(t *testing.T) {
	w := setup(t)
	out, err := w.send(`{"channel":"C100","text":"Deployed *ENG-1*"}`)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		OK      bool
		Channel string
		TS      string
	}
	if err := json.Unmarshal(out, &res); err != nil || !res.OK || res.Channel != "C100" || res.TS == "" {
		t.Fatalf("result %s", out)
	}
	r := w.rec.last(t)
	if r.Method != "POST" || r.Path != "/api/chat.postMessage" || r.Auth != "Bearer "+token ||
		!strings.HasPrefix(r.ContentType, "application/json") || len(r.Body) != 2 || r.Body["channel"] != "C100" || r.Body["text"] != "Deployed *ENG-1*" {
		t.Fatalf("request %+v", r)
	}

	if _, err := w.send(`{"channel":"C100","text":"Done.","thread_ts":"` + res.TS + `"}`); err != nil {
		t.Fatal(err)
	}
	if r := w.rec.last(t); r.Body["thread_ts"] != res.TS {
		t.Fatalf("thread reply body %v", r.Body)
	}
	posts := w.fake.Posts()
	if len(posts) != 2 || posts[0].Text != "Deployed *ENG-1*" || posts[1].Text != "Done." || posts[1].Team != "T1" {
		t.Fatalf("posts %+v", posts)
	}
}

func execError(t *testing.T, err error) *actions.ExecError {
	t.Helper()
	var ee *actions.ExecError
	if !errors.As(err, &ee) {
		t.Fatalf("%v (%T) is not an *actions.ExecError", err, err)
	}
	if strings.Contains(err.Error(), token) {
		t.Fatalf("token in error %v", err)
	}
	return ee
}

func TestSlackErrors(t *testing.T) {
	w := setup(t)
	_, err := w.send(`{"channel":"C999","text":"hi"}`)
	if ee := execError(t, err); ee.Message != "channel_not_found" || ee.Status != 200 {
		t.Fatalf("%+v", ee)
	}
	w.fake.FailWith("chat.postMessage", "not_in_channel", 1)
	_, err = w.send(`{"channel":"C100","text":"hi"}`)
	if ee := execError(t, err); ee.Message != "not_in_channel" {
		t.Fatalf("%+v", ee)
	}
	w.fake.RevokeToken(token)
	_, err = w.send(`{"channel":"C100","text":"hi"}`)
	if ee := execError(t, err); ee.Message != "token_revoked" {
		t.Fatalf("%+v", ee)
	}
	w.fake.RateLimitNext(1, 30)
	_, err = w.send(`{"channel":"C100","text":"hi"}`)
	if ee := execError(t, err); ee.Status != 429 || ee.Message != "slack: ratelimited, retry after 30 s" {
		t.Fatalf("%+v", ee)
	}
	w.fake.FailNext(1, 500)
	_, err = w.send(`{"channel":"C100","text":"hi"}`)
	if ee := execError(t, err); ee.Status != 500 {
		t.Fatalf("%+v", ee)
	}
	if n := w.fake.Calls("chat.postMessage"); n != 5 {
		t.Fatalf("%d calls: a failure was retried", n)
	}
	if len(w.fake.Posts()) != 0 {
		t.Fatal("a failed call posted")
	}
}

func TestInvalidParamsAndUnknownAction(t *testing.T) {
	w := setup(t)
	for _, p := range []string{`{"channel":"C100"}`, `{"channel":"C100","text":7}`, `{"channel":"C100","text":"x","as_user":true}`} {
		_, err := w.send(p)
		var pe *actions.ParamsError
		if !errors.Is(err, remote.ErrInvalidParams) || !errors.As(err, &pe) {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := w.src.Execute(context.Background(), "delete_message", nil, w.ec); !errors.Is(err, actions.ErrUnknownAction) {
		t.Fatalf("%v", err)
	}
	if n := w.rec.count(); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

func TestHangingServerTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	src := slack.New(slack.Options{BaseURL: srv.URL + "/api", Timeout: 150 * time.Millisecond})
	start := time.Now()
	_, err := src.Execute(context.Background(), "send_message", json.RawMessage(`{"channel":"C1","text":"x"}`),
		actions.ExecContext{Token: token})
	ee := execError(t, err)
	if ee.Status != 0 || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("%+v", ee)
	}
}
