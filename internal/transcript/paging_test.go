package transcript_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/transcript"
)

// TestHundredThousandEventsPageInConstantMemory: a session with 100k
// entries pages to the end 100 at a time, and the heap after each page
// stays where it was after the first (the reader keeps one page).
func TestHundredThousandEventsPageInConstantMemory(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	org, sess := uuid.NewString(), uuid.NewString()
	const n = 100_000
	if _, err := pool.Exec(ctx, `INSERT INTO session_messages (event_id, org_id, session_id, kind, text, occurred_at)
		SELECT gen_random_uuid(), $1, $2, 'agent_message', 'entry ' || g || ' ' || repeat('x', 200), now()
		FROM generate_series(1, $3) g`, org, sess, n); err != nil {
		t.Fatal(err)
	}
	// What autovacuum does after a bulk change: without statistics the
	// planner takes the session's 100k rows for one and sorts them per page.
	if _, err := pool.Exec(ctx, `ANALYZE session_messages`); err != nil {
		t.Fatal(err)
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	after, total, pages := "", 0, 0
	var base, peak uint64
	for {
		page, err := transcript.List(ctx, pool, org, sess, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		total += len(page)
		after = page[len(page)-1].ID
		pages++
		if pages == 1 {
			base = heap()
		} else if pages%100 == 0 {
			peak = max(peak, heap())
		}
	}
	if total != n {
		t.Fatalf("paged %d entries, want %d", total, n)
	}
	t.Logf("measured: %d pages, heap in use %d KiB after the first page, at most %d KiB after later ones", pages, base>>10, peak>>10)
	if peak > base+4<<20 {
		t.Fatalf("heap grew while paging: %d KiB → %d KiB", base>>10, peak>>10)
	}
	last, err := transcript.Last(ctx, pool, org, sess, 500)
	if err != nil || len(last) != 500 || last[499].ID != after {
		t.Fatalf("Last = %d entries, %v", len(last), err)
	}
}
