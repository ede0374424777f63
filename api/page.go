package api

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"

	"github.com/proliferate/proliferate/internal/httpapi"
)

// Page sizes: the default when no limit is given and the most one page returns.
const (
	DefaultPageSize = 50
	MaxPageSize     = 100
)

// PageParams are a list request's limit and position.
type PageParams struct {
	Limit int
	// After is the cursor's position: return rows strictly after it in the
	// list's order (created_at DESC, id DESC). Nil for the first page.
	After *Cursor
}

// Cursor is a position in a list ordered by (created_at DESC, id DESC).
type Cursor struct {
	At time.Time `json:"t"`
	ID string    `json:"i"`
}

// Page is every list response.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// PageQuery documents the pagination parameters in OpenAPI.
var PageQuery = []Param{
	{Name: "limit", Description: "page size, 1–100 (default 50)"},
	{Name: "cursor", Description: "next_cursor of the previous page"},
}

// Page parses ?limit= and ?cursor=. Lists query one row more than Limit
// (WHERE (created_at, id) < (After.At, After.ID) ORDER BY created_at DESC, id
// DESC LIMIT Limit+1) and hand the rows to Paginate.
func (c *Ctx) Page() (PageParams, error) {
	p := PageParams{Limit: DefaultPageSize}
	if raw := c.Query("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > MaxPageSize {
			return p, httpapi.Invalid(httpapi.FieldError{Field: "limit", Problem: "must be a number from 1 to 100"})
		}
		p.Limit = n
	}
	if raw := c.Query("cursor"); raw != "" {
		b, err := base64.RawURLEncoding.DecodeString(raw)
		var cur Cursor
		if err != nil || json.Unmarshal(b, &cur) != nil || !IsUUID(cur.ID) {
			return p, httpapi.Invalid(httpapi.FieldError{Field: "cursor", Problem: "is not a cursor this API returned"})
		}
		p.After = &cur
	}
	return p, nil
}

// Paginate trims the extra row and makes the next cursor from the last item.
func Paginate[T any](rows []T, limit int, position func(T) (time.Time, string)) Page[T] {
	if rows == nil {
		rows = []T{}
	}
	if len(rows) <= limit {
		return Page[T]{Items: rows}
	}
	rows = rows[:limit]
	at, id := position(rows[len(rows)-1])
	b, _ := json.Marshal(Cursor{At: at.UTC(), ID: id})
	return Page[T]{Items: rows, NextCursor: base64.RawURLEncoding.EncodeToString(b)}
}

// CursorArgs returns the (time, id) to compare against, or the far future for
// the first page, so one SQL statement serves every page.
func (p PageParams) CursorArgs() (time.Time, string) {
	if p.After == nil {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "ffffffff-ffff-ffff-ffff-ffffffffffff"
	}
	return p.After.At, p.After.ID
}
