package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/agent/capabilities"
	"github.com/proliferate/proliferate/internal/sandbox"
)

// OpenTerminal implements sandbox.Terminals: a login shell on a
// pseudo-terminal started through envd in the workspace; output comes
// from the process stream, keystrokes go through SendInput, Resize is
// envd's Update, Close kills the shell. env is added to the shell's
// environment (the sandbox reaches the gateway at the URL the gateway
// gives, as its agent does); it never overrides the variables above.
func (p *Provider) OpenTerminal(ctx context.Context, sessionID, sandboxID string, cols, rows uint16, env map[string]string) (sandbox.Terminal, error) {
	e, err := p.liveEnvd(ctx, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("e2b: terminal in %s: %w", sandboxID, err)
	}
	envs := map[string]string{"HOME": Home, "TERM": "xterm-256color", "LANG": "C.UTF-8", "GIT_CEILING_DIRECTORIES": Home,
		"PATH": sandboxPath} // the CLI: git's credential helper, `proliferate …`
	for _, kv := range capabilities.GitCredentialEnv { // a person's push asks the gateway with the terminal's token
		k, v, _ := strings.Cut(kv, "=")
		envs[k] = v
	}
	for k, v := range env {
		if _, own := envs[k]; !own && envKeyRE.MatchString(k) {
			envs[k] = v
		}
	}
	s, err := e.Start(ctx, StartRequest{
		Process: ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l"}, Cwd: Workspace, Envs: envs},
		PTY:     &PTY{Size: PTYSize{Cols: uint32(cols), Rows: uint32(rows)}},
	})
	if err != nil {
		return nil, fmt.Errorf("e2b: terminal in %s: %w", sandboxID, err)
	}
	pr, pw := io.Pipe()
	t := &terminal{e: e, s: s, r: pr, w: pw}
	go func() {
		for {
			ev, err := s.Next()
			if err != nil {
				pw.CloseWithError(io.EOF)
				return
			}
			if ev.Data != nil && len(ev.Data.PTY) > 0 {
				if _, err := pw.Write(ev.Data.PTY); err != nil {
					return
				}
			}
			if ev.End != nil {
				pw.CloseWithError(io.EOF)
				return
			}
		}
	}()
	return t, nil
}

type terminal struct {
	e *Envd
	s *Stream
	r *io.PipeReader
	w *io.PipeWriter

	mu     sync.Mutex
	closed bool
}

func (t *terminal) Read(b []byte) (int, error) { return t.r.Read(b) }

func (t *terminal) Write(b []byte) (int, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return 0, errors.New("e2b: terminal closed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := t.e.SendPTY(ctx, t.s.PID, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (t *terminal) Resize(cols, rows uint16) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return t.e.Resize(ctx, t.s.PID, cols, rows)
}

// Close kills the shell (and what it started in its session) and ends
// the stream; reads then return io.EOF. Idempotent.
func (t *terminal) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := t.e.Signal(ctx, t.s.PID, SIGKILL)
	t.s.Close()
	_ = t.w.CloseWithError(io.EOF)
	if errors.Is(err, sandbox.ErrNotFound) {
		err = nil // already gone
	}
	return err
}
