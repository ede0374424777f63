package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

type lockedBuf struct {
	mu sync.Mutex
	sb strings.Builder
}

func (b *lockedBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sb.Write(p)
}

func (b *lockedBuf) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSuffix(b.sb.String(), "\n"), "\n")
}

// tail runs tailRecords from the beginning of topic until want lines were
// printed.
func tail(t *testing.T, seeds []string, codec *schemas.Codec, asJSON bool, want int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics.SessionsTranscript),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out lockedBuf
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tailRecords(ctx, cl, codec, asJSON, &out) }()
	testenv.Eventually(t, 20*time.Second, "tail output", func() bool { return len(out.lines()) >= want && out.lines()[0] != "" })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return out.lines()
}

func TestTopicsTailDecodesRecordsWithHeaders(t *testing.T) {
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	seeds := testenv.Kafka(t, kfake.SeedTopics(1, topics.SessionsTranscript))
	text := "hello from the agent"
	ev := schemas.New("0195a3c2-0000-7000-8000-000000000001", &schemas.SessionTranscript{SessionID: "s1", Kind: schemas.TranscriptAgentMessage, Text: &text})
	rec, err := kafka.EventRecord(codec, topics.SessionsTranscript, "s1", ev)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bad := &kgo.Record{Topic: topics.SessionsTranscript, Key: []byte("s2"), Value: []byte("not avro"), Headers: []kgo.RecordHeader{{Key: "x", Value: []byte("y")}}}
	if err := cl.ProduceSync(context.Background(), rec, bad).FirstErr(); err != nil {
		t.Fatal(err)
	}

	lines := tail(t, seeds, codec, true, 2)
	var first, second TailLine
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	evj, _ := first.Event.(map[string]any)
	payload, _ := evj["payload"].(map[string]any)
	if first.Key != "s1" || first.Offset != 0 || first.Headers["event_type"] != schemas.TypeSessionTranscript || first.Headers["event_id"] != ev.EventID ||
		evj["event_id"] != ev.EventID || payload["kind"] != "agent_message" || payload["text"] != text || payload["tool"] != nil {
		t.Fatalf("first line: %s", lines[0])
	}
	if second.Key != "s2" || second.Headers["x"] != "y" || string(second.ValueBase64) != "not avro" || second.DecodeError == "" || second.Event != nil {
		t.Fatalf("second line: %s", lines[1])
	}

	human := tail(t, seeds, codec, false, 2)
	if !strings.HasPrefix(human[0], "sessions.transcript[0]@0 ") || !strings.Contains(human[0], "key=s1") ||
		!strings.Contains(human[0], `"text":"hello from the agent"`) || !strings.Contains(human[1], "(not decodable") {
		t.Fatalf("human lines:\n%s", strings.Join(human, "\n"))
	}
}

func TestTopicsTailArgs(t *testing.T) {
	if o, err := parseTail([]string{"--json", "sessions.transcript", "--from-beginning"}); err != nil || !o.json || !o.fromBeginning || o.topic != "sessions.transcript" {
		t.Fatalf("parse = %+v, %v", o, err)
	}
	for _, args := range [][]string{{}, {"--nope", "t"}, {"a", "b"}} {
		if _, err := parseTail(args); err == nil {
			t.Fatalf("%v accepted", args)
		}
	}
}
