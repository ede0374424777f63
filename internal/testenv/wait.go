package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it holds, failing the
// test with what was awaited when timeout passes. Tests wait with it instead
// of sleeping a fixed time.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
