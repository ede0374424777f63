package browser

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// failingTB is a test that has failed: it keeps its cleanups and logs so
// the test can run them and read what they printed.
type failingTB struct {
	testing.TB
	cleanups []func()
	logs     []string
}

func (f *failingTB) Failed() bool            { return true }
func (f *failingTB) Cleanup(fn func())       { f.cleanups = append(f.cleanups, fn) }
func (f *failingTB) Logf(s string, a ...any) { f.logs = append(f.logs, fmt.Sprintf(s, a...)) }

func (f *failingTB) finish() string {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	return strings.Join(f.logs, "\n")
}

func TestReportOnFailureLogsThePageOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `<!doctype html><body><p>Sessions of Acme</p><script>console.log("hello from the page"); fetch("/missing")</script></body>`)
	}))
	t.Cleanup(srv.Close)
	ctx := New(t, Options{})
	Do(t, ctx, 30*time.Second, chromedp.Navigate(srv.URL+"/sessions"), chromedp.WaitVisible(chromedp.CSS(`p`)))
	// The page's fetch of /missing is answered before the body is read back.
	Do(t, ctx, 30*time.Second, chromedp.Poll[chromedp.Void](`performance.getEntriesByType("resource").length > 0`))

	// A test that failed on its own (not in a browser step) logs the page.
	f := &failingTB{TB: t}
	ReportOnFailure(f, ctx)
	out := f.finish()
	for _, want := range []string{srv.URL + "/sessions", "Sessions of Acme", "hello from the page", "HTTP 404 " + srv.URL + "/missing"} {
		if !strings.Contains(out, want) {
			t.Errorf("the failure report lacks %q:\n%s", want, out)
		}
	}

	// Once a failed step has printed the report, the test's own dump is
	// not printed a second time.
	_ = report(ctx)
	g := &failingTB{TB: t}
	ReportOnFailure(g, ctx)
	if out := g.finish(); out != "" {
		t.Errorf("the report was printed again after a failed step had printed it:\n%s", out)
	}
}
