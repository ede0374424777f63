package web_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/app/apptest"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
	"github.com/proliferate/proliferate/web"
)

// The scripts index.html loads before the first screen renders: its entry
// module and the chunks Vite preloads with it (lazily loaded screens, like
// settings, are not part of it).
var firstScreenScripts = regexp.MustCompile(`<(?:script[^>]*\bsrc|link[^>]*rel="modulepreload"[^>]*\bhref)="(/assets/[^"]+\.js)"`)

// firstScreenGzip is the gzipped size (default level, as a server sends
// it) of the first screen's JS of a Vite build in dir.
func firstScreenGzip(b *testing.B, dir string) float64 {
	b.Helper()
	html, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		b.Fatal(err)
	}
	var total int
	ms := firstScreenScripts.FindAllStringSubmatch(string(html), -1)
	if len(ms) == 0 {
		b.Fatalf("no scripts in %s/index.html", dir)
	}
	for _, m := range ms {
		js, err := os.ReadFile(filepath.Join(dir, m[1]))
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(js)
		_ = zw.Close()
		total += buf.Len()
	}
	return float64(total)
}

// BenchmarkDashboardJS reports the gzipped JS of the dashboard's first
// screen (web/dist, built by make web) next to the smallest Preact app
// (web/benchbaseline) built by the same Vite in this run. Goal: under
// 150 kB.
func BenchmarkDashboardJS(b *testing.B) {
	if !web.Built() {
		b.Fatal("the dashboard is not built: run `make web`")
	}
	base := b.TempDir()
	build := exec.Command("node_modules/.bin/vite", "build", "benchbaseline", "--outDir", base, "--emptyOutDir", "--logLevel", "error")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the baseline: %v\n%s", err, out)
	}
	for _, c := range []struct{ name, dir string }{{"first-screen", "dist"}, {"trivial-preact", base}} {
		b.Run(c.name, func(b *testing.B) {
			var size float64
			for b.Loop() {
				size = firstScreenGzip(b, c.dir)
			}
			b.ReportMetric(size/1000, "gzip-kB")
		})
	}
}

// BenchmarkSessionsListFirstRender is the time from navigating to
// /sessions (a full page load: the app, /me, /orgs and the list's first
// page) until its rows are on screen, for an organization with 5,000
// sessions (seeded with SQL) and, as the baseline, for an empty one
// (until its empty state is on screen).
func BenchmarkSessionsListFirstRender(b *testing.B) {
	if !web.Built() {
		b.Fatal("the dashboard is not built: run `make web`")
	}
	cfg := apptest.Config(b, filepath.Join(b.TempDir(), "kafka"))
	platform := apptest.Start(b, cfg, nil)
	testenv.Eventually(b, 30*time.Second, "the API to listen", func() bool { return platform.App.APIAddr() != "" })
	origin := "http://" + platform.App.APIAddr()

	stamp := time.Now().UnixNano()
	fullEmail := fmt.Sprintf("bench-full-%d@example.com", stamp)
	full := benchSignup(b, origin, fullEmail)
	empty := benchSignup(b, origin, fmt.Sprintf("bench-empty-%d@example.com", stamp))
	if _, err := platform.App.Pool.Exec(b.Context(), `INSERT INTO sessions (org_id, created_by, title, status, latest_task, created_at, last_activity_at, ended_at)
		SELECT u.active_org_id, u.id, 'Session ' || g, 'stopped', 'Task ' || g, now() - g * interval '1 minute', now() - g * interval '1 minute', now()
		FROM users u, generate_series(1, 5000) g WHERE u.email = $1`, fullEmail); err != nil {
		b.Fatal(err)
	}

	ctx := browser.New(b, browser.Options{})
	for _, c := range []struct{ name, auth, ready string }{
		{"5000-sessions", full, `li[data-session-id]`},
		{"baseline", empty, `.content .empty`},
	} {
		b.Run(c.name, func(b *testing.B) {
			nav, ready := chromedp.Navigate(origin+"/sessions"), chromedp.WaitVisible(chromedp.CSS(c.ready))
			authJSON, _ := json.Marshal(c.auth)
			browser.Do(b, ctx, time.Minute,
				chromedp.Navigate(origin+"/login"),
				chromedp.Evaluate[chromedp.Void](`localStorage.setItem('proliferate.auth', `+string(authJSON)+`)`),
				nav, ready, // warm: the assets are cached for both cases alike
			)
			start := time.Now()
			for b.Loop() {
				browser.Do(b, ctx, time.Minute, nav, ready)
			}
			b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "first-render-ms")
		})
	}
}

