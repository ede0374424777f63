package pollgroups_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/triggers/pollgroups"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func integration(t *testing.T, pool *pgxpool.Pool, orgID, preset string) string {
	t.Helper()
	var id string
	err := pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id, provider_config_key)
		VALUES ($1, 'nango', $2, $3, $2) RETURNING id::text`, orgID, preset, "conn-"+uuid.NewString()).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func inTx(t *testing.T, pool *pgxpool.Pool, f func(tx pgx.Tx) error) {
	t.Helper()
	if err := pgx.BeginFunc(context.Background(), pool, f); err != nil {
		t.Fatal(err)
	}
}

func attach(t *testing.T, pool *pgxpool.Pool, triggerID string) {
	t.Helper()
	inTx(t, pool, func(tx pgx.Tx) error { return pollgroups.Attach(context.Background(), tx, triggerID) })
}

func detach(t *testing.T, pool *pgxpool.Pool, orgID string) {
	t.Helper()
	inTx(t, pool, func(tx pgx.Tx) error { return pollgroups.DetachEmpty(context.Background(), tx, orgID) })
}

func groupOf(t *testing.T, pool *pgxpool.Pool, triggerID string) string {
	t.Helper()
	var g *string
	if err := pool.QueryRow(context.Background(), `SELECT poll_group_id::text FROM triggers WHERE id = $1`, triggerID).Scan(&g); err != nil {
		t.Fatal(err)
	}
	if g == nil {
		return ""
	}
	return *g
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func interval(t *testing.T, pool *pgxpool.Pool, groupID string) int {
	t.Helper()
	return count(t, pool, `SELECT interval_seconds FROM trigger_poll_groups WHERE id = $1`, groupID)
}

func TestAttachGroupsByOrgProviderIntegration(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	org := runstest.Org(t, pool)
	auto := runstest.Automation(t, pool, org)
	linA, linB := integration(t, pool, org, "linear"), integration(t, pool, org, "linear")
	poll := func(integ string, cfg map[string]any) string {
		return runstest.NewTrigger(t, pool, runstest.Trigger{OrgID: org, AutomationID: auto, Type: "polling", Provider: "linear",
			IntegrationID: integ, Config: cfg})
	}
	t1, t2 := poll(linA, nil), poll(linA, map[string]any{"poll_interval_seconds": 30})
	t3 := poll(linB, map[string]any{"poll_interval_seconds": 5}) // below the minimum: clamped
	t4 := poll(linB, map[string]any{"poll_interval_seconds": "fast"})
	hook := runstest.NewTrigger(t, pool, runstest.Trigger{OrgID: org, AutomationID: auto, Type: "webhook", Provider: "linear", IntegrationID: linA})
	for _, id := range []string{t1, t2, t3, t4, hook, t1, t3} { // attaching twice changes nothing
		attach(t, pool, id)
	}
	gA, gB := groupOf(t, pool, t1), groupOf(t, pool, t3)
	if gA == "" || gB == "" || gA == gB || groupOf(t, pool, t2) != gA || groupOf(t, pool, t4) != gB {
		t.Fatalf("groups: t1 %q t2 %q t3 %q t4 %q", gA, groupOf(t, pool, t2), gB, groupOf(t, pool, t4))
	}
	if groupOf(t, pool, hook) != "" {
		t.Fatal("a webhook trigger joined a poll group")
	}
	if n := count(t, pool, `SELECT count(*) FROM trigger_poll_groups WHERE org_id = $1`, org); n != 2 {
		t.Fatalf("%d groups; want 2", n)
	}
	if iv := interval(t, pool, gA); iv != 30 {
		t.Fatalf("group A interval %d; want 30 (the smallest asked)", iv)
	}
	if iv := interval(t, pool, gB); iv != pollgroups.MinIntervalSeconds {
		t.Fatalf("group B interval %d; want the minimum", iv)
	}
	// Triggers without an integration share the org's provider-wide group
	// (NULLS NOT DISTINCT).
	n1, n2 := poll("", nil), poll("", nil)
	attach(t, pool, n1)
	attach(t, pool, n2)
	if g := groupOf(t, pool, n1); g == "" || g != groupOf(t, pool, n2) || g == gA || g == gB {
		t.Fatalf("integration-less groups %q %q", g, groupOf(t, pool, n2))
	}
	if iv := interval(t, pool, groupOf(t, pool, n1)); iv != pollgroups.DefaultIntervalSeconds {
		t.Fatalf("default interval %d", iv)
	}
	// A trigger that stops being a polling trigger leaves its group.
	if _, err := pool.Exec(ctx, `UPDATE triggers SET trigger_type = 'webhook' WHERE id = $1`, t2); err != nil {
		t.Fatal(err)
	}
	attach(t, pool, t2)
	if groupOf(t, pool, t2) != "" {
		t.Fatal("a former polling trigger kept its group")
	}
	// Unknown trigger.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return pollgroups.Attach(ctx, tx, uuid.NewString()) })
	if !errors.Is(err, pollgroups.ErrNotFound) {
		t.Fatalf("unknown trigger: %v", err)
	}
}

func TestDetachEmptyRemovesGroupsWithoutTriggers(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	org, other := runstest.Org(t, pool), runstest.Org(t, pool)
	auto, otherAuto := runstest.Automation(t, pool, org), runstest.Automation(t, pool, other)
	lin, otherLin := integration(t, pool, org, "linear"), integration(t, pool, other, "linear")
	t1 := runstest.NewTrigger(t, pool, runstest.Trigger{OrgID: org, AutomationID: auto, Type: "polling", Provider: "linear", IntegrationID: lin})
	t2 := runstest.NewTrigger(t, pool, runstest.Trigger{OrgID: org, AutomationID: auto, Type: "polling", Provider: "linear", IntegrationID: lin})
	o1 := runstest.NewTrigger(t, pool, runstest.Trigger{OrgID: other, AutomationID: otherAuto, Type: "polling", Provider: "linear", IntegrationID: otherLin})
	for _, id := range []string{t1, t2, o1} {
		attach(t, pool, id)
	}
	g, og := groupOf(t, pool, t1), groupOf(t, pool, o1)
	groups := func() int {
		return count(t, pool, `SELECT count(*) FROM trigger_poll_groups WHERE id = ANY($1)`, []string{g, og})
	}

	// One of two triggers deleted: the group stays.
	if _, err := pool.Exec(ctx, `DELETE FROM triggers WHERE id = $1`, t1); err != nil {
		t.Fatal(err)
	}
	detach(t, pool, org)
	if groups() != 2 || groupOf(t, pool, t2) != g {
		t.Fatal("a group with a trigger left was removed")
	}
	// The last trigger disabled: the group goes, the trigger leaves it.
	if _, err := pool.Exec(ctx, `UPDATE triggers SET enabled = false WHERE id = $1`, t2); err != nil {
		t.Fatal(err)
	}
	detach(t, pool, org)
	if groups() != 1 || groupOf(t, pool, t2) != "" {
		t.Fatalf("groups %d, trigger group %q", groups(), groupOf(t, pool, t2))
	}
	// Re-enabled and attached again: a fresh group.
	if _, err := pool.Exec(ctx, `UPDATE triggers SET enabled = true WHERE id = $1`, t2); err != nil {
		t.Fatal(err)
	}
	attach(t, pool, t2)
	if ng := groupOf(t, pool, t2); ng == "" || ng == g {
		t.Fatalf("re-attached group %q", ng)
	}
	// The other org's group is never touched by this org's cleanup, even
	// when it is empty.
	if _, err := pool.Exec(ctx, `DELETE FROM triggers WHERE id = $1`, o1); err != nil {
		t.Fatal(err)
	}
	detach(t, pool, org)
	if count(t, pool, `SELECT count(*) FROM trigger_poll_groups WHERE id = $1`, og) != 1 {
		t.Fatal("DetachEmpty of one org removed another org's group")
	}
	detach(t, pool, other)
	if count(t, pool, `SELECT count(*) FROM trigger_poll_groups WHERE id = $1`, og) != 0 {
		t.Fatal("the empty group was kept")
	}
	// Deleting the last trigger and detaching in one transaction, as the
	// API does.
	inTx(t, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM triggers WHERE id = $1`, t2); err != nil {
			return err
		}
		return pollgroups.DetachEmpty(ctx, tx, org)
	})
	if n := count(t, pool, `SELECT count(*) FROM trigger_poll_groups WHERE org_id = $1`, org); n != 0 {
		t.Fatalf("%d groups left", n)
	}
}
