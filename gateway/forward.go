package gateway

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/httpapi"
)

// Several gateways, one owner per session.
//
// Only the gateway holding a session's owner lease (hub: lease:owner:{id})
// can act on its hub and sandbox. Every gateway started with an advertise
// URL (Deps.AdvertiseURL, GATEWAY_ADVERTISE_URL) registers it in Redis
// under its instance id (gateway:instance:{instance id}, InstanceTTL,
// renewed every InstanceTTL/3, deleted at Close). A gateway that receives
// a session command for a session another instance owns forwards the
// request as it came (method, path, query, body, the caller's own
// credential, Host) to the owner's address with ForwardedHeader set, and
// streams the answer back; the owner handles a forwarded request itself,
// never forwarding again, so a request makes at most one hop. When the
// owner registered no address or cannot be reached, the answer is the
// retryable 503 not_owner with Retry-After, as before (a dead owner's
// leases expire and the next try is served here).
//
// Forwarded: prompts, cancel, start, pause (the billing enforcer's too),
// snapshot, heartbeat, sandbox tool callbacks, environment submissions, the git routes, the OpenCode
// proxy (SSE streams included) and both WebSockets (the session stream and
// the terminal: the reverse proxy switches protocols and copies both ways).
// Not forwarded: routes that need no owner (session reads and status,
// creation, actions).

// ForwardedHeader carries the instance id of the gateway that forwarded a
// request to the session's owner; a request with it is never forwarded.
const ForwardedHeader = "X-Proliferate-Forwarded-By"

// InstanceTTL is the lifetime of a gateway's address registration.
const InstanceTTL = 30 * time.Second

// forwardDialTimeout bounds connecting to the owner: an owner that is gone
// is a quick 503, not a hang.
const forwardDialTimeout = 3 * time.Second

func instanceKey(instanceID string) string { return "gateway:instance:" + instanceID }

// InstanceAddr returns the advertise URL registered by a gateway instance
// ("" if none).
func InstanceAddr(ctx context.Context, rdb *redis.Client, instanceID string) (string, error) {
	v, err := rdb.Get(ctx, instanceKey(instanceID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

// advertiser keeps this instance's address registered.
type advertiser struct {
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// advertise registers addr under this instance's id until stop.
func (s *Server) advertise(addr string) *advertiser {
	ctx, cancel := context.WithCancel(context.Background())
	a := &advertiser{cancel: cancel, done: make(chan struct{})}
	key := instanceKey(s.d.Hubs.InstanceID())
	set := func() {
		if err := s.d.Redis.Set(ctx, key, addr, InstanceTTL).Err(); err != nil && ctx.Err() == nil {
			s.d.Log.Warn("gateway: register advertise URL", "error", err)
		}
	}
	set() // before the first request can need it
	go func() {
		defer close(a.done)
		t := time.NewTicker(InstanceTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = s.d.Redis.Del(dctx, key).Err()
				cancel()
				return
			case <-t.C:
				set()
			}
		}
	}()
	return a
}

func (a *advertiser) stop() {
	if a == nil {
		return
	}
	a.stopOnce.Do(a.cancel)
	<-a.done
}

// forwarder sends requests to other gateway instances.
type forwarder struct {
	transport http.RoundTripper
	errorLog  *log.Logger
}

func newForwarder(l *slog.Logger) *forwarder {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // replica to replica, never through an egress proxy
	t.DialContext = (&net.Dialer{Timeout: forwardDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConnsPerHost = 16
	// No response-header timeout: a pause answers after its snapshot and a
	// synchronous prompt after the agent's turn; the caller's context
	// bounds every request.
	return &forwarder{transport: t, errorLog: slog.NewLogLogger(l.Handler(), slog.LevelWarn)}
}

// owned wraps a per-session route: a request for a session owned by
// another instance is forwarded there (param names the path value holding
// the session id).
func (s *Server) owned(param string, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.forward(w, r, r.PathValue(param)) {
			return nil
		}
		return h(w, r)
	}
}

// forward sends r to the owner of sessionID when another registered
// instance owns it, and reports whether it answered r.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, sessionID string) bool {
	if r.Header.Get(ForwardedHeader) != "" || !uuidRE.MatchString(sessionID) {
		return false
	}
	if h, ok := s.d.Hubs.Get(sessionID); ok && h.Owner() {
		return false
	}
	ctx := r.Context()
	owner, err := hub.OwnerOf(ctx, s.d.Redis, sessionID)
	self := s.d.Hubs.InstanceID()
	if err != nil || owner == "" || owner == self {
		return false // served here: a hub takes the lease, or answers not_owner
	}
	addr, err := InstanceAddr(ctx, s.d.Redis, owner)
	if err != nil || addr == "" {
		return false // the owner has no address (or Redis failed): not_owner here
	}
	target, err := url.Parse(addr)
	if err != nil || target.Host == "" {
		s.d.Log.Error("gateway: bad advertise URL of the session's owner", "session_id", sessionID, "owner", owner)
		return false
	}
	var failed error
	rp := &httputil.ReverseProxy{
		Transport:     s.fwd.transport,
		FlushInterval: -1, // SSE and long answers stream through
		ErrorLog:      s.fwd.errorLog,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // the owner's origin checks see the host the caller used
			pr.Out.Header.Set(ForwardedHeader, self)
			pr.Out.Header.Set("X-Request-Id", requestID(r))
		},
		ModifyResponse: func(resp *http.Response) error {
			// This instance already set the request id (the owner reused
			// it) and its CORS answer.
			resp.Header.Del("X-Request-Id")
			if w.Header().Get("Access-Control-Allow-Origin") != "" {
				for k := range resp.Header {
					if strings.HasPrefix(k, "Access-Control-") || k == "Vary" {
						resp.Header.Del(k)
					}
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { failed = err },
	}
	rp.ServeHTTP(w, r)
	if failed == nil {
		return true
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(failed, &mbe):
		s.writeError(w, r, &httpapi.Error{Status: http.StatusRequestEntityTooLarge, Code: httpapi.CodeBodyTooLarge, Message: "request body too large"})
		return true
	case ctx.Err() != nil:
		s.writeError(w, r, &httpapi.Error{Status: 499, Code: "client_closed", Message: "client closed the request"})
		return true
	}
	msg := failed.Error()
	if tok := r.PathValue("token"); tok != "" {
		msg = strings.ReplaceAll(msg, tok, "[redacted]")
	}
	s.d.Log.Warn("gateway: forwarding to the session's owner failed", "request_id", requestID(r),
		"session_id", sessionID, "owner", owner, "error", msg)
	s.writeError(w, r, hubError(w, hub.ErrNotOwner))
	return true
}
