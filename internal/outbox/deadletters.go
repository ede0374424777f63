package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/outbox/outboxdb"
)

// DeadLetter is an outbox row the relay set aside because it can never be
// published as it is.
type DeadLetter struct {
	// ID is the row's outbox id.
	ID        int64             `json:"id"`
	Topic     string            `json:"topic"`
	Key       string            `json:"key"`
	Headers   map[string]string `json:"headers"`
	Size      int               `json:"size"`
	CreatedAt time.Time         `json:"created_at"`
	FailedAt  time.Time         `json:"failed_at"`
	Error     string            `json:"error"`
	// Value is filled by GetDeadLetter only.
	Value []byte `json:"-"`
}

// Status is the outbox at a glance.
type Status struct {
	Pending       int64         `json:"pending"`
	OldestPending time.Duration `json:"-"`
	OldestSeconds float64       `json:"oldest_pending_seconds"`
	DeadLetters   int64         `json:"dead_letters"`
}

// ErrNoDeadLetter is returned for an id that is not set aside.
var ErrNoDeadLetter = errors.New("outbox: no such dead letter")

// ReadStatus counts pending and set-aside rows.
func ReadStatus(ctx context.Context, pool *pgxpool.Pool) (Status, error) {
	var st Status
	age, dead, err := OldestPending(ctx, pool)
	if err != nil {
		return st, err
	}
	st.OldestPending, st.OldestSeconds, st.DeadLetters = age, age.Seconds(), dead
	if st.Pending, err = outboxdb.New(pool).CountPending(ctx); err != nil {
		return st, fmt.Errorf("count pending outbox rows: %w", err)
	}
	return st, nil
}

// ListDeadLetters returns up to limit dead letters with ids above afterID,
// oldest first, without their values.
func ListDeadLetters(ctx context.Context, pool *pgxpool.Pool, afterID int64, limit int) ([]DeadLetter, error) {
	rows, err := outboxdb.New(pool).ListDeadLetters(ctx, outboxdb.ListDeadLettersParams{AfterID: afterID, Max: int64(limit)})
	if err != nil {
		return nil, fmt.Errorf("list outbox dead letters: %w", err)
	}
	out := make([]DeadLetter, len(rows))
	for i, r := range rows {
		out[i] = DeadLetter{ID: r.ID, Topic: r.Topic, Key: r.Key, Headers: headersOf(r.Headers), Size: int(r.Size),
			CreatedAt: r.CreatedAt, FailedAt: r.FailedAt, Error: r.Error}
	}
	return out, nil
}

// GetDeadLetter returns one dead letter with its value.
func GetDeadLetter(ctx context.Context, pool *pgxpool.Pool, id int64) (DeadLetter, error) {
	r, err := outboxdb.New(pool).GetDeadLetter(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return DeadLetter{}, ErrNoDeadLetter
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("read outbox dead letter %d: %w", id, err)
	}
	return DeadLetter{ID: r.ID, Topic: r.Topic, Key: r.Key, Headers: headersOf(r.Headers), Size: int(r.Size),
		CreatedAt: r.CreatedAt, FailedAt: r.FailedAt, Error: r.Error, Value: r.Value}, nil
}

// headersOf renders stored headers for people; headers that are not an object
// of strings (one reason a row is set aside) come back as one "raw" entry.
func headersOf(raw []byte) map[string]string {
	var h map[string]string
	if json.Unmarshal(raw, &h) != nil {
		return map[string]string{"raw": string(raw)}
	}
	return h
}

// RetryDeadLetters moves the given dead letters (all of them when ids is
// nil) back into the outbox, behind every pending row, and wakes the relay.
// A row that still cannot be published is set aside again under its new id.
// It returns the new outbox ids.
func RetryDeadLetters(ctx context.Context, pool *pgxpool.Pool, ids []int64) ([]int64, error) {
	var out []int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := outboxdb.New(tx)
		var err error
		if out, err = q.RetryDeadLetters(ctx, ids); err != nil {
			return err
		}
		if ids != nil && len(out) != len(ids) {
			return ErrNoDeadLetter
		}
		return q.Notify(ctx, Channel)
	})
	if err != nil {
		if errors.Is(err, ErrNoDeadLetter) {
			return nil, err
		}
		return nil, fmt.Errorf("retry outbox dead letters: %w", err)
	}
	return out, nil
}

// DiscardDeadLetters deletes the given dead letters (all of them when ids is
// nil) and returns how many it deleted; ErrNoDeadLetter, deleting nothing,
// when an id is not set aside.
func DiscardDeadLetters(ctx context.Context, pool *pgxpool.Pool, ids []int64) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if n, err = outboxdb.New(tx).DiscardDeadLetters(ctx, ids); err != nil {
			return err
		}
		if ids != nil && n != int64(len(ids)) {
			return ErrNoDeadLetter
		}
		return nil
	})
	if errors.Is(err, ErrNoDeadLetter) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("discard outbox dead letters: %w", err)
	}
	return n, nil
}

// OldestPending is the age of the oldest unpublished row (0 when none) and
// how many rows are set aside in outbox_dead_letters. "Oldest" is the next
// row the relay publishes (the lowest id, one index probe however long the
// backlog); rows are created in id order, so it is the oldest but for
// transactions that committed out of order.
func OldestPending(ctx context.Context, pool *pgxpool.Pool) (age time.Duration, deadLetters int64, err error) {
	r, err := outboxdb.New(pool).OldestPending(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("read outbox age: %w", err)
	}
	return time.Duration(r.AgeSeconds * float64(time.Second)), r.DeadLetters, nil
}
