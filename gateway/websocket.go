package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
)

// WebSocket limits of the session stream.
const (
	// wsReadLimit bounds one client frame; a bigger one closes with 1009.
	wsReadLimit = 1 << 20
	// wsWriteTimeout bounds one outbound frame (a stuck peer fails the
	// write and the hub drops the client).
	wsWriteTimeout = 10 * time.Second
	// wsCloseTimeout bounds writing the close frame.
	wsCloseTimeout = 2 * time.Second
)

// truncateReason keeps a close reason within a control frame (125 bytes
// minus the 2-byte code).
func truncateReason(reason string) string {
	if len(reason) > 123 {
		return reason[:123]
	}
	return reason
}

// upgrader builds the server's upgrader: no compression, no subprotocols,
// origins as allowed by wsOriginAllowed, refusals in the API's error shape.
func (s *Server) upgrader() *websocket.Upgrader {
	return &websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		CheckOrigin:      s.wsOriginAllowed,
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			e := &httpapi.Error{Status: status, Code: httpapi.CodeBadRequest, Message: reason.Error()}
			if status == http.StatusForbidden {
				e.Code = httpapi.CodeForbidden
			}
			if status >= 500 {
				e = &httpapi.Error{Status: status, Code: httpapi.CodeInternal, Message: "internal error"}
			}
			s.writeError(w, r, e)
		},
	}
}

// wsOriginAllowed is the CORS rule of the HTTP routes applied to the
// WebSocket handshake (which CORS does not cover): non-browser clients (no
// Origin header), the configured browser origins (API_CORS_ORIGINS) and
// same-origin pages may connect; any other page may not, so a foreign site
// cannot open a stream with a visitor's ambient credentials.
func (s *Server) wsOriginAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || slices.Contains(s.d.Cfg.APICORSOrigins, origin) {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// hijackable gives gorilla (which needs an http.Hijacker) the connection
// under the request logger's wrapper, which only supports Unwrap; refusals
// still go through the wrapper so their status is logged.
type hijackable struct{ http.ResponseWriter }

func (h hijackable) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(h.ResponseWriter).Hijack()
}

// serveWS authenticates (Authorization header or ?token=), checks the
// origin and access before upgrading (401/403/404 are plain HTTP answers),
// then attaches the socket to the session's hub and feeds it client frames
// until it closes.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) error {
	if !s.wsOriginAllowed(r) {
		return httpapi.Forbidden("origin not allowed")
	}
	p, err := s.principal(r, true)
	if err != nil {
		return err
	}
	if p.Kind == auth.KindSandbox {
		return httpapi.Forbidden("sandbox credentials cannot open session streams")
	}
	sess, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return err
	}
	ctx := r.Context()
	h, err := s.d.Hubs.Hub(ctx, sess.ID)
	if err != nil {
		return hubError(w, err)
	}
	// hub.Hijacker is hijackable whose connection can write queued frames
	// at once.
	conn, err := s.upgrader().Upgrade(hub.Hijacker{ResponseWriter: w}, r, nil)
	if err != nil {
		return nil // already answered
	}
	conn.SetReadLimit(wsReadLimit)
	sc := hub.NewSocketClient(hub.WebSocketWriter{Conn: conn, WriteTimeout: wsWriteTimeout, CloseTimeout: wsCloseTimeout},
		s.d.WSMaxBufferedBytes)
	detach, err := h.Attach(ctx, sc, p)
	if err != nil {
		switch {
		case errors.Is(err, hub.ErrNotOwner):
			sc.Close(protocol.CloseNotOwner, protocol.ReasonNotOwner)
		case errors.Is(err, hub.ErrSessionEnded):
			sc.Close(protocol.CloseSessionEnded, protocol.ReasonSessionEnded)
		case errors.Is(err, hub.ErrClosed):
			sc.Close(protocol.CloseOwnershipLost, protocol.ReasonOwnershipLost)
		default:
			s.d.Log.Error("attach websocket", "session_id", sess.ID, "error", err)
			sc.Close(websocket.CloseInternalServerErr, "internal error")
		}
		<-sc.Done()
		return nil
	}
	h.WatchPreviews(sc, p)
	// Frames that may wait run in order on the socket's own goroutine: it
	// ends once the read loop is done and it has handled what was queued
	// (a prompt sent just before the client left is still sent).
	waiting := make(chan []byte, wsWaitingFrames)
	go func() {
		wctx := context.WithoutCancel(ctx)
		for data := range waiting {
			h.HandleClientMessage(wctx, sc, p, data)
		}
	}()
	defer func() {
		close(waiting)
		detach()
		sc.Close(websocket.CloseNormalClosure, "")
		<-sc.Done()
	}()
	for {
		typ, data, err := conn.ReadMessage()
		if err != nil {
			return nil
		}
		if typ != websocket.TextMessage {
			continue
		}
		if mayWait(data) {
			waiting <- data
			continue
		}
		h.HandleClientMessage(ctx, sc, p, data)
	}
}

// wsWaitingFrames bounds the frames queued behind a waiting one; a client
// sending more waits (its reads stop) until they are handled.
const wsWaitingFrames = 16

// mayWait reports whether a client frame may wait: a prompt waits for the
// sandbox to boot; a cancel must not overtake the prompts sent before it.
// Such frames run off the socket's read loop, so a ping or get_status is
// answered meanwhile.
func mayWait(frame []byte) bool {
	var head struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(frame, &head) != nil {
		return false
	}
	return head.Type == protocol.ClientPrompt || head.Type == protocol.ClientCancel
}
