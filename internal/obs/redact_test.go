package obs_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/obs"
)

func TestRedactURLSecrets(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:hunter2@example.com/x":                      "https://user:xxxxx@example.com/x",
		"http://h/p?password=hunter2&mode=a":                      "http://h/p?password=xxxxx&mode=a",
		"redis://h:6379/0?Password=hunter2":                       "redis://h:6379/0?Password=xxxxx",
		"s3://b/k?X-Amz-Signature=abc&X-Amz-Credential=AK%2F1":    "s3://b/k?X-Amz-Signature=xxxxx&X-Amz-Credential=xxxxx",
		"https://h/cb?access_token=t1&state=ok#frag":              "https://h/cb?access_token=xxxxx&state=ok#frag",
		"dial https://h/?client_secret=cs&sslpassword=pw refused": "dial https://h/?client_secret=xxxxx&sslpassword=xxxxx refused",
		"https://h/p?mode=fast&page=2":                            "https://h/p?mode=fast&page=2",
		"no urls here, just a=b":                                  "no urls here, just a=b",
	} {
		if got := obs.RedactURLSecrets(in); got != want {
			t.Errorf("RedactURLSecrets(%q) = %q, want %q", in, got, want)
		}
	}
}

// Whatever a caller logs (message, string, error, *url.URL), in either
// format, the URL's secrets never reach the output.
func TestLoggerRedactsURLSecrets(t *testing.T) {
	const canary = "canary-pw-7f3a"
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		log := obs.NewLogger(&buf, "debug", format)
		u, _ := url.Parse("https://bot:" + canary + "@example.com/api?x=1")
		log.Info("connecting to https://a:"+canary+"@h/", "upstream", "http://h/v1?token="+canary,
			"error", fmt.Errorf("dial: %w", errors.New("GET http://h/?password="+canary+" failed")), "url", u)
		out := buf.String()
		if strings.Contains(out, canary) || !strings.Contains(out, "xxxxx") {
			t.Fatalf("%s log leaks or lost the line:\n%s", format, out)
		}
	}
}
