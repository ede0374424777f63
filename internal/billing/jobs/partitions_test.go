package billingjobs_test

import (
	"context"
	"testing"

	billingjobs "github.com/proliferate/proliferate/internal/billing/jobs"
)

func TestPartitionsArchiveOldMonthsAndForgetOldKeys(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, "active", 0, "")
	// Earlier runs (-count) archived these months: start over.
	e.exec(t, `DROP TABLE IF EXISTS billing_events_archive_2020_01, billing_events_archive_2020_02`)
	e.exec(t, `DELETE FROM billing_event_keys WHERE idempotency_key IN ('part-key-old', 'part-key-kept')`)
	e.exec(t, `SELECT billing_partition_ensure('2020-01-01', 2)`)
	e.exec(t, `INSERT INTO billing_events (organization_id, event_type, quantity, credits, idempotency_key, status, created_at)
		VALUES ($1, 'compute', 1, 1, 'old-event-1', 'posted', '2020-01-15')`, org)
	e.exec(t, `INSERT INTO billing_event_keys (idempotency_key, org_id, created_at) VALUES
		('part-key-old', $1, now() - interval '130 days'), ('part-key-kept', $1, now() - interval '100 days')`, org)
	p := &billingjobs.Partitions{Deps: e.deps}
	res, err := p.RunOnce(ctx)
	if err != nil || res.Skipped {
		t.Fatalf("run %+v %v", res, err)
	}
	archived := map[string]bool{}
	for _, a := range res.Archived {
		archived[a] = true
	}
	if !archived["billing_events_archive_2020_01"] || !archived["billing_events_archive_2020_02"] {
		t.Fatalf("archived %v", res.Archived)
	}
	if n := e.count(t, `SELECT count(*) FROM billing_events WHERE idempotency_key = 'old-event-1'`); n != 0 {
		t.Fatal("archived row still in the hot table")
	}
	if n := e.count(t, `SELECT count(*) FROM billing_events_archive_2020_01 WHERE idempotency_key = 'old-event-1'`); n != 1 {
		t.Fatal("archived row lost")
	}
	// This month and the next ones exist and stay attached.
	if n := e.count(t, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'billing_events'::regclass AND c.relname IN (
			'billing_events_' || to_char(now(), 'YYYY_MM'), 'billing_events_' || to_char(now() + interval '2 months', 'YYYY_MM'))`); n != 2 {
		t.Fatalf("%d current/future partitions", n)
	}
	if e.count(t, `SELECT count(*) FROM billing_event_keys WHERE idempotency_key = 'part-key-old'`) != 0 ||
		e.count(t, `SELECT count(*) FROM billing_event_keys WHERE idempotency_key = 'part-key-kept'`) != 1 {
		t.Fatal("key retention wrong")
	}
	// Idempotent; an archived month is not recreated.
	res, err = p.RunOnce(ctx)
	if err != nil || len(res.Archived) != 0 || res.Created != 0 {
		t.Fatalf("second run %+v %v", res, err)
	}
	e.exec(t, `SELECT billing_partition_ensure('2020-01-01', 1)`)
	if n := e.count(t, `SELECT count(*) FROM pg_class WHERE relname = 'billing_events_2020_01'`); n != 0 {
		t.Fatal("archived month recreated")
	}
}
