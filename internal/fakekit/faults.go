package fakekit

import (
	"context"
	"sync"
)

// Faults are the failures a test tells a fake to inject: the next requests
// answer an HTTP status (FailNext), or every request waits unanswered
// until released (Hang). A fake embeds it, calls Wait then Next for each
// request it has recorded, and calls Release when the test ends.
type Faults struct {
	mu       sync.Mutex
	failures []int
	hang     chan struct{} // non-nil: requests wait until closed
}

// FailNext makes the next n requests answer HTTP status (e.g. 500, 503),
// before authentication.
func (f *Faults) FailNext(n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.failures = append(f.failures, status)
	}
}

// Hang makes every following request wait, unanswered, until the client
// gives up or release is called (it is also called when the test ends).
func (f *Faults) Hang() (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hang == nil {
		f.hang = make(chan struct{})
	}
	return f.Release
}

// Release lets every waiting and following request through.
func (f *Faults) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hang != nil {
		close(f.hang)
		f.hang = nil
	}
}

// Wait holds a request while the fake hangs: it returns true once released
// (at once when not hanging), false when ctx (the request's) ends first.
func (f *Faults) Wait(ctx context.Context) bool {
	f.mu.Lock()
	hang := f.hang
	f.mu.Unlock()
	if hang == nil {
		return true
	}
	select {
	case <-hang:
		return true
	case <-ctx.Done():
		return false
	}
}

// Next takes the status the current request must fail with; ok is false
// when no failure is pending.
func (f *Faults) Next() (status int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failures) == 0 {
		return 0, false
	}
	status, f.failures = f.failures[0], f.failures[1:]
	return status, true
}