// benchSignup signs a person up over the REST API and starts the trial; it
// returns what the dashboard keeps in localStorage (proliferate.auth).
func benchSignup(b *testing.B, origin, email string) string {
	b.Helper()
	post := func(path, token string, body any) []byte {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, origin+"/api/v1"+path, bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		if resp.StatusCode >= 300 {
			b.Fatalf("POST %s: %d %s", path, resp.StatusCode, buf.String())
		}
		return buf.Bytes()
	}
	var auth struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	_ = json.Unmarshal(post("/auth/signup", "", map[string]string{"email": email, "password": "mauve otter juggles kites", "name": "Bench"}), &auth)
	post("/onboarding/start-trial", auth.AccessToken, map[string]string{"plan": "dev"})
	stored, _ := json.Marshal(map[string]string{"access": auth.AccessToken, "refresh": auth.RefreshToken})
	return string(stored)
}

// streamRate and streamFor: the agent stream BenchmarkTimelineStream
// renders (2,000 tokens a second for ten seconds).
const (
	streamRate = 2000
	streamFor  = 10 * time.Second
)

// streamStep is one frame of the synthetic agent stream: a token (tokens
// > 0; consecutive tokens of one part may be coalesced) or another frame.
type streamStep struct {
	token  *protocol.TokenMessage
	other  any
	tokens int
}

// streamScript is the gateway frames of an agent answering at length:
// assistant messages of two markdown text parts (paragraphs, lists,
// inline and fenced code) around a bash tool call with its input and
// output, each part finished by text_part_complete, each message by
// message_complete: n tokens in all. last is the id of the last message.
func streamScript(n int) (steps []streamStep, last string) {
	words := strings.Fields(`The **failing test** is in internal/billing: the ledger applies an event twice when the consumer restarts
between the write and the commit of its offset. Here is what I changed:
- the apply runs in the same transaction as the offset, so a restart replays nothing;
- the idempotency key is the event's ` + "`id`" + `, checked with ` + "`ON CONFLICT DO NOTHING`" + `;
- a test that kills the consumer between the two.
Then I ran the whole package again, and it passes on the second run as well.`)
	code := "\n\n```go\nfunc (l *Ledger) Apply(ctx context.Context, ev Event) error {\n\treturn l.tx(ctx, func(tx pgx.Tx) error {\n\t\treturn insert(ctx, tx, ev)\n\t})\n}\n```\n\n"
	output := strings.Repeat("ok  \tgithub.com/proliferate/proliferate/consumers/billingledger\t1.204s\n", 30)
	tokens, w, msg := 0, 0, 0
	text := func(mid, pid string, count int) {
		var full strings.Builder
		for i := 0; i < count; i++ {
			tok := words[w%len(words)] + " "
			if w%len(words) == len(words)-1 {
				tok += "\n\n"
			}
			if w%400 == 200 {
				tok += code
			}
			w++
			full.WriteString(tok)
			steps = append(steps, streamStep{token: &protocol.TokenMessage{Type: protocol.MsgToken, MessageID: mid, PartID: pid, Token: tok}, tokens: 1})
		}
		steps = append(steps, streamStep{other: protocol.TextPartCompleteMessage{Type: protocol.MsgTextPartComplete, MessageID: mid, PartID: pid, Text: full.String()}})
		tokens += count
	}
	for tokens < n {
		msg++
		mid := fmt.Sprintf("msg-%d", msg)
		last = mid
		steps = append(steps, streamStep{other: protocol.MessageMessage{Type: protocol.MsgMessage, Message: protocol.ChatMessage{ID: mid, Role: "assistant", Completed: false}}})
		text(mid, mid+"-a", 300)
		call := mid + "-call"
		steps = append(steps,
			streamStep{other: protocol.ToolStartMessage{Type: protocol.MsgToolStart, MessageID: mid, PartID: call, ToolCallID: call, Tool: "bash",
				Args: json.RawMessage(`{"command":"go test -race ./consumers/billingledger/"}`)}},
			streamStep{other: protocol.ToolEndMessage{Type: protocol.MsgToolEnd, MessageID: mid, ToolCallID: call, Tool: "bash", Status: "completed", Result: output, DurationMS: 1204}})
		text(mid, mid+"-b", 300)
		steps = append(steps, streamStep{other: protocol.MessageCompleteMessage{Type: protocol.MsgMessageComplete, MessageID: mid}})
	}
	return steps, last
}

// frameServer stands in for the session gateway behind the dashboard's
// front door (DASHBOARD_GATEWAY_URL): the session's WebSocket speaks the
// gateway's frame protocol (init, status, then the stream the bench
// starts) and its pending action approvals are none.
type frameServer struct {
	*httptest.Server
	// start starts the stream of the next connection: nil streams nothing
	// (the idle baseline); done is closed after its last frame.
	start chan *streamRun
}

