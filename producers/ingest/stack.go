package ingest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// inbound is a verified webhook with its routing identity, ready to produce.
type inbound struct {
	provider string
	route    string
	// routingID is the second half of the record key {provider}:{routing id}:
	// the GitHub installation id, the Nango connection id, the trigger id.
	routingID     string
	orgID         string
	integrationID *string
	connectionID  *string
	triggerID     *string
	webhookPath   *string
	deliveryID    *string
	eventType     *string
}

// verifyFunc resolves the routing identity of a request, verifies its
// signature and checks its body. It reads, never writes.
type verifyFunc func(r *http.Request, body []byte) (*inbound, *httpError)

type acceptedBody struct {
	Status  string `json:"status"`
	EventID string `json:"event_id"`
}

// stack is the common path of every webhook route: bounded body, fn, one
// synchronous produce, answer.
func (s *Server) stack(name string, fn verifyFunc) http.Handler {
	max := int64(s.d.Cfg.IngestMaxBodyBytes)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received := time.Now().UTC().Truncate(time.Millisecond)
		if r.ContentLength > max {
			s.reject(w, r, name, &httpError{http.StatusRequestEntityTooLarge, "body_too_large", "body exceeds the size limit"})
			return
		}
		body, err := readBody(w, r, max)
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				s.reject(w, r, name, &httpError{http.StatusRequestEntityTooLarge, "body_too_large", "body exceeds the size limit"})
				return
			}
			s.reject(w, r, name, errBadBody("could not read the request body"))
			return
		}
		in, herr := fn(r, body)
		if herr != nil {
			s.reject(w, r, name, herr)
			return
		}
		if len(in.routingID) > 255 {
			in.routingID = in.routingID[:255]
		}
		ev := schemas.New(in.orgID, &schemas.WebhookReceived{
			Provider:          in.provider,
			Route:             in.route,
			Method:            r.Method,
			RequestPath:       r.URL.Path,
			IntegrationID:     in.integrationID,
			ConnectionID:      in.connectionID,
			TriggerID:         in.triggerID,
			WebhookPath:       in.webhookPath,
			DeliveryID:        in.deliveryID,
			ProviderEventType: in.eventType,
			ContentType:       r.Header.Get("Content-Type"),
			Headers:           selectHeaders(r.Header),
			Body:              body,
			SignatureVerified: true,
			ReceivedAt:        received,
			RemoteAddr:        remoteIP(r),
		})
		ev.CorrelationID = ev.EventID
		rec, err := kafka.EventRecord(s.d.Codec, topics.WebhooksRaw, in.provider+":"+in.routingID, ev)
		if err != nil {
			s.d.Log.Error("ingest: encode webhook", "route", name, "provider", in.provider, "err", err)
			s.reject(w, r, name, errInternal)
			return
		}
		// The produce outlives a client hang-up: once sent, a record is
		// written either way, and the answer only tells the sender.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.d.ProduceTimeout)
		err = s.d.Kafka.ProduceSync(ctx, rec).FirstErr()
		cancel()
		if err != nil {
			s.d.Log.Warn("ingest: produce webhook failed", "route", name, "provider", in.provider,
				"routing_id", in.routingID, "event_id", ev.EventID, "err", err)
			s.reject(w, r, name, errUnavailable("the event could not be stored, retry later"))
			return
		}
		s.d.Log.Debug("ingest: webhook accepted", "route", name, "provider", in.provider,
			"routing_id", in.routingID, "event_id", ev.EventID, "bytes", len(body))
		writeJSON(w, http.StatusOK, acceptedBody{Status: "accepted", EventID: ev.EventID})
	})
}

// readBody reads the whole body, at most max bytes (an *http.MaxBytesError
// past that), in one allocation when the length is declared (the server
// never reads past a declared Content-Length).
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, max)
	if r.ContentLength > 0 && r.ContentLength <= max {
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(body)
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request, route string, e *httpError) {
	lvl := s.d.Log.Info
	if e.status >= 500 {
		lvl = s.d.Log.Warn
	}
	lvl("ingest: webhook rejected", "route", route, "path", r.URL.Path, "status", e.status, "code", e.code)
	writeError(w, e)
}

func remoteIP(r *http.Request) *string {
	if r.RemoteAddr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return &host
}
