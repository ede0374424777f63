package orgs_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
)

type outboxView struct {
	Status struct {
		Pending     int64 `json:"pending"`
		DeadLetters int64 `json:"dead_letters"`
	} `json:"status"`
	DeadLetters []struct {
		ID    int64  `json:"id"`
		Topic string `json:"topic"`
		Error string `json:"error"`
	} `json:"dead_letters"`
}

// Operators see the rows the relay set aside and retry or discard them;
// nobody else can, and unknown ids are 404 and change nothing.
func TestAdminOutboxDeadLetters(t *testing.T) {
	env, ops, _ := adminEnv(t)
	tm := newTeam(t, env)
	// Ids far above any real outbox id, unique per run.
	base := time.Now().UnixNano()
	for i := range 2 {
		env.Exec(t, `INSERT INTO outbox_dead_letters (id, topic, key, value, headers, created_at, error)
			VALUES ($1, 'missing.events', 'k', 'v', '{}', now(), 'UNKNOWN_TOPIC_OR_PARTITION')`, base+int64(i))
	}
	first, second := strconv.FormatInt(base, 10), strconv.FormatInt(base+1, 10)

	for _, u := range []*apitest.User{tm.Owner, tm.Admin, tm.Member} {
		env.Do(t, "GET", "/admin/outbox", u.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
		env.Do(t, "POST", "/admin/outbox/dead-letters/"+first+"/retry", u.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
		env.Do(t, "DELETE", "/admin/outbox/dead-letters/"+first, u.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	}
	env.Do(t, "GET", "/admin/outbox?limit=0", ops.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)
	env.Do(t, "GET", "/admin/outbox?after=x", ops.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)

	var view outboxView
	env.Do(t, "GET", "/admin/outbox?limit=2&after="+strconv.FormatInt(base-1, 10), ops.Token, nil).Expect(t, 200, &view)
	if len(view.DeadLetters) != 2 || view.DeadLetters[0].ID != base || view.DeadLetters[0].Error != "UNKNOWN_TOPIC_OR_PARTITION" || view.Status.DeadLetters < 2 {
		t.Fatalf("view = %+v", view)
	}

	env.Do(t, "POST", "/admin/outbox/dead-letters/999/retry", ops.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "DELETE", "/admin/outbox/dead-letters/nope", ops.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)

	var retried struct {
		IDs []int64 `json:"ids"`
	}
	env.Do(t, "POST", "/admin/outbox/dead-letters/"+first+"/retry", ops.Token, nil).Expect(t, 200, &retried)
	if len(retried.IDs) != 1 {
		t.Fatalf("retried = %+v", retried)
	}
	var topic string
	if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT topic FROM outbox WHERE id = $1 AND published_at IS NULL`, retried.IDs[0]).Scan(&topic); err != nil || topic != "missing.events" {
		t.Fatalf("retried row in the outbox: %q, %v", topic, err)
	}
	env.Exec(t, `DELETE FROM outbox WHERE id = $1`, retried.IDs[0]) // no relay runs here
	env.Do(t, "DELETE", "/admin/outbox/dead-letters/"+second, ops.Token, nil).Expect(t, 204, nil)
	env.Do(t, "DELETE", "/admin/outbox/dead-letters/"+second, ops.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
	if n := env.CountRows(t, "outbox_dead_letters", "id IN ("+first+","+second+")"); n != 0 {
		t.Fatalf("%d of the dead letters remain", n)
	}
}
