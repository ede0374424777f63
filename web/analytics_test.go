package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// TestAnalyticsToolsAndUsage: tool calls and session telemetry produced
// onto tools.calls and sessions.events (through the outbox, as the gateway
// does) are materialized by the running tool-materializer group, and the
// analytics page shows them: the tools table (calls, failures, p50/p95)
// and the usage chart by automation and by person.
func TestAnalyticsToolsAndUsage(t *testing.T) {
	origin, platform := startPlatform(t)
	ctx := browser.New(t, browser.Options{})
	email := fmt.Sprintf("ada-%d@example.com", time.Now().UnixNano())
	token := signUp(t, ctx, origin, "Ada Analyst", email)
	userID, orgID := whoAmI(t, origin, token)

	sess := uuid.NewString()
	now := time.Now().UTC()
	var events []*schemas.Event
	add := func(p schemas.Payload) { events = append(events, schemas.New(orgID, p)) }
	add(&schemas.SessionEvent{SessionID: sess, Kind: schemas.SessionKindCreated, UserID: &userID})
	add(&schemas.SessionEvent{SessionID: sess, Kind: schemas.SessionKindTelemetry,
		Telemetry: &schemas.SessionTelemetry{MessagesExchanged: 6, ActiveSeconds: 420, PRURLs: []string{"https://github.com/acme/app/pull/7"}}})
	for i, c := range []struct {
		tool, status string
		ms           int64
	}{{"bash", "completed", 120}, {"bash", "completed", 130}, {"bash", "completed", 140}, {"bash", "failed", 5000}, {"verify", "completed", 2300}} {
		started := now.Add(-time.Minute)
		ms := c.ms
		add(&schemas.ToolCall{SessionID: sess, ToolCallID: fmt.Sprintf("call_%d", i), ToolName: c.tool, Status: c.status,
			ExecutedBy: "gateway", StartedAt: &started, DurationMs: &ms})
	}
	err := pgx.BeginFunc(context.Background(), platform.App.Pool, func(tx pgx.Tx) error {
		for _, ev := range events {
			topic := topics.ToolsCalls
			if _, ok := ev.Payload.(*schemas.SessionEvent); ok {
				topic = topics.SessionsEvents
			}
			if err := outbox.AddEvent(context.Background(), tx, platform.App.Codec, topic, sess, ev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the tool-materializer to apply the records", func() bool {
		_, tools := settingsCall(t, origin, token, http.MethodGet, "/analytics/tools", nil)
		_, usage := settingsCall(t, origin, token, http.MethodGet, "/analytics/usage?by=person", nil)
		return strings.Contains(tools, `"tool":"verify"`) && strings.Contains(usage, userID)
	})

	browser.Do(t, ctx, settingsWait,
		chromedp.Navigate(origin+"/sessions"),
		chromedp.WaitVisible(chromedp.CSS(`nav a[href="/analytics"]`)),
		chromedp.Click(chromedp.CSS(`nav a[href="/analytics"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-tool=bash]`)),
		chromedp.WaitVisible(chromedp.CSS(`svg.chart rect.bar`)),
	)
	row := browser.Get(t, ctx, settingsWait, chromedp.Evaluate[string](`[...document.querySelectorAll('tr[data-tool=bash] > *')].map((c) => c.textContent).join('|')`))
	// bash: 4 calls, 1 failure (25%), p50 within the histogram's 7.5 % of
	// 130 ms, p95 of 5 s.
	if !strings.HasPrefix(row, "bash|4|1 (25%)|") || !strings.Contains(row, " ms|") || !strings.HasSuffix(row, " s") {
		t.Fatalf("bash row = %q", row)
	}
	if got := browser.Get(t, ctx, settingsWait, chromedp.Evaluate[string](`document.querySelector('tr[data-tool=verify]').textContent`)); !strings.HasPrefix(got, "verify1") {
		t.Fatalf("verify row = %q", got)
	}
	browser.Do(t, ctx, settingsWait,
		chromedp.Click(chromedp.CSS(`.segmented button:nth-child(2)`)),
		chromedp.WaitVisible(chromedp.CSS(`.segmented button:nth-child(2)[aria-pressed=true]`)),
	)
	testenv.Eventually(t, settingsWait, "the chart's legend to name the person", func() bool {
		return strings.Contains(browser.Get(t, ctx, settingsWait, chromedp.Evaluate[string](`document.querySelector('.legend')?.textContent ?? ''`)), "Ada Analyst")
	})
	title := browser.Get(t, ctx, settingsWait, chromedp.Evaluate[string](`document.querySelector('svg.chart rect.bar title').textContent`))
	if !strings.HasSuffix(title, " · Ada Analyst: 6") {
		t.Fatalf("bar title = %q", title)
	}
	browser.Screenshot(t, ctx, "analytics")
}

// TestAnalyticsRealSessionToolCall: the real agent (OpenCode with the
// scripted model) runs bash in a session started from the dashboard; the
// finished call travels on sessions.transcript, the tool-materializer
// counts it, and the analytics page lists bash.
func TestAnalyticsRealSessionToolCall(t *testing.T) {
	origin, _ := startPlatform(t, "RUN_SESSIONS", "gateway")
	ctx := browser.New(t, browser.Options{})
	// The first answer boots a sandbox and OpenCode: generous on a loaded
	// machine.
	const wait = 120 * time.Second
	token := signUp(t, ctx, origin, "Grace", "")
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`[data-action=new-session]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.new-session textarea[name=initial_prompt]`)),
		chromedp.SendKeys(chromedp.CSS(`form.new-session input[name=title]`), "Make a file"),
		chromedp.SendKeys(chromedp.CSS(`form.new-session textarea[name=initial_prompt]`), "Make a file. [[script:bash]]"),
		chromedp.Click(chromedp.CSS(`form.new-session button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.msg-assistant details.tool[data-tool=bash][data-status=completed]`)),
	)
	testenv.Eventually(t, wait, "the bash call in the analytics", func() bool {
		var tools struct {
			Tools []struct {
				Tool  string `json:"tool"`
				Calls int    `json:"calls"`
			} `json:"tools"`
		}
		apiDo(t, origin, http.MethodGet, "/analytics/tools", token, nil, &tools)
		return len(tools.Tools) == 1 && tools.Tools[0].Tool == "bash" && tools.Tools[0].Calls == 1
	})
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`nav a[href="/analytics"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-tool=bash]`)),
	)
	row := browser.Get(t, ctx, wait, chromedp.Evaluate[string](`[...document.querySelectorAll('tr[data-tool=bash] > *')].map((c) => c.textContent).join('|')`))
	if !strings.HasPrefix(row, "bash|1|0|") {
		t.Fatalf("bash row = %q", row)
	}
}

