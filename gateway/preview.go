package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
)

// Previews: HTTP and WebSocket traffic to a TCP port
// inside a session's sandbox.
//
//	ANY    /proliferate/{id}/preview/{port}/{path...}   the preview (proxied to the port)
//	GET    /proliferate/{id}/previews                   ports listening now, with their URLs
//	POST   /proliferate/{id}/preview/{port}/share       a share link {ttl_seconds?} → 201 {id, port, url, expires_at}
//	GET    /proliferate/{id}/preview/shares             the session's share links (never their tokens)
//	DELETE /proliferate/{id}/preview/shares/{share}     revoke a share link → 204
//
// Path-based, not host-based: a preview lives under the gateway's one
// public URL (GATEWAY_PUBLIC_URL), so it needs no wildcard DNS name or
// certificate and works with `make run` on 127.0.0.1. The price: the
// preview shares the gateway's origin, so an app must use relative URLs
// (or X-Forwarded-Prefix, sent upstream) and a preview page's scripts
// run on the gateway's origin. The gateway keeps no credential a script
// can use there: its own routes take bearer credentials only, preview
// cookies are HttpOnly and scoped to one session's port
// (Path=/proliferate/{id}/preview/{port}/), and upstream CORS headers are
// dropped. (A page of one preview can still fetch another preview the
// same browser holds a cookie for; host-based previews would close that
// and are the way to go once a wildcard domain is available.)
//
// Who: the session's members, i.e. what may see the session
// (s.session: people of its organization, services; another
// organization's session is 404), with
//   - a bearer credential (API clients, curl), or
//   - the member's preview link, open_url of the preview_url frame and of
//     GET …/previews: ?proliferate_preview_token=<ppv_…>, minted for one
//     person, session and port, living PREVIEW_LINK_TTL. At the first
//     visit it becomes the preview cookie (another token, PREVIEW_COOKIE_TTL,
//     HttpOnly, SameSite=Lax) and a GET is redirected (303) to the URL
//     without the token; membership is checked again at every request.
//   - a share link (?proliferate_share=<pps_…>, then its cookie) for
//     anyone, read-only: GET and HEAD only (other methods 403
//     read_only), and no WebSocket (a WebSocket carries writes both
//     ways; a shared page loads, its live reload does not). A share link
//     never starts a paused sandbox (503 until a member does).
// Sandboxes (their own token) and terminal tokens never reach previews.
//
// Member and sandbox credentials never reach the sandbox: Authorization,
// the preview cookies and the link parameters are removed upstream.
// Tokens are 256 random bits; Redis keeps only the SHA-256 of member
// tokens, preview_shares only that of share tokens; the request log
// records the route pattern, never the query.
//
// Ports outside PREVIEW_PORT_MIN–PREVIEW_PORT_MAX, and the sandbox's own
// ports (sandbox.ErrPortReserved), answer 400 port_not_allowed. The
// provider (sandbox.Ports) carries the connection into that session's
// sandbox only: the local provider dials inside its network namespace,
// E2B through its port host.
//
// POST …/preview/{port}/share is the gateway's own: a preview app's POST
// to /share is not proxied.

const (
	previewTokenPrefix = "ppv_"
	shareTokenPrefix   = "pps_"

	// PreviewTokenParam and ShareTokenParam carry link tokens in preview URLs.
	PreviewTokenParam = "proliferate_preview_token"
	ShareTokenParam   = "proliferate_share"
	previewCookieName = "proliferate_preview"
	shareCookieName   = "proliferate_share"
)

// previewGrant is what Redis holds for a member preview token.
type previewGrant struct {
	UserID    string `json:"user_id"`
	OrgID     string `json:"org_id"`
	SessionID string `json:"session_id"`
	Port      int    `json:"port"`
}

func previewTokenKey(token string) string { return tokenKey("preview_token", token) }

// PreviewURL is the preview of port in a session under the gateway's
// public base URL.
func PreviewURL(publicURL, sessionID string, port int) string {
	return strings.TrimRight(publicURL, "/") + previewPrefix(sessionID, port) + "/"
}

func previewPrefix(sessionID string, port int) string {
	return "/proliferate/" + sessionID + "/preview/" + strconv.Itoa(port)
}

// PreviewLinks mints members' preview links (hub.PreviewDeps.URL).
type PreviewLinks struct {
	Redis     *redis.Client
	PublicURL string
	// TTL is a link's lifetime (PREVIEW_LINK_TTL).
	TTL time.Duration
}

