package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
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
// the shell's pty (stty reports the terminal's new size). A web server
// started there becomes a preview: the page lists its port (a link on the
// gateway's origin), shares it for an hour (the link, shown once, serves
// the page to anyone), lists the share link and revokes it (the link then
// serves nothing).
func TestSessionTerminalPreviewAndShareLinks(t *testing.T) {
	origin, platform := startPlatform(t, "RUN_SESSIONS", "gateway")
	ctx := browser.New(t, browser.Options{})
	const wait = 120 * time.Second // a sandbox and OpenCode boot on a loaded machine
	token := signUp(t, ctx, origin, "Grace", "")
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

	// A web server in the sandbox: its port becomes a preview.
	port := 20000 + rand.IntN(20000)
	typ(fmt.Sprintf(`d=$(mktemp -d); echo shared-page-ok > $d/index.html; python3 -m http.server %d --bind 127.0.0.1 --directory $d >/dev/null 2>&1 &`, port))
	item := fmt.Sprintf(`.preview-item[data-port="%d"]`, port)
	browser.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(item+` a`)))
	gateway := "http://" + platform.App.GatewayAddr()
	if href := browser.Get(t, ctx, wait, chromedp.Evaluate[string](`document.querySelector('`+item+` a').href`)); !strings.HasPrefix(href, gateway+"/") {
		t.Fatalf("the preview link %s is not on the gateway's origin %s", href, gateway)
	}
	browser.Do(t, ctx, wait,
		chromedp.SetValue(chromedp.CSS(`select[name=share_ttl]`), "0"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('select[name=share_ttl]').dispatchEvent(new Event('change', {bubbles: true}))`),
		chromedp.Click(chromedp.CSS(item+` [data-action=share]`)),
		chromedp.WaitVisible(chromedp.CSS(`.share-created input[name=share_url]`)),
	)
	shareURL := browser.Get(t, ctx, wait, chromedp.Evaluate[string](`document.querySelector('.share-created input[name=share_url]').value`))
	shareID := browser.Get(t, ctx, wait, chromedp.Evaluate[string](`document.querySelector('.share-created').dataset.shareId`))
	if !strings.HasPrefix(shareURL, gateway+"/") || !strings.Contains(shareURL, "proliferate_share=pps_") {
		t.Fatalf("share link %q", shareURL)
	}
	var ttl time.Duration
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT EXTRACT(EPOCH FROM expires_at - created_at)::bigint * 1000000000 FROM preview_shares WHERE id = $1`, shareID).Scan(&ttl); err != nil || ttl != time.Hour {
		t.Fatalf("the share link lives %v (%v), want the hour chosen", ttl, err)
	}
	// Anyone with the link (no account: a fresh client) sees the page.
	visit := func() (int, string) {
		jar, _ := cookiejar.New(nil)
		resp, err := (&http.Client{Jar: jar}).Get(shareURL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := visit(); code != 200 || !strings.Contains(body, "shared-page-ok") {
		t.Fatalf("the share link answers %d %.200s", code, body)
	}
	row := `.share-list li[data-share-id="` + shareID + `"]`
	browser.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(row+` [data-action=revoke-share]`)))
	browser.Screenshot(t, ctx, "session-share-links")
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(row+` [data-action=revoke-share]`)),
		chromedp.WaitNotPresent(chromedp.CSS(row)),
		chromedp.WaitNotPresent(chromedp.CSS(`.share-created`)),
	)
	if code, body := visit(); code == 200 || strings.Contains(body, "shared-page-ok") {
		t.Fatalf("a revoked share link still serves the page: %d", code)
	}
}
