package httpapi

import (
	"encoding/json"
	"net/http"
)

// WriteJSON writes v as the JSON body of a status answer.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError writes err in the one error shape (AsError) for the request
// requestID and returns what it wrote, for the caller to log a 5xx.
func WriteError(w http.ResponseWriter, requestID string, err error) *Error {
	e := AsError(err)
	SetErrorHeaders(w.Header(), e)
	WriteJSON(w, e.Status, NewErrorBody(e, requestID))
	return e
}

// SetErrorHeaders sets the headers an answer of e carries: a 401 names the
// bearer scheme its credentials use.
func SetErrorHeaders(h http.Header, e *Error) {
	if e.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="proliferate"`)
	}
}
