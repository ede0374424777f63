package browser

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// recorder keeps what a failed step needs to be understood: the page's
// navigations, console output, uncaught exceptions, error responses and
// failed requests (the last maxLines), and the requests in flight. Events
// arrive in chromedp's read loop of the tab, so each is only appended
// under a lock.
type recorder struct {
	mu      sync.Mutex
	start   time.Time
	lines   []string
	pending map[network.RequestID]string
	// reported is set once a failed step has printed the report, so a
	// test's own failure dump (ReportOnFailure) does not print it again.
	reported bool
}

const maxLines = 60

type recorderKey struct{}

func newRecorder() *recorder {
	return &recorder{start: time.Now(), pending: map[network.RequestID]string{}}
}

func (r *recorder) addf(format string, args ...any) {
	r.lines = append(r.lines, fmt.Sprintf("%7.2fs ", time.Since(r.start).Seconds())+fmt.Sprintf(format, args...))
	if len(r.lines) > maxLines {
		r.lines = r.lines[len(r.lines)-maxLines:]
	}
}

func (r *recorder) event(ev any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		parts := make([]string, 0, len(e.Args))
		for _, a := range e.Args {
			if len(a.Value) > 0 {
				parts = append(parts, string(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		r.addf("console.%s %s", e.Type, strings.Join(parts, " "))
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg = d.Exception.Description
		}
		r.addf("exception %s (%s:%d)", msg, d.URL, d.LineNumber+1)
	case *network.EventRequestWillBeSent:
		r.pending[e.RequestID] = e.Request.Method + " " + e.Request.URL
		if e.Type == network.ResourceTypeDocument {
			r.addf("navigate %s", e.Request.URL)
		}
	case *network.EventResponseReceived:
		if e.Response.Status >= 400 {
			r.addf("HTTP %d %s", e.Response.Status, e.Response.URL)
		}
	case *network.EventLoadingFinished:
		delete(r.pending, e.RequestID)
	case *network.EventLoadingFailed:
		r.addf("request failed %s: %s (canceled %v)", r.pending[e.RequestID], e.ErrorText, e.Canceled)
		delete(r.pending, e.RequestID)
	}
}

// report is the page's state and recent history, for a failed step. The
// page is asked directly on its target with a deadline of its own: a page
// whose renderer hangs also blocks chromedp's own frame bookkeeping, which
// the usual actions wait for.
func report(ctx context.Context) string {
	var b strings.Builder
	if tgt := chromedp.FromContext(ctx).Target; tgt != nil {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		res, err := cdp.Call(c, tgt, runtime.Evaluate, runtime.EvaluateParams{Expression: `JSON.stringify({url: location.href,
			ready: document.readyState, text: (document.body ? document.body.innerText : '').slice(0, 1500)})`})
		cancel()
		switch {
		case err != nil:
			fmt.Fprintf(&b, "page state: %v (a hung renderer does not answer)\n", err)
		case res.ExceptionDetails != nil:
			fmt.Fprintf(&b, "page state: %s\n", res.ExceptionDetails.Text)
		default:
			fmt.Fprintf(&b, "page state: %s\n", res.Result.Value)
		}
	}
	if r, ok := ctx.Value(recorderKey{}).(*recorder); ok {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.reported = true
		b.WriteString("recent page events:\n")
		for _, l := range r.lines {
			b.WriteString("  " + l + "\n")
		}
		if len(r.pending) > 0 {
			inflight := make([]string, 0, len(r.pending))
			for _, u := range r.pending {
				inflight = append(inflight, u)
			}
			sort.Strings(inflight)
			b.WriteString("requests in flight:\n  " + strings.Join(inflight, "\n  ") + "\n")
		}
	}
	return b.String()
}

// ReportOnFailure logs the page's state and recent history when the test
// fails for a reason other than a browser step (an API check, say); a
// failed Do or Get has printed it already. Like the steps' own report, it
// asks the page with a deadline, so a hung renderer cannot hold the test.
func ReportOnFailure(t testing.TB, ctx context.Context) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if r, ok := ctx.Value(recorderKey{}).(*recorder); ok {
			r.mu.Lock()
			done := r.reported
			r.mu.Unlock()
			if done {
				return
			}
		}
		t.Logf("the page when the test failed:\n%s", report(ctx))
	})
}
