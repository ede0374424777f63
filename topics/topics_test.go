package topics_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// docs/topics.md is what analytics teams read; it must match the catalog.
func TestDocsAreCurrent(t *testing.T) {
	want, err := topics.Markdown()
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("../docs/topics.md")
	if err != nil {
		t.Fatalf("%v (generate it with `make docs`)", err)
	}
	if string(have) != want {
		t.Fatal("docs/topics.md is stale: run `make docs` and commit the result (a consumer group package missing from groups_test.go also shows here)")
	}
}

func TestCatalogIsComplete(t *testing.T) {
	all := topics.All()
	names := map[string]bool{}
	for _, tp := range all {
		if names[tp.Name] {
			t.Errorf("topic %s listed twice", tp.Name)
		}
		names[tp.Name] = true
		if tp.Key == "" || tp.Partitions < 1 || tp.Description == "" || len(tp.Producers) == 0 {
			t.Errorf("topic %s lacks key, partitions, description or producer", tp.Name)
		}
		if tp.Cleanup != topics.Delete && tp.Cleanup != topics.Compact {
			t.Errorf("topic %s has cleanup %q", tp.Name, tp.Cleanup)
		}
		if tp.DeadLetterOf == "" && len(tp.EventTypes) == 0 {
			t.Errorf("event topic %s names no schema", tp.Name)
		}
	}
	// Every topic of ARCHITECTURE.md.
	for _, n := range []string{"webhooks.raw", "triggers.events", "runs.lifecycle", "sessions.events", "tools.calls",
		"actions.invocations", "llm.spend", "billing.usage", "billing.state"} {
		if !names[n] {
			t.Errorf("missing topic %s", n)
		}
	}
	// Every group has a dead-letter topic and consumes and produces only
	// catalog topics.
	for _, g := range topics.Groups() {
		if !names[topics.DeadLetterTopic(g.Name)] {
			t.Errorf("group %s has no dead-letter topic", g.Name)
		}
		for _, tn := range g.Inputs {
			if !names[tn] {
				t.Errorf("group %s consumes unknown topic %s", g.Name, tn)
			}
		}
		for _, tn := range g.Outputs {
			if !names[tn] {
				t.Errorf("group %s produces unknown topic %s", g.Name, tn)
			}
		}
	}
	// Every schema is carried by some topic, and every named schema exists.
	carried := map[string]bool{}
	for _, tp := range all {
		for _, et := range tp.EventTypes {
			carried[et] = true
			if !slices.Contains(schemas.Types(), et) {
				t.Errorf("topic %s names unknown event type %s", tp.Name, et)
			}
		}
	}
	for _, et := range schemas.Types() {
		if !carried[et] {
			t.Errorf("event type %s is on no topic", et)
		}
	}
}

func admin(t *testing.T, seeds []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func TestEnsureCreatesOnceAndReportsDrift(t *testing.T) {
	ctx := context.Background()
	seeds := testenv.Kafka(t)
	adm := admin(t, seeds)

	// Two topics exist already, made by hand with the wrong shape.
	compact := "compact"
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topics.RunsLifecycle); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 12, 1, map[string]*string{"cleanup.policy": &compact}, topics.LLMSpend); err != nil {
		t.Fatal(err)
	}

	rep, err := topics.Ensure(ctx, adm, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Created) != len(topics.All())-2 || len(rep.Existing) != 2 {
		t.Fatalf("created %d, existing %d", len(rep.Created), len(rep.Existing))
	}
	var drift []string
	for _, d := range rep.Drift {
		drift = append(drift, d.String())
	}
	slices.Sort(drift)
	want := []string{
		"llm.spend: cleanup.policy is compact, catalog says delete",
		"llm.spend: retention.ms is 604800000, catalog says 7776000000",
		"runs.lifecycle: partitions is 2, catalog says 12",
		"runs.lifecycle: retention.ms is 604800000, catalog says 2592000000",
	}
	if strings.Join(drift, "\n") != strings.Join(want, "\n") {
		t.Fatalf("drift:\n%s\nwant:\n%s", strings.Join(drift, "\n"), strings.Join(want, "\n"))
	}

	// Created topics carry the catalog's shape, so a second run is clean
	// except for the hand-made ones, and creates nothing.
	// (A new client, as a second `topics ensure` process would have: a client
	// caches topic metadata briefly.)
	rep2, err := topics.Ensure(ctx, admin(t, seeds), -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep2.Created) != 0 || len(rep2.Drift) != len(want) {
		t.Fatalf("second ensure: created %v, drift %v", rep2.Created, rep2.Drift)
	}
	adm = admin(t, seeds)
	details, err := adm.ListTopics(ctx, topics.BillingState)
	if err != nil || len(details[topics.BillingState].Partitions) != 12 {
		t.Fatalf("billing.state: %v %v", details, err)
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, topics.BillingState)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cfgs.On(topics.BillingState, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range c.Configs {
		if kv.Key == "cleanup.policy" && kv.MaybeValue() != "compact" {
			t.Fatalf("billing.state cleanup.policy = %s", kv.MaybeValue())
		}
	}
}
