// Package browser drives Debian's headless Chromium (installed by `make
// tools`) through the DevTools protocol with chromedp, for the dashboard's
// tests. A missing browser fails the test: it is part of the toolchain,
// like bubblewrap.
package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Executable is the Chromium the tests drive: $CHROMIUM, or chromium on
// PATH.
func Executable(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: run `make tools` (installs Debian's chromium)")
	return ""
}

// Options of a browser.
type Options struct {
	// Width and Height of the window (default 1280×800).
	Width, Height int
}

// New starts a headless Chromium with a fresh profile and returns a
// context of its first tab; the browser is closed when the test ends.
// A failed step (Do, Get) reports what the page was doing: its address
// and text, its recent console output, exceptions and failed requests,
// and the requests still in flight.
func New(t testing.TB, o Options) context.Context {
	t.Helper()
	if o.Width == 0 {
		o.Width, o.Height = 1280, 800
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Executable(t)),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(o.Width, o.Height),
		// The machine has no internet: without these Chromium floods the
		// closed network with connections of its own.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		// chromedp logs protocol messages it does not know; only real
		// errors matter to a test.
		if msg := strings.TrimSpace(format); !strings.Contains(msg, "unhandled") && !strings.Contains(msg, "could not unmarshal") {
			t.Logf("chromedp: "+format, args...)
		}
	}))
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	rec := newRecorder()
	if err := chromedp.Listen(ctx, rec.event); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("listen to chromium: %v", err)
	}
	ctx = context.WithValue(ctx, recorderKey{}, rec)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return ctx
}

// Do runs actions with a deadline (a hung page fails the test instead
// of the whole suite).
func Do(t testing.TB, ctx context.Context, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := bounded(c, func() (struct{}, error) { return struct{}{}, chromedp.Do(c, actions...) }); err != nil {
		t.Fatalf("browser: %v\n%s", err, report(ctx))
	}
}

// bounded runs f but returns by ctx's deadline (and a grace period) even
// when f does not: chromedp waits for a page whose renderer hangs without
// looking at the deadline, and the suite would stall until its timeout.
func bounded[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		select {
		case r := <-done:
			return r.v, r.err
		case <-time.After(5 * time.Second):
			var zero T
			return zero, fmt.Errorf("%w (the page does not answer)", ctx.Err())
		}
	}
}

// Get runs one action with a deadline and returns its value.
func Get[T any](t testing.TB, ctx context.Context, timeout time.Duration, action chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := bounded(c, func() (T, error) { return chromedp.Run(c, action) })
	if err != nil {
		t.Fatalf("browser: %v\n%s", err, report(ctx))
	}
	return v
}

// Screenshot saves a full-page PNG of the current page as a test
// artifact under $SCREENSHOT_DIR (default: bench/screenshots, git-ignored)
// and returns its path.
func Screenshot(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	dir := os.Getenv("SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot(), "bench", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png := Get(t, ctx, 30*time.Second, chromedp.FullScreenshot(100)) // 100: PNG (lower qualities are JPEG)
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// repoRoot is the directory holding go.mod above the working directory.
func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return dir
}