type streamRun struct {
	steps   []streamStep
	batch   time.Duration // coalescing window of tokens (0: one frame per token)
	done    chan struct{}
	lastOut time.Time
}

func newFrameServer(b *testing.B) *frameServer {
	fs := &frameServer{start: make(chan *streamRun)}
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /proliferate/{id}/actions/invocations", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"invocations":[]}`))
	})
	mux.HandleFunc("GET /proliferate/{id}", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		gone := make(chan struct{}) // closed when the page goes away
		go func() {                 // reads (pings, prompts) until then
			defer close(gone)
			for {
				if _, _, err := c.NextReader(); err != nil {
					return
				}
			}
		}()
		id := r.PathValue("id")
		send := func(v any) error {
			raw, _ := json.Marshal(v)
			return c.WriteMessage(websocket.TextMessage, raw)
		}
		if send(protocol.InitMessage{Type: protocol.MsgInit, Session: protocol.SessionInfo{ID: id, Title: "Bench", Status: "running", PRURLs: []string{}},
			Messages: []protocol.ChatMessage{}, Status: protocol.StatusMessage{Type: protocol.MsgStatus, Status: "running", Agent: "idle"}}) != nil {
			return
		}
		var run *streamRun
		select {
		case run = <-fs.start:
		case <-gone:
			return
		}
		// The connection stays open until the page goes away (a closed
		// socket would make the page reconnect and take the next stream).
		defer func() { <-gone }()
		defer close(run.done)
		if run.steps == nil {
			return
		}
		_ = send(protocol.StatusMessage{Type: protocol.MsgStatus, Status: "running", Agent: "busy"})
		tick := 5 * time.Millisecond
		if run.batch > 0 {
			tick = run.batch
		}
		t := time.NewTicker(tick)
		defer t.Stop()
		began, sent, i := time.Now(), 0, 0
		for i < len(run.steps) {
			<-t.C
			due := int(time.Since(began).Seconds() * streamRate)
			var pending *protocol.TokenMessage // tokens coalesced in this window
			flush := func() error {
				if pending == nil {
					return nil
				}
				err := send(pending)
				pending = nil
				return err
			}
			for ; i < len(run.steps) && (sent < due || run.steps[i].tokens == 0); i++ {
				s := run.steps[i]
				if s.token == nil {
					if flush() != nil || send(s.other) != nil {
						return
					}
					continue
				}
				sent++
				switch {
				case run.batch == 0:
					if send(s.token) != nil {
						return
					}
				case pending != nil && pending.PartID == s.token.PartID:
					pending.Token += s.token.Token
				default:
					if flush() != nil {
						return
					}
					tok := *s.token
					pending = &tok
				}
			}
			if flush() != nil {
				return
			}
		}
		_ = send(protocol.StatusMessage{Type: protocol.MsgStatus, Status: "running", Agent: "idle"})
		run.lastOut = time.Now()
	})
	fs.Server = httptest.NewServer(mux)
	b.Cleanup(fs.Close)
	return fs
}

// frameRecorder is injected into the page: it records every animation
// frame's timestamp and the long tasks (main-thread work over 50 ms).
const frameRecorder = `(() => {
  const b = (window.__frames = { t: [], long: [], on: true })
  const loop = (t) => { if (b.on) { b.t.push(t); requestAnimationFrame(loop) } }
  requestAnimationFrame(loop)
  b.obs = new PerformanceObserver((l) => { for (const e of l.getEntries()) b.long.push(e.duration) })
  b.obs.observe({ type: 'longtask' })
})()`

type recordedFrames struct {
	T    []float64 `json:"t"`
	Long []float64 `json:"long"`
}

// frameStats turns frame timestamps (ms) into what the bench reports: the
// frame rate, the frames missed at 60 Hz (an interval of k frame budgets
// missed k-1), the intervals' p50, p95 and max, and the long tasks.
func frameStats(b *testing.B, r recordedFrames) {
	const budget = 1000.0 / 60
	if len(r.T) < 2 {
		b.Fatalf("%d animation frames recorded", len(r.T))
	}
	var dts []float64
	dropped := 0.0
	for i := 1; i < len(r.T); i++ {
		dt := r.T[i] - r.T[i-1]
		dts = append(dts, dt)
		dropped += max(0, math.Round(dt/budget)-1)
	}
	span := r.T[len(r.T)-1] - r.T[0]
	sort.Float64s(dts)
	q := func(p float64) float64 { return dts[min(len(dts)-1, int(p*float64(len(dts))))] }
	longMS := 0.0
	for _, d := range r.Long {
		longMS += d
	}
	b.ReportMetric(float64(len(dts))/(span/1000), "frames/s")
	b.ReportMetric(100*dropped/(span/budget), "dropped-%")
	b.ReportMetric(q(0.5), "p50-frame-ms")
	b.ReportMetric(q(0.95), "p95-frame-ms")
	b.ReportMetric(dts[len(dts)-1], "max-frame-ms")
	b.ReportMetric(float64(len(r.Long)), "long-tasks")
	b.ReportMetric(longMS, "long-task-ms")
}

