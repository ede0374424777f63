package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/testenv"
)

// Through the whole dev stack (HTTP ingest, Kafka, the trigger processor,
// the run enricher) with the in-process scripted model: an automation's LLM
// filter, set through the API, skips the event the model declines and queues
// the one it accepts, whose run's enrichment carries the model's analysis.
// The scripted model picks its answer by a marker in the event.
func TestTriggerLLMFilterAndAnalysis(t *testing.T) {
	p := startPipeline(t)
	base := "http://" + p.dev.app.APIAddr()
	if code := apiCall(t, base, "PATCH", "/automations/"+p.automationID, p.token, map[string]any{
		"llm_filter_prompt":   "Only alerts about disks.",
		"llm_analysis_prompt": "Say what broke. [[script:hello]]",
	}, nil); code != 200 {
		t.Fatalf("PATCH automation %d", code)
	}
	if code := p.send(t, []byte(`{"alert":"cpu hot","note":"[[script:filter-no]]"}`)); code != 200 {
		t.Fatalf("ingest %d", code)
	}
	if code := p.send(t, []byte(`{"alert":"disk full","note":"[[script:filter-yes]]"}`)); code != 200 {
		t.Fatalf("ingest %d", code)
	}
	ctx := context.Background()
	testenv.Eventually(t, 60*time.Second, "one event skipped by the filter and one run enriched", func() bool {
		var skipped, enriched int
		_ = p.dev.app.Pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM trigger_events WHERE trigger_id = $1 AND skip_reason = 'llm_filter_rejected'),
				(SELECT count(*) FROM automation_runs WHERE trigger_id = $1 AND enrichment_json->'llm_analysis'->>'status' = 'done'
					AND enrichment_json->'llm_analysis'->>'text' LIKE 'Hello! I am the Proliferate scripted model.%')`,
			p.triggerID).Scan(&skipped, &enriched)
		return skipped == 1 && enriched == 1
	})
	if n := p.runs(t); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	var spends int
	if err := p.dev.app.Pool.QueryRow(ctx, `SELECT count(*) FROM trigger_llm_results WHERE trigger_id = $1 AND cost_usd_micros > 0`,
		p.triggerID).Scan(&spends); err != nil || spends != 3 {
		t.Fatalf("%d priced answers (2 filters, 1 analysis), %v", spends, err)
	}
}
