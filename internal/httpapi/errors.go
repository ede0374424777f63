// Package httpapi is what every HTTP front door of the platform shares: the
// one error shape (Error, written as ErrorBody), strict JSON decoding with
// per-field validation errors (DecodeJSON), the one JSON writer (WriteJSON,
// WriteError) and bearer-credential verification (Authenticator). The REST
// API, the gateway and the webhook ingest answer with it, so a client parses
// every failure the same way.
package httpapi

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is the one error response of the platform's HTTP APIs:
//
//	{"error": {"code": "not_found", "message": "repo not found", "details": …, "request_id": "…"}}
//
// Code is stable and machine-readable; Message is for people; Details carries
// structured specifics (for validation, one entry per bad field).
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// FieldError is one invalid field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Problem string `json:"problem"`
}

// ErrorBody is the JSON envelope of an error response (documented in
// OpenAPI). RequestID is left out only by servers without request ids (the
// webhook ingest).
type ErrorBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Details   any    `json:"details,omitempty"`
		RequestID string `json:"request_id,omitempty"`
	} `json:"error"`
}

// NewErrorBody is the envelope of e for the request requestID.
func NewErrorBody(e *Error, requestID string) ErrorBody {
	var body ErrorBody
	body.Error.Code, body.Error.Message, body.Error.Details, body.Error.RequestID = e.Code, e.Message, e.Details, requestID
	return body
}

// Stable error codes.
const (
	CodeBadRequest       = "bad_request"
	CodeValidation       = "validation_failed"
	CodeUnauthenticated  = "unauthenticated"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodeBodyTooLarge     = "body_too_large"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeRateLimited      = "rate_limited"
	CodeInternal         = "internal"
	CodeUnavailable      = "unavailable"
	CodeMethodNotAllowed = "method_not_allowed"
)

// NotFound is the answer for missing ids and for ids of another organization
// alike, so a caller cannot probe which ids exist elsewhere.
func NotFound(what string) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: what + " not found"}
}

// BadRequest is a malformed request (not a validation failure of a field).
func BadRequest(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: msg}
}

// Invalid reports invalid fields with 422.
func Invalid(fields ...FieldError) *Error {
	msg := "request has invalid fields"
	if len(fields) == 1 {
		msg = fields[0].Field + ": " + fields[0].Problem
	}
	return &Error{Status: http.StatusUnprocessableEntity, Code: CodeValidation, Message: msg, Details: fields}
}

// Forbidden means authenticated but not allowed (for example a member
// changing roles).
func Forbidden(msg string) *Error {
	return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: msg}
}

// Conflict means the request clashes with current state (duplicate name,
// invalid transition); code refines it (for example "last_owner").
func Conflict(code, msg string) *Error {
	if code == "" {
		code = CodeConflict
	}
	return &Error{Status: http.StatusConflict, Code: code, Message: msg}
}

// Unauthenticated is the single answer for every credential problem.
func Unauthenticated() *Error {
	return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "missing or invalid credentials"}
}

// RateLimited is 429; the Retry-After header is set by the caller.
func RateLimited() *Error {
	return &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited, Message: "too many requests; retry later"}
}

// Unavailable means an upstream (GitHub, Nango…) failed; message says which.
func Unavailable(msg string) *Error {
	return &Error{Status: http.StatusBadGateway, Code: CodeUnavailable, Message: msg}
}

// Internal is the 500 every unknown error becomes: its message reveals
// nothing (the cause is logged with the request id).
func Internal() *Error {
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
}

// AsError maps any error to the error shape; unknown errors are Internal.
func AsError(err error) *Error {
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return Internal()
}
