package gateway_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/protocol"
	actinv "github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// frameOf decodes a frame's type, status and invocation id.
func frameOf(t *testing.T, b []byte) (typ, status, invocationID string) {
	t.Helper()
	var f struct {
		Type       string            `json:"type"`
		Status     string            `json:"status"`
		Invocation actinv.Invocation `json:"invocation"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("frame %s: %v", b, err)
	}
	return f.Type, f.Status, f.Invocation.ID
}

// Each invocation status maps to the message the spec names (pending →
// request, executed → completed with status, denied/expired → result);
// intermediate statuses are not announced.
func TestActionMessage(t *testing.T) {
	for status, want := range map[string]string{
		actinv.StatusPending:   protocol.MsgActionApprovalRequest,
		actinv.StatusCompleted: protocol.MsgActionCompleted,
		actinv.StatusFailed:    protocol.MsgActionCompleted,
		actinv.StatusDenied:    protocol.MsgActionApprovalResult,
		actinv.StatusExpired:   protocol.MsgActionApprovalResult,
		actinv.StatusApproved:  "",
		actinv.StatusExecuting: "",
	} {
		msg := gateway.ActionMessage(actinv.Invocation{ID: "i", Status: status})
		if want == "" {
			if msg != nil {
				t.Fatalf("%s: announced %+v", status, msg)
			}
			continue
		}
		b, _ := json.Marshal(msg)
		typ, st, id := frameOf(t, b)
		if typ != want || id != "i" || (want != protocol.MsgActionApprovalRequest && st != status) {
			t.Fatalf("%s: %s", status, b)
		}
	}
}

// A change noticed on an instance without the session's hub reaches the
// clients on the instance that has it (through Redis); one noticed where
// the hub lives is broadcast directly. A malformed frame on the channel is
// ignored and the relay keeps working; Close unsubscribes.
func TestActionNotifierAcrossInstances(t *testing.T) {
	w := newWorld(t)
	g1, g2 := w.start(t, "a"), w.start(t, "b")
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	st, c := dialWS(t, g1, sid, owner.Token, false)
	if st != 101 {
		t.Fatal(st)
	}
	readUntil(t, c, protocol.MsgInit)
	ctx := context.Background()
	rdb := w.api.Deps.Redis

	// Garbage on the channel first: it must not stop the relay.
	for _, junk := range []string{"not json", `{"session_id":"","frame":{}}`, `{"session_id":"` + sid + `"}`} {
		if err := rdb.Publish(ctx, gateway.SessionFramesChannel, junk).Err(); err != nil {
			t.Fatal(err)
		}
	}

	remote := gateway.NewActionNotifier(gateway.NewSessionFrames(g2.hubs, rdb, nil), nil)
	denied := actinv.Invocation{ID: uuid.NewString(), SessionID: sid, OrgID: owner.OrgID, Status: actinv.StatusDenied}
	remote.InvocationChanged(ctx, denied)
	typ, status, id := frameOf(t, readUntil(t, c, protocol.MsgActionApprovalResult))
	if typ != protocol.MsgActionApprovalResult || status != actinv.StatusDenied || id != denied.ID {
		t.Fatalf("remote denial: %s %s %s", typ, status, id)
	}

	// On the owning instance the frame goes out without Redis: a
	// cancelled context does not stop it.
	local := gateway.NewActionNotifier(gateway.NewSessionFrames(g1.hubs, rdb, nil), nil)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	done := actinv.Invocation{ID: uuid.NewString(), SessionID: sid, Status: actinv.StatusCompleted}
	local.InvocationChanged(cctx, done)
	typ, status, id = frameOf(t, readUntil(t, c, protocol.MsgActionCompleted))
	if status != actinv.StatusCompleted || id != done.ID {
		t.Fatalf("local completion: %s %s %s", typ, status, id)
	}

	// Close unsubscribes both relays promptly.
	numsub := func() int64 {
		n, err := rdb.PubSubNumSub(ctx, gateway.SessionFramesChannel).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n[gateway.SessionFramesChannel]
	}
	before := numsub()
	if before < 2 {
		t.Fatalf("%d subscribers, want at least 2", before)
	}
	start := time.Now()
	cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	g2.srv.Close(cctx)
	if time.Since(start) > 5*time.Second {
		t.Fatalf("Close took %s", time.Since(start))
	}
	testenv.Eventually(t, 5*time.Second, "g2 unsubscribed", func() bool { return numsub() <= before-1 })
}
