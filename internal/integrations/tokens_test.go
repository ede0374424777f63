package integrations_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var (
	keyOnce sync.Once
	appKey  *rsa.PrivateKey
	evilKey *rsa.PrivateKey
)

// keys returns the app's RSA key and an unrelated one (generated once).
func keys(t *testing.T) (*rsa.PrivateKey, *rsa.PrivateKey) {
	t.Helper()
	keyOnce.Do(func() {
		var err error
		if appKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if evilKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	return appKey, evilKey
}

func pkcs1PEM(k *rsa.PrivateKey) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func newGitHub(t *testing.T) (*integrations.GitHubApp, *fakes.GitHub, *fakes.Clock) {
	key, _ := keys(t)
	clock := fakes.NewClock(t0)
	fake := fakes.NewGitHub(t, "4242", &key.PublicKey, clock.Now)
	fake.AddInstallation(fakes.GitHubInstallation{ID: 7, Login: "acme"})
	return integrations.NewGitHubApp("4242", key, fake.URL, nil, clock.Now), fake, clock
}

func TestGitHubInstallationTokenIsCachedUntilTenMinutesBeforeExpiry(t *testing.T) {
	gh, fake, clock := newGitHub(t)
	ctx := context.Background()
	first, err := gh.InstallationToken(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first.Value, "ghs_") || !first.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("token %q expires %v", first.Value, first.ExpiresAt)
	}
	for _, step := range []time.Duration{0, 30 * time.Minute, 19*time.Minute + 59*time.Second} {
		clock.Advance(step)
		got, err := gh.InstallationToken(ctx, 7)
		if err != nil || got.Value != first.Value {
			t.Fatalf("after %v: token changed or failed: %v", clock.Now().Sub(t0), err)
		}
	}
	if n := fake.TokenCalls(); n != 1 {
		t.Fatalf("GitHub called %d times within the cache window, want 1", n)
	}
	clock.Advance(2 * time.Second) // 50m01s: inside the 10-minute refresh margin
	second, err := gh.InstallationToken(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if second.Value == first.Value || fake.TokenCalls() != 2 {
		t.Fatalf("token not refreshed near expiry (calls %d)", fake.TokenCalls())
	}
	// Long after expiry: refreshed again, with an app JWT valid at that time.
	clock.Advance(5 * time.Hour)
	third, err := gh.InstallationToken(ctx, 7)
	if err != nil || third.Value == second.Value || fake.TokenCalls() != 3 {
		t.Fatalf("token not refreshed after expiry: %v (calls %d)", err, fake.TokenCalls())
	}
}

func TestGitHubInstallationTokensAreCachedPerInstallation(t *testing.T) {
	gh, fake, _ := newGitHub(t)
	fake.AddInstallation(fakes.GitHubInstallation{ID: 8, Login: "globex"})
	a, err := gh.InstallationToken(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	b, err := gh.InstallationToken(context.Background(), 8)
	if err != nil {
		t.Fatal(err)
	}
	if a.Value == b.Value || fake.TokenCalls() != 2 {
		t.Fatalf("installations share a token or a fetch (calls %d)", fake.TokenCalls())
	}
}

func TestGitHubConcurrentCallersShareOneFetch(t *testing.T) {
	gh, fake, _ := newGitHub(t)
	arrived, release := fake.Hold()
	defer release()
	const callers = 25
	var wg sync.WaitGroup
	tokens := make([]string, callers)
	errs := make([]error, callers)
	start := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, err := gh.InstallationToken(context.Background(), 7)
			tokens[i], errs[i] = tok.Value, err
		}()
	}
	start(0)
	select { // the first fetch is now in flight and held by the fake
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no token request reached GitHub")
	}
	for i := 1; i < callers; i++ {
		start(i)
	}
	// Release only once every other caller waits on the same fetch.
	deadline := time.Now().Add(10 * time.Second)
	for gh.JoinedFlight(7) != callers-1 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d callers joined the in-flight fetch", gh.JoinedFlight(7))
		}
		runtime.Gosched()
	}
	release()
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || tokens[i] != tokens[0] {
			t.Fatalf("caller %d: %q, %v (want the shared token)", i, tokens[i], errs[i])
		}
	}
	if n := fake.TokenCalls(); n != 1 {
		t.Fatalf("%d concurrent callers made %d upstream calls, want 1", callers, n)
	}
}

