package app_test

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/testenv"
)

// The whole platform (dev: embedded Kafka, outbox relay, the
// session-materializer group, the API, the gateway with bubblewrap and the
// real OpenCode on the scripted model): what the agent says reaches the
// messages API and search through sessions.transcript; a paused session's
// init carries its history; another organization reads nothing of it.
func TestTranscriptThroughThePlatform(t *testing.T) {
	dir := t.TempDir()
	cfg := devConfig(t, filepath.Join(dir, "kafka"), "RUN_SESSIONS", "gateway")
	p := &pipeline{dev: startDev(t, cfg)}
	base := "http://" + p.dev.app.APIAddr()
	signup := func(name string) string {
		var out struct {
			AccessToken string `json:"access_token"`
		}
		if code := apiCall(t, base, "POST", "/auth/signup", "", map[string]any{"email": name + "-" + time.Now().Format("150405.000000") + "@example.com",
			"password": "correct horse battery", "name": name}, &out); code != 201 {
			t.Fatalf("signup %d", code)
		}
		return out.AccessToken
	}
	token, other := signup("tr"), signup("mallory")
	var sess struct {
		ID string `json:"id"`
	}
	if code := apiCall(t, base, "POST", "/sessions", token, map[string]any{"title": "Transcript"}, &sess); code != 201 {
		t.Fatalf("create session %d", code)
	}
	gw := client.New("http://"+p.dev.app.GatewayAddr(), token)
	var got frames
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := gw.Connect(ctx, sess.ID, client.Handler{OnMessage: got.add})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "init", func() bool { return got.count(protocol.MsgInit) > 0 })
	if err := conn.Prompt("Say hello to the wandering albatross. [[script:hello]]"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 120*time.Second, "the answer", func() bool { return got.count(protocol.MsgMessageComplete) > 0 })
	done := time.Now()

	type message struct {
		Kind string  `json:"kind"`
		Text *string `json:"text"`
	}
	var page struct {
		Items []message `json:"items"`
	}
	has := func(kind, sub string) bool {
		for _, m := range page.Items {
			if m.Kind == kind && m.Text != nil && strings.Contains(*m.Text, sub) {
				return true
			}
		}
		return false
	}
	testenv.Eventually(t, 60*time.Second, "the agent's answer in the messages API", func() bool {
		page.Items = nil
		apiCall(t, base, "GET", "/sessions/"+sess.ID+"/messages?limit=100", token, nil, &page)
		return has("agent_message", "scripted model")
	})
	t.Logf("measured: answer queryable %s after message_complete (gateway → outbox → relay → kafka → session-materializer → API)", time.Since(done))
	if !has("user_message", "wandering albatross") {
		t.Fatalf("messages: %+v", page.Items)
	}
	var hits struct {
		Items []struct {
			SessionID string `json:"session_id"`
		} `json:"items"`
	}
	// The search index follows the history (the group's indexer).
	testenv.Eventually(t, 60*time.Second, "search to find the agent's answer", func() bool {
		hits.Items = nil
		code := apiCall(t, base, "GET", "/sessions/search?q="+url.QueryEscape("scripted model"), token, nil, &hits)
		if code != 200 {
			t.Fatalf("search %d", code)
		}
		return len(hits.Items) > 0 && hits.Items[0].SessionID == sess.ID
	})
	// Another organization: not found, nothing found.
	if code := apiCall(t, base, "GET", "/sessions/"+sess.ID+"/messages", other, nil, nil); code != 404 {
		t.Fatalf("other org reads messages: %d", code)
	}
	hits.Items = nil
	if code := apiCall(t, base, "GET", "/sessions/search?q="+url.QueryEscape("scripted model"), other, nil, &hits); code != 200 || len(hits.Items) != 0 {
		t.Fatalf("other org search %d: %+v", code, hits)
	}

	// Paused: its sandbox is gone; a new client's init has the history.
	conn.Close()
	if _, err := gw.Pause(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	var again frames
	conn2, err := gw.Connect(ctx, sess.ID, client.Handler{OnMessage: again.add})
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	testenv.Eventually(t, 60*time.Second, "init after pause", func() bool { return again.count(protocol.MsgInit) > 0 })
	again.mu.Lock()
	var init protocol.InitMessage
	for _, m := range again.list {
		if m.Type == protocol.MsgInit {
			_ = m.Decode(&init)
			break
		}
	}
	again.mu.Unlock()
	if len(init.Messages) < 2 || !strings.Contains(init.Messages[0].Content, "wandering albatross") ||
		!strings.Contains(init.Messages[len(init.Messages)-1].Content, "scripted model") {
		t.Fatalf("init after pause: status %s, messages %+v", init.Session.Status, init.Messages)
	}
}
