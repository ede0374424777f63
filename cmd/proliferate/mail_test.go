package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/internal/testenv"
)

// `proliferate mail`: status counts, failed lists the set-aside emails with
// their errors (never their sealed content), retry puts them back; bad
// input is a usage error.
func TestMailCommand(t *testing.T) {
	pool := testenv.Postgres(t)
	t.Setenv("DATABASE_URL", testenv.DatabaseURL(t))
	id := uuid.NewString()
	if _, err := pool.Exec(context.Background(), `INSERT INTO mail_queue (id, kind, recipient, sealed_data, status, attempts, failed_at, last_error)
		VALUES ($1, 'password_reset', 'gone@example.com', 'v1.k.sealed-canary', 'failed', 1, now(), 'RCPT TO: 550 5.1.1 user unknown')`, id); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run([]string{"mail", "status"}, &out, &strings.Builder{}); err != nil || !strings.Contains(out.String(), "set aside:      1") {
		t.Fatalf("status: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run([]string{"mail", "failed"}, &out, &strings.Builder{}); err != nil ||
		!strings.Contains(out.String(), id) || !strings.Contains(out.String(), "550 5.1.1") || strings.Contains(out.String(), "sealed-canary") {
		t.Fatalf("failed: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run([]string{"mail", "retry", id}, &out, &strings.Builder{}); err != nil || !strings.Contains(out.String(), "1 of 1 back in the queue") {
		t.Fatalf("retry: %v\n%s", err, out.String())
	}
	var status string
	if err := pool.QueryRow(context.Background(), `SELECT status FROM mail_queue WHERE id = $1`, id).Scan(&status); err != nil || status != "pending" {
		t.Fatalf("after retry: %q %v", status, err)
	}
	for _, args := range [][]string{{"mail"}, {"mail", "resend"}, {"mail", "retry"}, {"mail", "retry", "not-a-uuid"}, {"mail", "failed", "--limit", "0"}} {
		var u usageError
		if err := run(args, &strings.Builder{}, &strings.Builder{}); !errors.As(err, &u) {
			t.Errorf("%v: want a usage error, got %v", args, err)
		}
	}
}