// URL returns the preview URL of port and, for a person, a link with a
// token for them alone ("" when it could not be stored).
func (l PreviewLinks) URL(ctx context.Context, p *auth.Principal, sessionID string, port int) (string, string) {
	u := PreviewURL(l.PublicURL, sessionID, port)
	if !p.IsPerson() || p.UserID == "" || p.OrgID == "" {
		return u, ""
	}
	tok, err := storePreviewGrant(ctx, l.Redis, previewGrant{UserID: p.UserID, OrgID: p.OrgID, SessionID: sessionID, Port: port}, l.TTL)
	if err != nil {
		return u, ""
	}
	return u, u + "?" + PreviewTokenParam + "=" + tok
}

func storePreviewGrant(ctx context.Context, rdb *redis.Client, g previewGrant, ttl time.Duration) (string, error) {
	b, err := json.Marshal(g)
	if err != nil {
		return "", err
	}
	tok := newToken(previewTokenPrefix)
	if err := rdb.Set(ctx, previewTokenKey(tok), b, ttl).Err(); err != nil {
		return "", fmt.Errorf("store preview token: %w", err)
	}
	return tok, nil
}

// previewRoutes registers the preview routes.
func (s *Server) previewRoutes() {
	s.handle("GET /proliferate/{id}/previews", s.owned("id", s.listPreviews))
	s.handle("POST /proliferate/{id}/preview/{port}/share", s.createShare)
	s.handle("GET /proliferate/{id}/preview/shares", s.listShares)
	s.handle("DELETE /proliferate/{id}/preview/shares/{share}", s.revokeShare)
	s.handle("/proliferate/{id}/preview/{port}", func(w http.ResponseWriter, r *http.Request) error {
		u := *r.URL
		u.Path, u.RawPath = r.URL.Path+"/", ""
		http.Redirect(w, r, u.RequestURI(), http.StatusPermanentRedirect)
		return nil
	})
	s.handle("/proliferate/{id}/preview/{port}/{path...}", s.owned("id", s.servePreview))
}

// parsePort parses the {port} path value: digits only, 1–65535.
func parsePort(v string) (int, error) {
	if v == "" || len(v) > 5 || strings.TrimLeft(v, "0123456789") != "" {
		return 0, invalid("port", "a TCP port number")
	}
	n, _ := strconv.Atoi(v)
	if n < 1 || n > 65535 {
		return 0, invalid("port", "a TCP port number (1-65535)")
	}
	return n, nil
}

// allowedPort refuses ports outside PREVIEW_PORT_MIN–PREVIEW_PORT_MAX.
func (s *Server) allowedPort(port int) error {
	if port < s.d.Cfg.PreviewPortMin || port > s.d.Cfg.PreviewPortMax {
		return &httpapi.Error{Status: http.StatusBadRequest, Code: "port_not_allowed",
			Message: fmt.Sprintf("previews reach ports %d-%d only", s.d.Cfg.PreviewPortMin, s.d.Cfg.PreviewPortMax)}
	}
	return nil
}

// previewCaller is who asks for a preview.
type previewCaller struct {
	sess  sessions.Session
	share bool // a share link's visitor: read-only
}

// memberPrincipal authenticates a bearer credential for the preview
// management routes: people and services who may see the session, never
// a sandbox.
func (s *Server) memberPrincipal(r *http.Request) (*auth.Principal, sessions.Session, error) {
	p, err := s.principal(r, false)
	if err != nil {
		return nil, sessions.Session{}, err
	}
	if p.Kind == auth.KindSandbox {
		return nil, sessions.Session{}, httpapi.Forbidden("sandbox credentials cannot use previews")
	}
	sess, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return nil, sessions.Session{}, err
	}
	return p, sess, nil
}

// previewCookie sets a cookie scoped to one session's preview port.
func (s *Server) previewCookie(w http.ResponseWriter, name, value, sessionID string, port int, maxAge time.Duration) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: previewPrefix(sessionID, port) + "/",
		MaxAge: max(1, int(maxAge/time.Second)), HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: strings.HasPrefix(s.d.Cfg.GatewayPublicURL, "https://")})
}

