// Package fakekit is what the local fakes of third-party services
// (linearfake, sentryfake, slackfake, fakes, mcptest) need from their
// caller: the part of testing.TB they use. Tests pass their *testing.T;
// `proliferate dev-fakes` passes a Standalone, so the platform's binary
// does not link package testing. Faults is the failure injection
// (FailNext, Hang) the fakes share.
package fakekit

import (
	"fmt"
	"os"
	"sync"
)

// TB is the subset of testing.TB the fakes use.
type TB interface {
	Helper()
	Cleanup(func())
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	TempDir() string
}

// Standalone is a TB outside a test: its cleanups run at Close (last
// registered first); a fatal error or an error panics with a Failure;
// TempDir makes directories Close removes.
type Standalone struct {
	mu       sync.Mutex
	cleanups []func()
}

// Failure is the panic value of Standalone's Fatal, Fatalf and Errorf.
type Failure struct{ Msg string }

func (f Failure) Error() string { return f.Msg }

func (*Standalone) Helper() {}

func (s *Standalone) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

func (*Standalone) Fatal(args ...any) { panic(Failure{fmt.Sprint(args...)}) }

func (*Standalone) Fatalf(format string, args ...any) { panic(Failure{fmt.Sprintf(format, args...)}) }

func (*Standalone) Errorf(format string, args ...any) { panic(Failure{fmt.Sprintf(format, args...)}) }

func (s *Standalone) TempDir() string {
	dir, err := os.MkdirTemp("", "proliferate-fake-")
	if err != nil {
		s.Fatalf("fakekit: temp dir: %v", err)
	}
	s.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Close runs the cleanups, last registered first.
func (s *Standalone) Close() {
	s.mu.Lock()
	cs := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}
