package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&st.Pending); err != nil {
		return st, fmt.Errorf("count pending outbox rows: %w", err)
	}
	return st, nil
}

// ListDeadLetters returns up to limit dead letters with ids above afterID,
// oldest first, without their values.
func ListDeadLetters(ctx context.Context, pool *pgxpool.Pool, afterID int64, limit int) ([]DeadLetter, error) {
	rows, err := pool.Query(ctx, `SELECT `+deadLetterCols+` FROM outbox_dead_letters WHERE id > $1 ORDER BY id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list outbox dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("list outbox dead letters: %w", err)
	}
	return out, nil
}

// GetDeadLetter returns one dead letter with its value.
func GetDeadLetter(ctx context.Context, pool *pgxpool.Pool, id int64) (DeadLetter, error) {
	var d DeadLetter
	var h []byte
	err := pool.QueryRow(ctx, `SELECT `+deadLetterCols+`, value FROM outbox_dead_letters WHERE id = $1`, id).
		Scan(&d.ID, &d.Topic, &d.Key, &h, &d.Size, &d.CreatedAt, &d.FailedAt, &d.Error, &d.Value)
	if errors.Is(err, pgx.ErrNoRows) {
		return DeadLetter{}, ErrNoDeadLetter
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("read outbox dead letter %d: %w", id, err)
	}
	d.Headers = headersOf(h)
	return d, nil
}

// deadLetterCols are the columns scanDeadLetter reads, in its order.
const deadLetterCols = `id, topic, key, headers, length(key) + length(value), created_at, failed_at, error`

func scanDeadLetter(row pgx.CollectableRow) (DeadLetter, error) {
	var d DeadLetter
	var h []byte
	err := row.Scan(&d.ID, &d.Topic, &d.Key, &h, &d.Size, &d.CreatedAt, &d.FailedAt, &d.Error)
	d.Headers = headersOf(h)
	return d, err
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
		rows, err := tx.Query(ctx, `WITH moved AS (
				DELETE FROM outbox_dead_letters WHERE $1::bigint[] IS NULL OR id = ANY($1)
				RETURNING id, topic, key, value, headers)
			INSERT INTO outbox (topic, key, value, headers)
			SELECT topic, key, value, headers FROM moved ORDER BY id
			RETURNING id`, ids)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return err
		}
		if ids != nil && len(out) != len(ids) {
			return ErrNoDeadLetter
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, Channel)
		return err
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
		tag, err := tx.Exec(ctx, `DELETE FROM outbox_dead_letters WHERE $1::bigint[] IS NULL OR id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
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
	var secs float64
	err = pool.QueryRow(ctx, `SELECT
			COALESCE(EXTRACT(EPOCH FROM now() - (SELECT created_at FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 1)), 0)::float8,
			(SELECT count(*) FROM outbox_dead_letters)`).Scan(&secs, &deadLetters)
	if err != nil {
		return 0, 0, fmt.Errorf("read outbox age: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), deadLetters, nil
}
