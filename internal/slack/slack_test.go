package slack_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/slack"
	"github.com/proliferate/proliferate/internal/slack/slackfake"
)

const token = "xoxb-test-secret-token-1"

func setup(t *testing.T) (*slackfake.Server, *slack.Client) {
	f := slackfake.New(t)
	f.AddToken(token, "T1")
	f.AddChannel("T1", "C1")
	return f, slack.New(slack.Options{BaseURL: f.URL()})
}

func TestPostAndOpen(t *testing.T) {
	f, c := setup(t)
	ctx := context.Background()
	res, err := c.ChatPostMessage(ctx, token, slack.Message{Channel: "C1", Text: "hi", Blocks: []slack.Block{slack.Section("*hi*"), slack.Context("ctx")}})
	if err != nil || res.TS == "" || res.Channel != "C1" {
		t.Fatalf("post: %+v %v", res, err)
	}
	dm, err := c.ConversationsOpen(ctx, token, "U42")
	if err != nil || dm != "D42" {
		t.Fatalf("open: %q %v", dm, err)
	}
	if _, err := c.ChatPostMessage(ctx, token, slack.Message{Channel: dm, Text: "dm"}); err != nil {
		t.Fatal(err)
	}
	posts := f.Posts()
	if len(posts) != 2 || posts[0].Text != "hi" || len(posts[0].Blocks) != 2 || posts[0].Blocks[0]["type"] != "section" ||
		posts[1].Channel != "D42" || posts[1].Team != "T1" {
		t.Fatalf("posts: %+v", posts)
	}
	if opens := f.Opens(); len(opens) != 1 || opens[0].User != "U42" {
		t.Fatalf("opens: %+v", opens)
	}
}

// Slack's {"ok": false} codes map to permanent errors, except the
// transient ones; the token never appears in an error.
func TestEnvelopeErrors(t *testing.T) {
	f, c := setup(t)
	ctx := context.Background()
	cases := []struct {
		name      string
		prepare   func()
		tok, ch   string
		code      string
		retryable bool
	}{
		{"channel_not_found", func() {}, token, "C404", "channel_not_found", false},
		{"invalid_auth", func() {}, "xoxb-unknown-token", "C1", "invalid_auth", false},
		{"not_in_channel", func() { f.FailWith("chat.postMessage", "not_in_channel", 1) }, token, "C1", "not_in_channel", false},
		{"account_inactive", func() { f.FailWith("", "account_inactive", 1) }, token, "C1", "account_inactive", false},
		{"internal_error", func() { f.FailWith("", "internal_error", 1) }, token, "C1", "internal_error", true},
		{"token_revoked", func() { f.AddToken("xoxb-revoked", "T1"); f.RevokeToken("xoxb-revoked") }, "xoxb-revoked", "C1", "token_revoked", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.prepare()
			_, err := c.ChatPostMessage(ctx, tc.tok, slack.Message{Channel: tc.ch, Text: "x"})
			var se *slack.Error
			if !errors.As(err, &se) || se.Code != tc.code || se.Retryable != tc.retryable ||
				slack.Permanent(err) == tc.retryable || slack.Retryable(err) != tc.retryable || slack.ErrorCode(err) != tc.code {
				t.Fatalf("got %v", err)
			}
			if strings.Contains(err.Error(), tc.tok) {
				t.Fatalf("token in error: %v", err)
			}
		})
	}
	if len(f.Posts()) != 0 {
		t.Fatalf("failed calls posted: %+v", f.Posts())
	}
}

// HTTP 5xx and network failures are retryable; a later call succeeds.
func TestHTTPFailuresAreRetryable(t *testing.T) {
	f, c := setup(t)
	ctx := context.Background()
	f.FailNext(1, http.StatusInternalServerError)
	_, err := c.ChatPostMessage(ctx, token, slack.Message{Channel: "C1", Text: "x"})
	var se *slack.Error
	if !errors.As(err, &se) || se.Status != 500 || !se.Retryable {
		t.Fatalf("500: %v", err)
	}
	f.FailNext(1, http.StatusBadGateway)
	if _, err := c.ConversationsOpen(ctx, token, "U1"); !slack.Retryable(err) {
		t.Fatalf("502: %v", err)
	}
	if _, err := c.ChatPostMessage(ctx, token, slack.Message{Channel: "C1", Text: "x"}); err != nil {
		t.Fatal(err)
	}

	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	_, err = slack.New(slack.Options{BaseURL: dead.URL}).ChatPostMessage(ctx, token, slack.Message{Channel: "C1", Text: "x"})
	if !errors.As(err, &se) || se.Code != "network" || !se.Retryable || strings.Contains(err.Error(), token) {
		t.Fatalf("network: %v", err)
	}
}

// Every request has its own timeout; a hung Slack is a retryable error.
func TestPerCallTimeout(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hung.Close()
	defer close(release)
	c := slack.New(slack.Options{BaseURL: hung.URL, Timeout: 100 * time.Millisecond})
	start := time.Now()
	_, err := c.ChatPostMessage(context.Background(), token, slack.Message{Channel: "C1", Text: "x"})
	if !slack.Retryable(err) || time.Since(start) > 5*time.Second {
		t.Fatalf("timeout: %v after %s", err, time.Since(start))
	}
}

// A 429 with a short Retry-After is waited out inside the call; a long one
// is returned, retryable, with the wait Slack asked for.
func TestRateLimit(t *testing.T) {
	f, c := setup(t)
	ctx := context.Background()
	f.RateLimitNext(1, 1)
	start := time.Now()
	if _, err := c.ChatPostMessage(ctx, token, slack.Message{Channel: "C1", Text: "x"}); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("Retry-After not honoured: %s", waited)
	}
	if f.Calls("chat.postMessage") != 2 || len(f.Posts()) != 1 {
		t.Fatalf("calls %d posts %d", f.Calls("chat.postMessage"), len(f.Posts()))
	}
	f.RateLimitNext(1, 120)
	_, err := c.ChatPostMessage(ctx, token, slack.Message{Channel: "C1", Text: "x"})
	var se *slack.Error
	if !errors.As(err, &se) || !se.Retryable || se.RetryAfter != 120*time.Second {
		t.Fatalf("long 429: %v", err)
	}
}

// The fake speaks Slack's form encoding too (token in the body).
func TestFakeAcceptsFormBodies(t *testing.T) {
	f, _ := setup(t)
	resp, err := http.PostForm(f.URL()+"/chat.postMessage", url.Values{"token": {token}, "channel": {"C1"}, "text": {"form"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if p := f.Posts(); len(p) != 1 || p[0].Text != "form" {
		t.Fatalf("posts: %+v", p)
	}
	resp, err = http.PostForm(f.URL()+"/chat.postMessage", url.Values{"channel": {"C1"}, "text": {"no token"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(f.Posts()) != 1 {
		t.Fatal("unauthenticated post accepted")
	}
}

func TestEscape(t *testing.T) {
	if got := slack.Escape("a <@U1> & <!channel>"); got != "a &lt;@U1&gt; &amp; &lt;!channel&gt;" {
		t.Fatal(got)
	}
}