func TestGitHubCallerGivingUpDoesNotCancelTheSharedFetch(t *testing.T) {
	gh, fake, _ := newGitHub(t)
	arrived, release := fake.Hold()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := gh.InstallationToken(ctx, 7); done <- err }()
	<-arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller got %v", err)
	}
	release()
	tok, err := gh.InstallationToken(context.Background(), 7)
	if err != nil || tok.Value == "" {
		t.Fatal(err)
	}
	if n := fake.TokenCalls(); n != 1 {
		t.Fatalf("the abandoned fetch was not reused: %d calls", n)
	}
}

func TestGitHubErrorsAreTypedAndNotCached(t *testing.T) {
	gh, fake, _ := newGitHub(t)
	ctx := context.Background()
	fake.AddInstallation(fakes.GitHubInstallation{ID: 9, Login: "initech", Suspended: true})
	cases := []struct {
		name string
		id   int64
		fail int
		want error
	}{
		{"unknown installation", 404404, 0, integrations.ErrUpstreamNotFound},
		{"suspended installation", 9, 0, integrations.ErrSuspended},
		{"server error", 7, http.StatusBadGateway, integrations.ErrUpstreamUnavailable},
		{"rate limited", 7, http.StatusTooManyRequests, integrations.ErrUpstreamUnavailable},
		{"unexpected 4xx", 7, http.StatusUnprocessableEntity, integrations.ErrUpstreamRejected},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake.FailTokens(tc.fail)
			defer fake.FailTokens(0)
			_, err := gh.InstallationToken(ctx, tc.id)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var ue *integrations.UpstreamError
			if !errors.As(err, &ue) || ue.Provider != "github" {
				t.Fatalf("not an upstream error naming github: %#v", err)
			}
			if strings.Contains(err.Error(), "eyJ") {
				t.Fatalf("error leaks the app JWT: %v", err)
			}
		})
	}
	// A failure is not cached: the next call succeeds.
	before := fake.TokenCalls()
	if _, err := gh.InstallationToken(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if fake.TokenCalls() != before+1 {
		t.Fatal("no new fetch after a failure")
	}
}

func TestGitHubRejectsAJWTNotSignedByTheAppKey(t *testing.T) {
	key, evil := keys(t)
	clock := fakes.NewClock(t0)
	fake := fakes.NewGitHub(t, "4242", &key.PublicKey, clock.Now)
	fake.AddInstallation(fakes.GitHubInstallation{ID: 7, Login: "acme"})
	for name, gh := range map[string]*integrations.GitHubApp{
		"wrong key":    integrations.NewGitHubApp("4242", evil, fake.URL, nil, clock.Now),
		"wrong app id": integrations.NewGitHubApp("4243", key, fake.URL, nil, clock.Now),
		// The app's clock is an hour behind GitHub's: its JWT is expired.
		"expired": integrations.NewGitHubApp("4242", key, fake.URL, nil, func() time.Time { return clock.Now().Add(-time.Hour) }),
	} {
		_, err := gh.InstallationToken(context.Background(), 7)
		if !errors.Is(err, integrations.ErrUpstreamUnauthorized) {
			t.Errorf("%s: got %v, want unauthorized", name, err)
		}
	}
	if fake.TokenCalls() != 0 {
		t.Fatal("the fake minted tokens for invalid JWTs")
	}
}

func TestGitHubUnreachable(t *testing.T) {
	key, _ := keys(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	gh := integrations.NewGitHubApp("1", key, srv.URL, nil, nil)
	_, err := gh.InstallationToken(context.Background(), 7)
	if !errors.Is(err, integrations.ErrUpstreamUnavailable) {
		t.Fatalf("got %v", err)
	}
}

func TestParseGitHubPrivateKey(t *testing.T) {
	key, _ := keys(t)
	p8, _ := x509.MarshalPKCS8PrivateKey(key)
	for name, text := range map[string]string{
		"pkcs1":           pkcs1PEM(key),
		"pkcs8":           string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})),
		"escaped newline": strings.ReplaceAll(strings.TrimSpace(pkcs1PEM(key)), "\n", `\n`),
	} {
		got, err := integrations.ParseGitHubPrivateKey(text)
		if err != nil || !got.Equal(key) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := integrations.ParseGitHubPrivateKey("not a key"); err == nil || strings.Contains(err.Error(), "not a key") {
		t.Fatalf("bad key: %v (must not echo the value)", err)
	}
}

