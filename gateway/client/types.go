package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Errors an *Error matches with errors.Is, by HTTP status, so callers need
// not compare statuses or codes.
var (
	// ErrUnauthorized: the credential is missing, expired or invalid (401).
	ErrUnauthorized = errors.New("gateway: unauthorized")
	// ErrPaymentRequired: billing refused (402; Code and Details say why).
	ErrPaymentRequired = errors.New("gateway: payment required")
	// ErrForbidden: the credential may not do this (403).
	ErrForbidden = errors.New("gateway: forbidden")
	// ErrNotFound: no such session (or other resource) for the caller (404).
	ErrNotFound = errors.New("gateway: not found")
	// ErrConflict: the resource's state does not allow it, for example the
	// session has ended (409).
	ErrConflict = errors.New("gateway: conflict")
	// ErrUnavailable: the gateway cannot do it now; retry (503).
	ErrUnavailable = errors.New("gateway: unavailable")
)

var statusErrors = map[error]int{ErrUnauthorized: http.StatusUnauthorized, ErrPaymentRequired: http.StatusPaymentRequired,
	ErrForbidden: http.StatusForbidden, ErrNotFound: http.StatusNotFound, ErrConflict: http.StatusConflict,
	ErrUnavailable: http.StatusServiceUnavailable}

// Error is a non-2xx answer of the gateway, decoded from the API's error
// shape {"error": {"code", "message", "details", "request_id"}}.
type Error struct {
	Status    int             `json:"-"`
	Code      string          `json:"code"`
	Message   string          `json:"message"`
	Details   json.RawMessage `json:"details,omitempty"`
	RequestID string          `json:"request_id"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("gateway: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches the Err* value of e's status.
func (e *Error) Is(target error) bool {
	st, ok := statusErrors[target]
	return ok && e.Status == st
}

// Permanent reports whether retrying the same request cannot succeed
// (4xx other than 408 and 429).
func (e *Error) Permanent() bool {
	return e.Status >= 400 && e.Status < 500 && e.Status != 408 && e.Status != 429
}
