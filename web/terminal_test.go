package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/internal/testenv/browser"
)

// The front door forwards exactly the gateway's terminal WebSocket
// (GET /proxy/{sid}/{token}/terminal) on the dashboard's origin: the
// gateway answers it (its own 400 for a plain GET, its own 401 for an
// upgrade with a bad credential); and the share-link routes (JSON of the
// gateway's own). The rest of /proxy/ (the sandbox's OpenCode API) and
// previews stay refused there.
func TestFrontDoorForwardsTheTerminalAndShareLinksNotPreviews(t *testing.T) {
	origin, _ := startPlatform(t)
	do := func(method, path string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(method, origin+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(b, &e)
		return resp.StatusCode, e.Error.Code, e.Error.Message
	}
	const sid = "00000000-0000-0000-0000-000000000000"
	// A plain GET reaches the gateway, which wants an upgrade.
	if code, ecode, msg := do("GET", "/proxy/"+sid+"/not-a-token/terminal"); code != 400 || ecode != "bad_request" || !strings.Contains(msg, "WebSocket") {
		t.Fatalf("terminal path, no upgrade: %d %s %q (want the gateway's 400)", code, ecode, msg)
	}
	// An upgrade with a bad credential: the gateway's 401.
	wsURL := "ws" + strings.TrimPrefix(origin, "http") + "/proxy/" + sid + "/not-a-token/terminal"
	_, resp, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Origin": {origin}})
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("terminal upgrade with a bad token: %v %v (want the gateway's 401)", resp, err)
	}
	// Share links: the gateway's own 401 without a credential.
	for _, c := range []struct{ method, path string }{
		{"GET", "/proliferate/" + sid + "/preview/shares"},
		{"POST", "/proliferate/" + sid + "/preview/3000/share"},
		{"DELETE", "/proliferate/" + sid + "/preview/shares/" + sid},
	} {
		if code, ecode, _ := do(c.method, c.path); code != 401 || ecode != "unauthenticated" {
			t.Fatalf("%s %s: %d %s, want the gateway's 401", c.method, c.path, code, ecode)
		}
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/proxy/" + sid + "/tok/opencode/session"},
		{"POST", "/proxy/" + sid + "/tok/opencode/session"},
		{"POST", "/proxy/" + sid + "/tok/terminal"},
		{"GET", "/proxy/" + sid + "/tok/terminal/x"},
		{"GET", "/proliferate/" + sid + "/preview/3000/"},
		{"GET", "/proliferate/" + sid + "/previews"},
		{"GET", "/proliferate/" + sid + "/preview/3000/share"},
		{"POST", "/proliferate/" + sid + "/preview/3000/share/x"},
		{"POST", "/proliferate/" + sid + "/preview/shares"},
		{"GET", "/proliferate/" + sid + "/preview/shares/" + sid},
		{"DELETE", "/proliferate/" + sid + "/preview/3000/x"},
		{"GET", "/proliferate/" + sid + "/preview/shares%2F..%2F3000/"},
	} {
		if code, ecode, _ := do(c.method, c.path); code != 404 || ecode != "not_found" {
			t.Fatalf("%s %s: %d %s, want 404 not_found", c.method, c.path, code, ecode)
		}
	}
}

// The terminal tab of a running session: xterm.js over the gateway's
// terminal WebSocket through the dashboard's origin. A command typed in
// it runs in the sandbox and its output renders; a smaller window resizes
// the shell's pty (stty reports the terminal's new size).
func TestSessionTerminalTab(t *testing.T) {
	origin, _ := startPlatform(t, "RUN_SESSIONS", "gateway")
	ctx := browser.New(t, browser.Options{})
	const wait = 120 * time.Second // a sandbox and OpenCode boot on a loaded machine
	token := signUpInBrowser(t, ctx, origin)
	var s struct{ ID string }
	if code := apiDo(t, origin, "POST", "/sessions", token, map[string]any{"title": "A shell",
		"initial_prompt": "Make a file. [[script:bash]]", "sandbox_mode": "immediate"}, &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions/"+s.ID+"?tab=terminal"),
		chromedp.WaitVisible(chromedp.CSS(`.terminal-tab[data-state=open] .xterm-screen`)),
	)
	// typ types a line into xterm's input (its helper textarea, focused
	// but not visible): the text as the browser inserts typed text, then
	// the Enter key.
	typ := func(line string) {
		browser.Do(t, ctx, wait,
			chromedp.Focus(chromedp.CSS(`.xterm-helper-textarea`)),
			chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
				_, err := cdp.Call(ctx, tgt, input.InsertText, input.InsertTextParams{Text: line})
				return err
			}),
			chromedp.KeyEvent(kb.Enter),
		)
	}
	// rows is what xterm renders (its DOM renderer's rows).
	const rows = `[...document.querySelectorAll('[data-testid=terminal] .xterm-rows > div')].map(d => d.textContent).join('\n')`
	typ("echo terminal-$((6*7))")
	waitJS(t, ctx, wait, `(`+rows+`).split('\n').some(l => l.trim() === 'terminal-42')`)
	browser.Screenshot(t, ctx, "session-terminal")

	// A smaller window: the terminal refits and the pty follows.
	size := func() (cols, rows string) {
		v := browser.Get(t, ctx, wait, chromedp.Evaluate[string](`(d => d.cols + ' ' + d.rows)(document.querySelector('[data-testid=terminal]').dataset)`))
		cols, rows, _ = strings.Cut(v, " ")
		return cols, rows
	}
	c0, r0 := size()
	browser.Do(t, ctx, wait, chromedp.EmulateViewport(640, 560))
	waitJS(t, ctx, wait, fmt.Sprintf(`(d => d.cols !== %q && d.rows !== %q)(document.querySelector('[data-testid=terminal]').dataset)`, c0, r0))
	c1, r1 := size()
	typ("echo size-$(stty size | tr ' ' x)")
	want := "size-" + r1 + "x" + c1
	waitJS(t, ctx, wait, `(`+rows+`).split('\n').some(l => l.trim() === '`+want+`')`)
	t.Logf("the terminal went from %sx%s to %sx%s (cols x rows); the shell sees %s", c0, r0, c1, r1, want)
}
