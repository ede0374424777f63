package agentsim_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/internal/agent/opencode"
)

// The simulator speaks OpenCode's wire format: the real opencode client
// reads its history, status, abort and event stream.
func TestSimulatorSpeaksOpenCodeProtocol(t *testing.T) {
	ctx := context.Background()
	srv := agentsim.New(agentsim.Options{Password: "pw", HeartbeatEvery: 50 * time.Millisecond})
	hs := httptest.NewServer(srv.Handler())
	defer func() { srv.Close(); hs.CloseClientConnections(); hs.Close() }()

	bad, _ := opencode.NewClient(hs.URL, opencode.ClientOptions{Password: "nope"})
	var apiErr *opencode.APIError
	if _, err := bad.Health(ctx); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("wrong password: %v", err)
	}
	oc, _ := opencode.NewClient(hs.URL, opencode.ClientOptions{Password: "pw"})
	stream, err := oc.Events(ctx, opencode.EventsOptions{HeartbeatTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	sess, err := oc.CreateSession(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := oc.PromptAsync(ctx, sess.ID, []opencode.PartInput{opencode.TextPart("[[tokens:3]][[tool:bash]]")}, opencode.PromptOptions{}); err != nil {
		t.Fatal(err)
	}
	var deltas string
	var toolStates []string
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case opencode.EventMessagePartDelta:
			deltas += ev.Delta.Delta
		case opencode.EventMessagePartUpdated:
			if ev.Part.Type == opencode.PartTool {
				toolStates = append(toolStates, ev.Part.State.Status)
			}
		}
		if ev.Type == opencode.EventSessionIdle {
			break
		}
	}
	if deltas != "tok0 tok1 tok2 " || len(toolStates) != 3 || toolStates[2] != opencode.ToolCompleted {
		t.Fatalf("deltas %q tool states %v", deltas, toolStates)
	}
	hist, err := oc.Messages(ctx, sess.ID)
	if err != nil || len(hist) != 2 || hist[1].Text() != "tok0 tok1 tok2 " {
		t.Fatalf("history %+v %v", hist, err)
	}

	// A hanging turn is busy until aborted, then reports MessageAbortedError.
	if err := oc.PromptAsync(ctx, sess.ID, []opencode.PartInput{opencode.TextPart("[[hang]]")}, opencode.PromptOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := oc.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st[sess.ID].Type == "busy" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never busy")
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	if err := oc.Abort(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == opencode.EventSessionError {
			if ev.Error == nil || ev.Error.Name != "MessageAbortedError" {
				t.Fatalf("abort error %+v", ev.Error)
			}
			break
		}
	}
	if _, err := oc.GetSession(ctx, "missing"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("missing session: %v", err)
	}
}