// BenchmarkTimelineStream renders an agent's stream of 2,000 tokens a
// second for ten seconds (markdown text, tool calls, finished messages)
// in the session page of the real dashboard, behind the real front door,
// fed by a WebSocket speaking the gateway's frame protocol; it records
// the page's animation frames and long tasks in Chromium. per-token sends
// each token as its own frame (the gateway with TOKEN_BATCH off: the
// worst case); batched coalesces tokens in 50 ms windows as the gateway
// does by default. The baseline is the same page, connected and idle, for
// as long. catch-up-ms is how long after the last frame the page showed
// the finished stream.
func BenchmarkTimelineStream(b *testing.B) {
	if !web.Built() {
		b.Fatal("the dashboard is not built: run `make web`")
	}
	fs := newFrameServer(b)
	cfg := apptest.Config(b, filepath.Join(b.TempDir(), "kafka"), "DASHBOARD_GATEWAY_URL", fs.URL)
	platform := apptest.Start(b, cfg, nil)
	testenv.Eventually(b, 30*time.Second, "the API to listen", func() bool { return platform.App.APIAddr() != "" })
	origin := "http://" + platform.App.APIAddr()
	email := fmt.Sprintf("bench-stream-%d@example.com", time.Now().UnixNano())
	auth := benchSignup(b, origin, email)
	var sessionID string
	if err := platform.App.Pool.QueryRow(b.Context(), `INSERT INTO sessions (org_id, created_by, title, status, latest_task)
		SELECT u.active_org_id, u.id, 'Streaming agent', 'running', 'Fix the ledger' FROM users u WHERE u.email = $1 RETURNING id`, email).Scan(&sessionID); err != nil {
		b.Fatal(err)
	}
	steps, last := streamScript(int(streamRate * streamFor.Seconds()))

	ctx := browser.New(b, browser.Options{})
	authJSON, _ := json.Marshal(auth)
	browser.Do(b, ctx, time.Minute,
		chromedp.Navigate(origin+"/login"),
		chromedp.Evaluate[chromedp.Void](`localStorage.setItem('proliferate.auth', `+string(authJSON)+`)`),
	)
	for _, c := range []struct {
		name  string
		steps []streamStep
		batch time.Duration
	}{
		{"per-token", steps, 0},
		{"batched", steps, 50 * time.Millisecond},
		{"baseline", nil, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				// A fresh page and connection; recording starts once the
				// init frame is shown.
				browser.Do(b, ctx, time.Minute,
					chromedp.Navigate(origin+"/sessions/"+sessionID),
					chromedp.WaitVisible(chromedp.CSS(`[data-testid=live-status][data-agent=idle]`)),
					chromedp.Evaluate[chromedp.Void](frameRecorder),
				)
				b.StartTimer()
				run := &streamRun{steps: c.steps, batch: c.batch, done: make(chan struct{})}
				fs.start <- run
				var catchUp time.Duration
				if c.steps == nil {
					time.Sleep(streamFor) // not a synchronisation: the idle page is recorded as long as the stream lasts
				} else {
					<-run.done
					// A page that cannot keep up is minutes behind: wait.
					browser.Do(b, ctx, 5*time.Minute, chromedp.WaitVisible(chromedp.CSS(`.msg[data-message-id="`+last+`"]:not(.streaming)`)))
					catchUp = time.Since(run.lastOut)
				}
				rec := browser.Get(b, ctx, time.Minute, chromedp.Evaluate[recordedFrames](`(() => { const b = window.__frames; b.on = false; b.obs.disconnect(); return { t: b.t, long: b.long } })()`))
				b.StopTimer()
				frameStats(b, rec)
				if c.steps != nil {
					b.ReportMetric(float64(catchUp.Milliseconds()), "catch-up-ms")
				}
				// The page goes away (its socket closes and the server's
				// handler returns).
				browser.Do(b, ctx, time.Minute, chromedp.Navigate("about:blank"))
				b.StartTimer()
			}
		})
	}
}
