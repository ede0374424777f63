package ingest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/httpapi"
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
	// body is what is produced: the request body, or the JSON of a form
	// delivery's payload field; contentType its media type when it is not
	// the request's own.
	body        []byte
	contentType string
	// reply, when set, is answered (200) and nothing is produced: a
	// delivery that is verified but records nothing (GitHub's ping).
	reply *noticeBody
}

// setBody sets the body to produce from a verified request body: itself,
// or for a form delivery the JSON of its payload field (400 when there is
// none).
func (in *inbound) setBody(body []byte, kind bodyKind) *httpapi.Error {
	if kind != bodyForm {
		in.body = body
		return nil
	}
	p, herr := formPayload(body)
	if herr != nil {
		return herr
	}
	in.body, in.contentType = p, "application/json"
	return nil
}

// verifyFunc resolves the routing identity of a request, verifies its
// signature and checks its body (kind says how it is encoded). It reads,
// never writes.
type verifyFunc func(r *http.Request, body []byte, kind bodyKind) (*inbound, *httpapi.Error)

type acceptedBody struct {
	Status  string `json:"status"`
	EventID string `json:"event_id"`
}

// noticeBody answers a verified delivery that is not recorded.
type noticeBody struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// stack is the common path of every webhook route: bounded body, known
// content type, fn, the body to the blob store when it is too large to
// travel inline, one synchronous produce of a record within its topic's
// limit, answer.
func (s *Server) stack(name string, fn verifyFunc) http.Handler {
	max := int64(s.d.Cfg.IngestMaxBodyBytes)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received := time.Now().UTC().Truncate(time.Millisecond)
		if r.ContentLength > max {
			s.reject(w, r, name, errTooLarge)
			return
		}
		kind, herr := classify(r.Header.Get("Content-Type"))
		if herr != nil {
			s.reject(w, r, name, herr)
			return
		}
		body, err := readBody(w, r, max)
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				s.reject(w, r, name, errTooLarge)
				return
			}
			s.reject(w, r, name, errBadBody("could not read the request body"))
			return
		}
		in, herr := fn(r, body, kind)
		if herr != nil {
			s.reject(w, r, name, herr)
			return
		}
		if in.reply != nil {
			s.d.Log.Info("ingest: webhook answered, not recorded", "route", name, "provider", in.provider,
				"event", deref(in.eventType), "status", in.reply.Status)
			httpapi.WriteJSON(w, http.StatusOK, in.reply)
			return
		}
		if len(in.routingID) > 255 {
			in.routingID = in.routingID[:255]
		}
		p := &schemas.WebhookReceived{
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
			ContentType:       cmp.Or(in.contentType, r.Header.Get("Content-Type")),
			Headers:           selectHeaders(r.Header),
			Body:              in.body,
			SignatureVerified: true,
			ReceivedAt:        received,
			RemoteAddr:        remoteIP(r),
		}
		ev := schemas.New(in.orgID, p)
		ev.CorrelationID = ev.EventID
		// The body goes to the blob store before the record that refers to
		// it is produced; a blob whose produce then fails is never referred
		// to (see the package documentation).
		if len(p.Body) > s.d.Cfg.IngestInlineBodyBytes {
			if herr := s.offload(r.Context(), name, ev, p); herr != nil {
				s.reject(w, r, name, herr)
				return
			}
		}
		rec, err := kafka.EventRecord(s.d.Codec, topics.WebhooksRaw, in.provider+":"+in.routingID, ev)
		if err != nil {
			s.d.Log.Error("ingest: encode webhook", "route", name, "provider", in.provider, "err", err)
			s.reject(w, r, name, errInternal)
			return
		}
		if err := topics.CheckRecordSize(topics.WebhooksRaw, recordSize(rec)); err != nil {
			// Cannot happen with a valid INGEST_INLINE_BODY_BYTES (headers
			// are bounded too); refused rather than left to fail at the
			// broker, which a retry would not change.
			s.d.Log.Error("ingest: webhook record over the topic's limit", "route", name, "provider", in.provider,
				"event_id", ev.EventID, "err", err)
			s.reject(w, r, name, &httpapi.Error{Status: http.StatusRequestEntityTooLarge, Code: "record_too_large", Message: "the webhook with its headers is too large to record"})
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
			"routing_id", in.routingID, "event_id", ev.EventID, "bytes", len(in.body), "by_ref", p.BodyRef != nil)
		httpapi.WriteJSON(w, http.StatusOK, acceptedBody{Status: "accepted", EventID: ev.EventID})
	})
}

var errTooLarge = &httpapi.Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: "body exceeds the size limit"}

// BodyKey is the blob store key of the body of the webhook event eventID
// received at t: webhooks/{yyyy}/{mm}/{dd}/{event id} (UTC), so that blobs
// can be listed and expired by day.
func BodyKey(t time.Time, eventID string) string {
	return "webhooks/" + t.UTC().Format("2006/01/02") + "/" + eventID
}

// offload puts the body in the blob store and replaces it in p by a
// reference with its SHA-256 and size. A store that cannot take it is 503.
func (s *Server) offload(ctx context.Context, route string, ev *schemas.Event, p *schemas.WebhookReceived) *httpapi.Error {
	sum := sha256.Sum256(p.Body)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.d.BlobTimeout)
	defer cancel()
	ref, err := s.d.Blobs.Put(ctx, BodyKey(p.ReceivedAt, ev.EventID), p.Body, cmp.Or(p.ContentType, "application/json"))
	if err != nil {
		s.d.Log.Warn("ingest: store webhook body failed", "route", route, "provider", p.Provider,
			"event_id", ev.EventID, "bytes", len(p.Body), "err", err)
		return errUnavailable("the webhook body could not be stored, retry later")
	}
	p.BodyRef = &schemas.WebhookBodyRef{Ref: ref, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(p.Body))}
	p.Body = []byte{}
	return nil
}

// recordSize is what topics.CheckRecordSize measures: key, value, headers.
func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
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

func (s *Server) reject(w http.ResponseWriter, r *http.Request, route string, e *httpapi.Error) {
	lvl := s.d.Log.Info
	if e.Status >= 500 {
		lvl = s.d.Log.Warn
	}
	lvl("ingest: webhook rejected", "route", route, "path", r.URL.Path, "status", e.Status, "code", e.Code)
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
