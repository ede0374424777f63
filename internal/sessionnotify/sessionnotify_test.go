package sessionnotify_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/sessionnotify"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func user(t *testing.T, pool *pgxpool.Pool) string {
	var id string
	if err := pool.QueryRow(context.Background(), `INSERT INTO users (email, name) VALUES ($1, 'U') RETURNING id::text`,
		uuid.NewString()+"@example.test").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func installation(t *testing.T, pool *pgxpool.Pool, org string) string {
	var id string
	if err := pool.QueryRow(context.Background(), `INSERT INTO slack_installations (org_id, team_id, bot_user_id, encrypted_bot_token)
		VALUES ($1, $2, 'UBOT', 'sealed') RETURNING id::text`, org, "T"+uuid.NewString()[:8]).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// Subscribe upserts; every function is org-scoped; malformed ids are not
// found.
func TestSubscriptions(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	org, other := runstest.Org(t, pool), runstest.Org(t, pool)
	inst, otherInst := installation(t, pool, org), installation(t, pool, other)
	session, u1, u2 := sessionstest.New(t, pool, org, sessionstest.Options{}), user(t, pool), user(t, pool)

	first, err := sessionnotify.Subscribe(ctx, pool, org, session, u1, inst, "U1")
	if err != nil || first.DestinationType != "dm_user" || !first.Wants(sessionnotify.EventCompleted) {
		t.Fatalf("subscribe: %+v %v", first, err)
	}
	again, err := sessionnotify.Subscribe(ctx, pool, org, session, u1, inst, "U2")
	if err != nil || again.ID != first.ID || again.SlackUserID != "U2" {
		t.Fatalf("upsert: %+v %v", again, err)
	}
	if _, err := sessionnotify.Subscribe(ctx, pool, org, session, u2, inst, "U3"); err != nil {
		t.Fatal(err)
	}

	// Another org's installation, another org claiming this (session, user),
	// malformed ids: not found, nothing written.
	for name, call := range map[string]func() error{
		"foreign installation": func() error {
			_, err := sessionnotify.Subscribe(ctx, pool, org, uuid.NewString(), u1, otherInst, "U9")
			return err
		},
		"foreign org row": func() error {
			_, err := sessionnotify.Subscribe(ctx, pool, other, session, u1, otherInst, "U9")
			return err
		},
		"malformed session": func() error {
			_, err := sessionnotify.Subscribe(ctx, pool, org, "nope", u1, inst, "U9")
			return err
		},
	} {
		if err := call(); !errors.Is(err, sessionnotify.ErrNotFound) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if subs, err := sessionnotify.ListSubscriptions(ctx, pool, other, session); err != nil || len(subs) != 0 {
		t.Fatalf("other org lists %v (%v)", subs, err)
	}
	if ok, err := sessionnotify.Unsubscribe(ctx, pool, other, session, u1); ok || err != nil {
		t.Fatalf("other org unsubscribed: %v %v", ok, err)
	}
	if subs, err := sessionnotify.ListSubscriptions(ctx, pool, org, "not-a-uuid"); err != nil || len(subs) != 0 {
		t.Fatalf("malformed: %v %v", subs, err)
	}

	if ok, err := sessionnotify.Unsubscribe(ctx, pool, org, session, u2); !ok || err != nil {
		t.Fatalf("unsubscribe: %v %v", ok, err)
	}
	if ok, _ := sessionnotify.Unsubscribe(ctx, pool, org, session, u2); ok {
		t.Fatal("unsubscribed twice")
	}
	subs, err := sessionnotify.ListSubscriptions(ctx, pool, org, session)
	if err != nil || len(subs) != 1 || subs[0].UserID != u1 || subs[0].SlackUserID != "U2" || subs[0].SlackInstallationID != inst {
		t.Fatalf("list: %+v %v", subs, err)
	}
}
