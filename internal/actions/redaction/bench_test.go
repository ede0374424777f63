package redaction_test

import (
	"fmt"
	"testing"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/redaction"
)

// BenchmarkRedactor measures what an invocation pays for its
// organization's redactor (50 secrets, two patterns): /cached is the
// version query and a cache hit, /rebuild reads and decrypts every secret
// and compiles the patterns (what a change costs once); /baseline is one
// trivial query on the same pool, the floor of any database round trip.
func BenchmarkRedactor(b *testing.B) {
	w := newWorld(b)
	for i := range 50 {
		w.secret(b, "", fmt.Sprintf("KEY_%02d", i), fmt.Sprintf("org-secret-value-%02d-xxxxxxxxxxxx", i))
	}
	if _, err := redaction.Put(ctx, w.pool, w.org, redaction.Actor{UserID: w.user}, []actions.Pattern{
		{Pattern: `(?i)\bcust-[0-9]{6}\b`, Regex: true}, {Pattern: "intranet.corp"}}); err != nil {
		b.Fatal(err)
	}
	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			var one int
			if err := w.pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		if _, err := w.cache.Redactor(ctx, w.org); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := w.cache.Redactor(ctx, w.org); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rebuild", func(b *testing.B) {
		for b.Loop() {
			c := redaction.NewCache(w.pool, w.box, nil) // empty: every call builds
			if _, err := c.Redactor(ctx, w.org); err != nil {
				b.Fatal(err)
			}
		}
	})
}
