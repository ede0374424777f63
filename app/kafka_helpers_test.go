package app_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// groupCaughtUp reports whether group has committed up to the end of topic.
func groupCaughtUp(t testing.TB, cl *kgo.Client, group, topic string) bool {
	t.Helper()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	offs, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	caught := true
	ends.Each(func(e kadm.ListedOffset) {
		o, ok := offs.Lookup(topic, e.Partition)
		if e.Offset > 0 && (!ok || o.At < e.Offset) {
			caught = false
		}
	})
	return caught
}
