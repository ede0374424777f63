package consumers_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/group"
)

// ForGroup takes the group's name, inputs and settings, and refuses a
// handler of the other kind.
func TestForGroup(t *testing.T) {
	g := group.Group{Name: "g", Description: "d", Inputs: []string{"a", "b"}, Kind: group.Batch,
		Settings: group.Settings{MaxAttempts: 7, MaxBatch: 50}}
	batch := consumers.BatchHandler(func(context.Context, []*consumers.Message) error { return nil })
	record := consumers.Handler(func(context.Context, *consumers.Message) error { return nil })
	cfg, err := consumers.ForGroup(g, consumers.Config{BatchHandler: batch, Retry: consumers.RetryOptions{MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Group != "g" || !slices.Equal(cfg.Topics, g.Inputs) || cfg.Retry.MaxAttempts != 7 || cfg.MaxBatch != 50 {
		t.Fatalf("config %+v", cfg)
	}
	if cfg, err := consumers.ForGroup(g, consumers.Config{Group: "g-replay", BatchHandler: batch}); err != nil || cfg.Group != "g-replay" {
		t.Fatalf("another group id: %q, %v", cfg.Group, err)
	}
	if _, err := consumers.ForGroup(g, consumers.Config{Handler: record}); err == nil || !strings.Contains(err.Error(), "batch handler") {
		t.Fatalf("record handler for a batch group: %v", err)
	}
	g.Kind, g.Settings = group.Record, group.Settings{}
	cfg, err = consumers.ForGroup(g, consumers.Config{Handler: record, Retry: consumers.RetryOptions{MaxAttempts: 3}})
	if err != nil || cfg.Retry.MaxAttempts != 3 || cfg.MaxBatch != 0 {
		t.Fatalf("record group: %+v, %v", cfg, err)
	}
}