// withoutParam is u without the query parameter name (the others stay
// as they came, in their order).
func withoutParam(u *url.URL, name string) *url.URL {
	c := *u
	var kept []string
	for part := range strings.SplitSeq(u.RawQuery, "&") {
		k, _, _ := strings.Cut(part, "=")
		if key, err := url.QueryUnescape(k); part != "" && (err != nil || key != name) {
			kept = append(kept, part)
		}
	}
	c.RawQuery = strings.Join(kept, "&")
	return &c
}

// previewAccess authenticates a preview request (see the file comment).
// answered is true when it redirected the request (a link exchanged for
// its cookie).
func (s *Server) previewAccess(w http.ResponseWriter, r *http.Request, sid string, port int) (c previewCaller, answered bool, err error) {
	ctx := r.Context()
	q := r.URL.Query()
	exchanged := func(param string) (previewCaller, bool, error) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			http.Redirect(w, r, withoutParam(r.URL, param).RequestURI(), http.StatusSeeOther)
			return c, true, nil
		}
		r.URL = withoutParam(r.URL, param)
		return c, false, nil
	}
	if tok := q.Get(PreviewTokenParam); tok != "" {
		var g previewGrant
		if c, g, err = s.previewMember(r, tok, sid, port); err != nil {
			return c, false, err
		}
		cookie, err := storePreviewGrant(ctx, s.d.Redis, g, s.d.Cfg.PreviewCookieTTL)
		if err != nil {
			return c, false, err
		}
		s.previewCookie(w, previewCookieName, cookie, sid, port, s.d.Cfg.PreviewCookieTTL)
		return exchanged(PreviewTokenParam)
	}
	if tok := q.Get(ShareTokenParam); tok != "" {
		var exp time.Time
		if c, exp, err = s.previewShare(ctx, tok, sid, port); err != nil {
			return c, false, err
		}
		s.previewCookie(w, shareCookieName, tok, sid, port, exp.Sub(s.d.Now()))
		return exchanged(ShareTokenParam)
	}
	if r.Header.Get("Authorization") != "" {
		_, sess, err := s.memberPrincipal(r)
		return previewCaller{sess: sess}, false, err
	}
	if ck, err := r.Cookie(previewCookieName); err == nil {
		c, _, err := s.previewMember(r, ck.Value, sid, port)
		return c, false, err
	}
	if ck, err := r.Cookie(shareCookieName); err == nil {
		c, _, err := s.previewShare(ctx, ck.Value, sid, port)
		return c, false, err
	}
	return c, false, httpapi.Unauthenticated()
}

// previewMember checks a member preview token (link or cookie) for the
// session's port: the person must still be a member of its organization.
func (s *Server) previewMember(r *http.Request, tok, sid string, port int) (previewCaller, previewGrant, error) {
	ctx := r.Context()
	if !wellFormedToken(tok, previewTokenPrefix) {
		return previewCaller{}, previewGrant{}, httpapi.Unauthenticated()
	}
	raw, err := s.d.Redis.Get(ctx, previewTokenKey(tok)).Bytes()
	if errors.Is(err, redis.Nil) {
		return previewCaller{}, previewGrant{}, httpapi.Unauthenticated()
	}
	if err != nil {
		return previewCaller{}, previewGrant{}, fmt.Errorf("verify preview token: %w", err)
	}
	var g previewGrant
	if err := json.Unmarshal(raw, &g); err != nil || g.UserID == "" || !strings.EqualFold(g.SessionID, sid) || g.Port != port {
		return previewCaller{}, previewGrant{}, httpapi.Unauthenticated()
	}
	p := &auth.Principal{Kind: auth.KindUser, UserID: g.UserID, OrgID: g.OrgID}
	role, err := orgsdb.New(s.d.Pool).MembershipRole(ctx, orgsdb.MembershipRoleParams{OrgID: g.OrgID, UserID: g.UserID})
	if errors.Is(err, pgx.ErrNoRows) {
		return previewCaller{}, previewGrant{}, httpapi.Unauthenticated()
	}
	if err != nil {
		return previewCaller{}, previewGrant{}, fmt.Errorf("verify preview token: %w", err)
	}
	p.Role = auth.Role(role)
	sess, err := s.session(r, p, sid)
	if err != nil {
		return previewCaller{}, previewGrant{}, err
	}
	return previewCaller{sess: sess}, g, nil
}