func TestTokenNeverPrintsItsValue(t *testing.T) {
	tok := integrations.Token{Value: "ghs_supersecret"}
	for _, s := range []string{fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s", tok, tok, tok, tok)} {
		if strings.Contains(s, "supersecret") {
			t.Fatalf("token printed: %s", s)
		}
	}
}

func newNango(t *testing.T) (*integrations.Nango, *fakes.Nango, *fakes.Clock) {
	clock := fakes.NewClock(t0)
	fake := fakes.NewNango(t, "nango-secret", map[string]string{"sentry": "sentry", "linear": "linear"}, clock.Now)
	return integrations.NewNango(fake.URL, "nango-secret", nil, clock.Now), fake, clock
}

func TestNangoToken(t *testing.T) {
	n, fake, clock := newNango(t)
	ctx := context.Background()
	fake.AddConnection(fakes.NangoConnection{ConnectionID: "c1", ConfigKey: "sentry", AccessToken: "sntrys_live", ExpiresAt: t0.Add(time.Hour)})
	tok, err := n.Token(ctx, "c1", "sentry")
	if err != nil || tok.Value != "sntrys_live" || !tok.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("%q %v %v", tok.Value, tok.ExpiresAt, err)
	}
	// Nango hands back a token whose expiry passed: one forced refresh.
	fake.AddConnection(fakes.NangoConnection{ConnectionID: "c2", ConfigKey: "sentry", AccessToken: "stale", ExpiresAt: t0.Add(-time.Minute), StaleUntilForced: true})
	tok, err = n.Token(ctx, "c2", "sentry")
	if err != nil || tok.Value == "stale" || !strings.HasPrefix(tok.Value, "nango_fresh_") || fake.Forced() != 1 {
		t.Fatalf("stale token not force-refreshed: %q %v (forced %d)", tok.Value, err, fake.Forced())
	}
	// Still expired after the forced refresh: re-authorization is needed.
	fake.AddConnection(fakes.NangoConnection{ConnectionID: "c3", ConfigKey: "sentry", AccessToken: "dead", ExpiresAt: t0.Add(-time.Minute)})
	if _, err := n.Token(ctx, "c3", "sentry"); !errors.Is(err, integrations.ErrReauthRequired) {
		t.Fatalf("dead token: %v", err)
	}
	_ = clock
}

func TestNangoErrors(t *testing.T) {
	n, fake, _ := newNango(t)
	ctx := context.Background()
	fake.AddConnection(fakes.NangoConnection{ConnectionID: "ok", ConfigKey: "linear", AccessToken: "lin_oauth"})
	fake.AddConnection(fakes.NangoConnection{ConnectionID: "broken", ConfigKey: "linear", AccessToken: "x", RefreshFails: true})
	wrong := integrations.NewNango(fake.URL, "not-the-secret", nil, nil)
	cases := []struct {
		name    string
		client  *integrations.Nango
		conn    string
		key     string
		fail    int
		want    error
		wantSts int
	}{
		{"wrong secret key", wrong, "ok", "linear", 0, integrations.ErrUpstreamUnauthorized, 401},
		{"unknown connection", n, "nope", "linear", 0, integrations.ErrUpstreamNotFound, 404},
		{"unknown integration key", n, "ok", "jira", 0, integrations.ErrUpstreamNotFound, 400},
		{"refresh refused", n, "broken", "linear", 0, integrations.ErrReauthRequired, 400},
		{"nango down", n, "ok", "linear", http.StatusServiceUnavailable, integrations.ErrUpstreamUnavailable, 503},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake.Fail(tc.fail)
			defer fake.Fail(0)
			_, err := tc.client.Token(ctx, tc.conn, tc.key)
			var ue *integrations.UpstreamError
			if !errors.Is(err, tc.want) || !errors.As(err, &ue) || ue.Status != tc.wantSts || ue.Provider != "nango" {
				t.Fatalf("got %v, want %v (HTTP %d)", err, tc.want, tc.wantSts)
			}
			if strings.Contains(err.Error(), "nango-secret") || strings.Contains(err.Error(), "not-the-secret") {
				t.Fatalf("error leaks the secret key: %v", err)
			}
		})
	}
}