// TestSessionPageShowsTokens: an llm.spend record of a session (through the
// outbox, as the LLM proxy produces it), produced twice, is materialized
// once by the tool-materializer group, and the session page shows its
// tokens next to its credits.
func TestSessionPageShowsTokens(t *testing.T) {
	origin, platform := startPlatform(t)
	ctx := browser.New(t, browser.Options{})
	email := fmt.Sprintf("tia-%d@example.com", time.Now().UnixNano())
	token := signUp(t, ctx, origin, "Tia Tokens", email)
	userID, orgID := whoAmI(t, origin, token)
	sess := sessionstest.New(t, platform.App.Pool, orgID, sessionstest.Options{CreatedBy: userID, Status: "stopped", Title: "Token session"})
	now := time.Now().UTC()
	spend := &schemas.LLMSpend{RequestID: "req-" + uuid.NewString(), SessionID: &sess, Model: "claude-sonnet", InputTokens: 12345,
		OutputTokens: 678, CacheReadTokens: 90000, CacheWriteTokens: 12, TotalTokens: 103035, StartedAt: now, EndedAt: now, Source: "llm-proxy"}
	err := pgx.BeginFunc(context.Background(), platform.App.Pool, func(tx pgx.Tx) error {
		for range 2 { // the same request twice: counted once
			if err := outbox.AddEvent(context.Background(), tx, platform.App.Codec, topics.LLMSpend, orgID, schemas.New(orgID, spend)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the tool-materializer to apply the spend", func() bool {
		_, usage := settingsCall(t, origin, token, http.MethodGet, "/analytics/sessions/"+sess+"/usage", nil)
		return strings.Contains(usage, `"input_tokens":12345`)
	})
	browser.Do(t, ctx, settingsWait,
		chromedp.Navigate(origin+"/sessions/"+sess),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=tokens]`)),
	)
	got := browser.Get(t, ctx, settingsWait, chromedp.Evaluate[string](`document.querySelector('[data-testid=tokens]').textContent`))
	if want := "12,345 in · 678 out · 90,000 cache read · 12 cache write"; got != want {
		t.Fatalf("tokens = %q, want %q", got, want)
	}
}