// previewShare checks a share token for the session's port: not revoked,
// not expired. It returns the link's expiry.
func (s *Server) previewShare(ctx context.Context, tok, sid string, port int) (previewCaller, time.Time, error) {
	if !wellFormedToken(tok, shareTokenPrefix) || !uuidRE.MatchString(sid) {
		return previewCaller{}, time.Time{}, httpapi.Unauthenticated()
	}
	sh, err := sessionsdb.New(s.d.Pool).PreviewShareByToken(ctx, tokenHash(tok))
	if errors.Is(err, pgx.ErrNoRows) {
		return previewCaller{}, time.Time{}, httpapi.Unauthenticated()
	}
	if err != nil {
		return previewCaller{}, time.Time{}, fmt.Errorf("verify share link: %w", err)
	}
	org, session, expires := sh.OrgID, sh.SessionID, sh.ExpiresAt
	if sh.RevokedAt != nil || !s.d.Now().Before(expires) || !strings.EqualFold(session, sid) || int(sh.Port) != port {
		return previewCaller{}, time.Time{}, &httpapi.Error{Status: http.StatusUnauthorized, Code: "share_link_invalid",
			Message: "this share link was revoked or has expired"}
	}
	sess, err := s.d.Sessions.Get(ctx, org, session)
	if errors.Is(err, sessions.ErrNotFound) {
		return previewCaller{}, time.Time{}, httpapi.NotFound("session")
	}
	if err != nil {
		return previewCaller{}, time.Time{}, err
	}
	return previewCaller{sess: sess, share: true}, expires, nil
}

// previewOnlyHeaders are upstream answers a preview must not pass to the
// browser: CORS (the gateway's own policy applies on its origin).
var previewOnlyHeaders = []string{"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials",
	"Access-Control-Allow-Headers", "Access-Control-Allow-Methods", "Access-Control-Expose-Headers", "Access-Control-Max-Age"}

// ours reports whether a cookie name is one of the gateway's preview
// cookies.
func ours(name string) bool { return name == previewCookieName || name == shareCookieName }

