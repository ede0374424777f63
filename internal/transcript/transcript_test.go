package transcript_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/transcript"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestCutKeepsHeadAndTailWithinLimit(t *testing.T) {
	s := strings.Repeat("é", 50_000) + "END"
	out, cut := transcript.Cut(s, 1000)
	if !cut || len(out) > 1000 || !strings.HasSuffix(out, "END") || !strings.HasPrefix(out, "éé") || !strings.Contains(out, "bytes cut]") {
		t.Fatalf("Cut = %d bytes, cut=%v: %q…", len(out), cut, out[:40])
	}
	if !utf8.ValidString(out) {
		t.Fatal("cut text is not valid UTF-8")
	}
	if out, cut := transcript.Cut("short", 1000); cut || out != "short" {
		t.Fatalf("short text changed: %q", out)
	}
}

func TestCutJSONStructural(t *testing.T) {
	items := make([]string, 5000)
	for i := range items {
		items[i] = strings.Repeat("x", 100)
	}
	raw, _ := json.Marshal(map[string]any{"command": "cat " + strings.Repeat("y", 100_000), "files": items, "n": 42})
	out, cut := transcript.CutJSON(raw, transcript.MaxToolInput, nil)
	if !cut || len(out) > transcript.MaxToolInput {
		t.Fatalf("CutJSON = %d bytes, cut=%v", len(out), cut)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("cut input is not JSON: %v", err)
	}
	if v["n"] != float64(42) || !strings.HasPrefix(v["command"].(string), "cat yyy") {
		t.Fatalf("structure lost: %v", v["n"])
	}
	if out, cut := transcript.CutJSON(json.RawMessage(`{"a":1}`), 100, nil); cut || out != `{"a":1}` {
		t.Fatalf("small input changed: %s", out)
	}
	if out, _ := transcript.CutJSON(json.RawMessage(`not json`), 100, nil); out != `"not json"` {
		t.Fatalf("non-JSON input = %s", out)
	}
}

// TestEventRedactsBeforeCutting: the session's secrets, the organization's
// redactor's and the token formats are replaced everywhere (text, tool
// title, input keys and values, output, error), and a secret straddling
// where a cut falls is redacted whole, not cut in half.
func TestEventRedactsBeforeCutting(t *testing.T) {
	const envSecret = "env-secret-value-123456"
	const orgSecret = "org-secret-value-abcdef"
	org := actions.NewRedactor(orgSecret)
	// The secret sits where the head of a cut output ends.
	long := strings.Repeat("a", transcript.MaxToolOutput*2/3-10) + envSecret + strings.Repeat("b", transcript.MaxToolOutput*3)
	in, _ := json.Marshal(map[string]any{"command": "echo " + orgSecret, envSecret: []string{envSecret}})
	ev := transcript.Event(transcript.Entry{OrgID: uuid.NewString(), SessionID: uuid.NewString(), Kind: schemas.TranscriptToolCallKind,
		Text: "token ghp_" + strings.Repeat("A", 36) + " and " + envSecret,
		Tool: &transcript.Tool{CallID: "c1", Name: "bash", Status: "completed", Title: "uses " + orgSecret, Input: in, Output: long,
			Error: "failed with " + envSecret},
		Secrets: []string{envSecret}, IDKey: "tool:c1"}, org)
	b, _ := json.Marshal(ev.Payload)
	for _, s := range []string{envSecret, orgSecret, "ghp_AAAA", envSecret[:8]} {
		if strings.Contains(string(b), s) {
			t.Fatalf("%q survived redaction: %s", s, b[:200])
		}
	}
	p := ev.Payload.(*schemas.SessionTranscript)
	if !p.Tool.Truncated || len(p.Tool.Output) > transcript.MaxToolOutput || !json.Valid([]byte(p.Tool.InputJSON)) {
		t.Fatalf("tool = truncated %v, output %d bytes, input %s", p.Tool.Truncated, len(p.Tool.Output), p.Tool.InputJSON)
	}
	// Derived ids: the same part twice is the same event.
	again := transcript.Event(transcript.Entry{OrgID: ev.OrgID, SessionID: p.SessionID, Kind: schemas.TranscriptToolCallKind,
		Tool: &transcript.Tool{CallID: "c1"}, IDKey: "tool:c1"}, nil)
	if again.EventID != ev.EventID {
		t.Fatal("the same tool call got two event ids")
	}
}

// TestPublisherWritesRedactedEventsToTheOutbox: what a publisher writes is
// in the outbox for sessions.transcript, keyed by session, in order, and
// decodes to redacted entries.
func TestPublisherWritesRedactedEventsToTheOutbox(t *testing.T) {
	pool := testenv.Postgres(t)
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	const secret = "publisher-secret-987654"
	pub := transcript.NewPublisher(transcript.PublisherOptions{Pool: pool, Codec: codec,
		Redactors: staticRedactors{actions.NewRedactor()}})
	defer pub.Close(context.Background())
	org, sess := uuid.NewString(), uuid.NewString()
	for i := range 20 {
		pub.Record(transcript.Entry{OrgID: org, SessionID: sess, Kind: schemas.TranscriptAgentMessage,
			Text: "part " + string(rune('a'+i)) + " " + secret, Secrets: []string{secret}})
	}
	if err := pub.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(context.Background(), `SELECT value FROM outbox WHERE topic = $1 AND key = $2 ORDER BY id`, topics.SessionsTranscript, sess)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var v []byte
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(v), secret) {
			t.Fatal("secret in the outbox")
		}
		ev, err := codec.Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		p := ev.Payload.(*schemas.SessionTranscript)
		if want := "part " + string(rune('a'+n)) + " " + actions.Redacted; *p.Text != want {
			t.Fatalf("entry %d = %q, want %q", n, *p.Text, want)
		}
		n++
	}
	if n != 20 || pub.Published() != 20 || pub.Dropped() != 0 {
		t.Fatalf("%d rows, published %d, dropped %d", n, pub.Published(), pub.Dropped())
	}
}

type staticRedactors struct{ r *actions.Redactor }

func (s staticRedactors) Redactor(context.Context, string) (*actions.Redactor, error) {
	return s.r, nil
}
