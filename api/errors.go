package api

import "github.com/proliferate/proliferate/internal/httpapi"

// The error shape lives in internal/httpapi, shared with the gateway and the
// webhook ingest. These names are temporary, until every handler says
// httpapi.
type (
	Error      = httpapi.Error
	FieldError = httpapi.FieldError
	ErrorBody  = httpapi.ErrorBody
	Validator  = httpapi.Validator
)

const (
	CodeBadRequest       = httpapi.CodeBadRequest
	CodeValidation       = httpapi.CodeValidation
	CodeUnauthenticated  = httpapi.CodeUnauthenticated
	CodeForbidden        = httpapi.CodeForbidden
	CodeNotFound         = httpapi.CodeNotFound
	CodeConflict         = httpapi.CodeConflict
	CodeBodyTooLarge     = httpapi.CodeBodyTooLarge
	CodeUnsupportedMedia = httpapi.CodeUnsupportedMedia
	CodeRateLimited      = httpapi.CodeRateLimited
	CodeInternal         = httpapi.CodeInternal
	CodeUnavailable      = httpapi.CodeUnavailable
	CodeMethodNotAllowed = httpapi.CodeMethodNotAllowed
)

var (
	NotFound        = httpapi.NotFound
	BadRequest      = httpapi.BadRequest
	Invalid         = httpapi.Invalid
	Forbidden       = httpapi.Forbidden
	Conflict        = httpapi.Conflict
	Unauthenticated = httpapi.Unauthenticated
	RateLimited     = httpapi.RateLimited
	Unavailable     = httpapi.Unavailable
	DecodeJSON      = httpapi.DecodeJSON
)