func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// servePreview proxies a request to the port in the session's sandbox.
func (s *Server) servePreview(w http.ResponseWriter, r *http.Request) error {
	sid := r.PathValue("id")
	port, err := parsePort(r.PathValue("port"))
	if err != nil {
		return err
	}
	c, answered, err := s.previewAccess(w, r, sid, port)
	if err != nil || answered {
		return err
	}
	if err := s.allowedPort(port); err != nil {
		return err
	}
	if c.share && r.Method != http.MethodGet && r.Method != http.MethodHead {
		return &httpapi.Error{Status: http.StatusForbidden, Code: "read_only", Message: "a share link is read-only (GET and HEAD)"}
	}
	if isWebSocket(r) {
		if c.share {
			return &httpapi.Error{Status: http.StatusForbidden, Code: "read_only", Message: "a share link cannot open WebSockets"}
		}
		if !s.wsOriginAllowed(r) {
			return httpapi.Forbidden("origin not allowed")
		}
	}
	if r.ContentLength > s.d.MaxBodyBytes {
		return &httpapi.Error{Status: http.StatusRequestEntityTooLarge, Code: httpapi.CodeBodyTooLarge, Message: "request body too large"}
	}
	var h *hub.Hub
	if c.share {
		// A visitor never starts the sandbox: only a running one answers.
		if h, err = s.d.Hubs.Hub(r.Context(), c.sess.ID); err != nil {
			return hubError(w, err)
		}
		h.TouchActivity()
	} else if h, err = s.readyHub(w, r, c.sess.ID); err != nil {
		return err
	}
	remove := h.AddProxyConnection()
	defer remove()
	defer h.TouchActivity()
	base, rt, err := h.PortTarget(r.Context(), port)
	switch {
	case errors.Is(err, sandbox.ErrPortReserved):
		return &httpapi.Error{Status: http.StatusBadRequest, Code: "port_not_allowed", Message: "this port is the sandbox's own"}
	case errors.Is(err, hub.ErrNoPreviews), errors.Is(err, sandbox.ErrPortsUnsupported):
		return &httpapi.Error{Status: http.StatusNotImplemented, Code: "previews_unavailable", Message: "this sandbox's ports cannot be previewed"}
	case errors.Is(err, hub.ErrClosed), errors.Is(err, sandbox.ErrNotFound):
		return unavailable(w, "the session's sandbox is not running")
	case err != nil:
		return err
	}
	prefix := previewPrefix(sid, port)
	parts := strings.SplitN(r.URL.EscapedPath(), "/", 6) // "", proliferate, id, preview, port, rest
	rest := ""
	if len(parts) == 6 {
		rest = parts[5]
	}
	unescaped, err := url.PathUnescape(rest)
	if err != nil {
		return httpapi.BadRequest("malformed path")
	}
	var failed error
	rp := &httputil.ReverseProxy{
		Transport:     rt,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(s.d.Log.Handler(), slog.LevelWarn),
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host, out.URL.User = base.Scheme, base.Host, nil
			out.URL.Path, out.URL.RawPath = "/"+unescaped, "/"+rest
			out.Host = base.Host
			for _, k := range []string{"Authorization", "Proxy-Authorization", OrgHeader, ForwardedHeader} {
				out.Header.Del(k)
			}
			var kept []string
			for _, ck := range pr.In.Cookies() {
				if !ours(ck.Name) {
					kept = append(kept, ck.String())
				}
			}
			out.Header.Del("Cookie")
			if len(kept) > 0 {
				out.Header.Set("Cookie", strings.Join(kept, "; "))
			}
			pr.SetXForwarded()
			out.Header.Set("X-Forwarded-Prefix", prefix)
		},
		ModifyResponse: func(resp *http.Response) error {
			for _, k := range previewOnlyHeaders {
				resp.Header.Del(k)
			}
			var kept []string
			for _, v := range resp.Header.Values("Set-Cookie") {
				if ck, err := http.ParseSetCookie(v); err == nil && !ours(ck.Name) {
					kept = append(kept, v)
				}
			}
			resp.Header.Del("Set-Cookie")
			for _, v := range kept {
				resp.Header.Add("Set-Cookie", v)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { failed = err },
	}
	serveWhileHub(h, rp, w, r)
	if failed == nil {
		return nil
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(failed, &mbe):
		return &httpapi.Error{Status: http.StatusRequestEntityTooLarge, Code: httpapi.CodeBodyTooLarge, Message: "request body too large"}
	case errors.Is(failed, context.Canceled) && r.Context().Err() != nil:
		return &httpapi.Error{Status: 499, Code: "client_closed", Message: "client closed the request"}
	}
	s.d.Log.Info("preview: port did not answer", "request_id", requestID(r), "session_id", c.sess.ID, "port", port, "error", failed)
	return &httpapi.Error{Status: http.StatusBadGateway, Code: "port_unreachable",
		Message: fmt.Sprintf("nothing answers on port %d in the session's sandbox", port)}
}

// PreviewInfo is one listening port in GET /proliferate/{id}/previews.
type PreviewInfo struct {
	Port    int    `json:"port"`
	URL     string `json:"url"`
	OpenURL string `json:"open_url,omitempty"`
}

// listPreviews lists the ports listening in the running sandbox (none
// when it is not running here: the route never starts it).
func (s *Server) listPreviews(w http.ResponseWriter, r *http.Request) error {
	p, sess, err := s.memberPrincipal(r)
	if err != nil {
		return err
	}
	out := struct {
		Running  bool          `json:"running"`
		Previews []PreviewInfo `json:"previews"`
	}{Previews: []PreviewInfo{}}
	if h, ok := s.d.Hubs.Get(sess.ID); ok {
		ports, err := h.ListeningPorts(r.Context())
		switch {
		case errors.Is(err, hub.ErrNoPreviews), errors.Is(err, sandbox.ErrPortsUnsupported):
			return &httpapi.Error{Status: http.StatusNotImplemented, Code: "previews_unavailable", Message: "this sandbox's ports cannot be previewed"}
		case errors.Is(err, hub.ErrClosed), errors.Is(err, sandbox.ErrNotFound):
		case err != nil:
			return err
		default:
			out.Running = true
			links := PreviewLinks{Redis: s.d.Redis, PublicURL: s.d.Cfg.GatewayPublicURL, TTL: s.d.Cfg.PreviewLinkTTL}
			if p.Kind != auth.KindService {
				p = &auth.Principal{Kind: p.Kind, UserID: p.UserID, OrgID: sess.OrgID}
			}
			for _, port := range ports {
				u, open := links.URL(r.Context(), p, sess.ID, port)
				out.Previews = append(out.Previews, PreviewInfo{Port: port, URL: u, OpenURL: open})
			}
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// Share is a share link as listed (its token is never shown again).
type Share struct {
	ID        string     `json:"id"`
	Port      int        `json:"port"`
	CreatedBy *string    `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at"`
	Active    bool       `json:"active"`
}

// CreatedShare answers POST …/share: URL holds the token (shown once).
type CreatedShare struct {
	Share
	URL string `json:"url"`
}

// createShare creates a read-only, expiring share link for a port.
func (s *Server) createShare(w http.ResponseWriter, r *http.Request) error {
	port, err := parsePort(r.PathValue("port"))
	if err != nil {
		return err
	}
	p, sess, err := s.memberPrincipal(r)
	if err != nil {
		return err
	}
	if !p.IsPerson() {
		return httpapi.Forbidden("only a member can share a preview")
	}
	if err := s.allowedPort(port); err != nil {
		return err
	}
	var req struct {
		TTLSeconds *int64 `json:"ttl_seconds"`
	}
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	ttl := s.d.Cfg.PreviewShareTTL
	if req.TTLSeconds != nil {
		maxTTL := int64(s.d.Cfg.PreviewShareMaxTTL / time.Second)
		if *req.TTLSeconds < 60 || *req.TTLSeconds > maxTTL {
			return invalid("ttl_seconds", fmt.Sprintf("between 60 and %d", maxTTL))
		}
		ttl = time.Duration(*req.TTLSeconds) * time.Second
	}
	tok := newToken(shareTokenPrefix)
	now := s.d.Now()
	sh := CreatedShare{Share: Share{Port: port, CreatedAt: now, ExpiresAt: now.Add(ttl), Active: true}}
	var by *string
	if p.UserID != "" {
		by = &p.UserID
	}
	sh.ID, err = sessionsdb.New(s.d.Pool).CreatePreviewShare(r.Context(), sessionsdb.CreatePreviewShareParams{
		TokenHash: tokenHash(tok), OrgID: sess.OrgID, SessionID: sess.ID, Port: int32(port), CreatedBy: by, CreatedAt: now, ExpiresAt: sh.ExpiresAt,
	})
	if err != nil {
		return fmt.Errorf("create share link: %w", err)
	}
	sh.CreatedBy = by
	sh.URL = PreviewURL(s.d.Cfg.GatewayPublicURL, sess.ID, port) + "?" + ShareTokenParam + "=" + tok
	s.d.Log.Info("preview share link created", "request_id", requestID(r), "session_id", sess.ID, "share_id", sh.ID, "port", port,
		"expires_at", sh.ExpiresAt)
	httpapi.WriteJSON(w, http.StatusCreated, sh)
	return nil
}

// listShares lists the session's share links, newest first.
func (s *Server) listShares(w http.ResponseWriter, r *http.Request) error {
	_, sess, err := s.memberPrincipal(r)
	if err != nil {
		return err
	}
	rows, err := sessionsdb.New(s.d.Pool).PreviewShares(r.Context(), sess.ID)
	if err != nil {
		return fmt.Errorf("list share links: %w", err)
	}
	out := make([]Share, len(rows))
	now := s.d.Now()
	for i, row := range rows {
		out[i] = Share{ID: row.ID, Port: int(row.Port), CreatedBy: row.CreatedBy, CreatedAt: row.CreatedAt, ExpiresAt: row.ExpiresAt,
			RevokedAt: row.RevokedAt, Active: row.RevokedAt == nil && now.Before(row.ExpiresAt)}
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"shares": out})
	return nil
}

// revokeShare revokes a share link (idempotent); an unknown one is 404.
func (s *Server) revokeShare(w http.ResponseWriter, r *http.Request) error {
	p, sess, err := s.memberPrincipal(r)
	if err != nil {
		return err
	}
	id := r.PathValue("share")
	if !uuidRE.MatchString(id) {
		return httpapi.NotFound("share")
	}
	var by *string
	if p.UserID != "" {
		by = &p.UserID
	}
	found, err := sessionsdb.New(s.d.Pool).RevokePreviewShare(r.Context(), sessionsdb.RevokePreviewShareParams{
		ID: id, SessionID: sess.ID, RevokedAt: s.d.Now(), RevokedBy: by,
	})
	if err != nil {
		return fmt.Errorf("revoke share link: %w", err)
	}
	if !found {
		return httpapi.NotFound("share")
	}
	s.d.Log.Info("preview share link revoked", "request_id", requestID(r), "session_id", sess.ID, "share_id", id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
