package sandboxtest

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// TermReader collects a terminal's output in the background.
type TermReader struct {
	mu  sync.Mutex
	buf bytes.Buffer
	err error
	// Done is closed when the terminal's reads end (Err says why).
	Done chan struct{}
}

// ReadTerminal starts collecting term's output.
func ReadTerminal(term io.Reader) *TermReader {
	r := &TermReader{Done: make(chan struct{})}
	go func() {
		defer close(r.Done)
		b := make([]byte, 4096)
		for {
			n, err := term.Read(b)
			r.mu.Lock()
			r.buf.Write(b[:n])
			if err != nil {
				r.err = err
			}
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return r
}

// String is the output so far.
func (r *TermReader) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

// Err is the error that ended the reads (after Done).
func (r *TermReader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// WaitFor waits until the output contains want and returns the output.
func (r *TermReader) WaitFor(t testing.TB, want string) string {
	t.Helper()
	const limit = 30 * time.Second
	deadline := time.Now().Add(limit)
	for !strings.Contains(r.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("terminal output lacks %q after %s:\n%q", want, limit, r.String())
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	return r.String()
}

// TypeLine writes line and a newline to the terminal.
func TypeLine(t testing.TB, term io.Writer, line string) {
	t.Helper()
	if _, err := io.WriteString(term, line+"\n"); err != nil {
		t.Fatal(err)
	}
}
