package poller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/triggers/providers"
)

// LinearIssuesQuery is the GraphQL document the Linear source sends: issues
// updated at or after the watermark, most recently updated first, one page
// at a time (Relay cursor pagination with first/after).
const LinearIssuesQuery = `query ProliferatePollIssues($first: Int!, $after: String, $updatedAfter: DateTimeOrDuration!) {
  issues(first: $first, after: $after, orderBy: updatedAt, filter: { updatedAt: { gte: $updatedAfter } }) {
    nodes {
      id identifier number title description url priority priorityLabel createdAt updatedAt
      state { id name type }
      team { id key name }
      assignee { id name email }
      project { id name }
      labels { nodes { id name } }
    }
    pageInfo { hasNextPage endCursor }
  }
}`

// Linear polls Linear's GraphQL issues query. Its cursor (stored on the poll
// group) is a watermark, updated_after: issues updated at or after it are
// new. A traversal of several pages keeps page_after (Linear's endCursor)
// and the newest updatedAt seen (max_seen) in the cursor, so it can continue
// in the next poll; when the last page is reached the watermark moves to
// max_seen. The query uses gte, so an issue updated in the same millisecond
// as the watermark is not missed; the issues already handled at the
// watermark (seen_ids) are passed over when they come back.
//
// Issues are normalized by the Linear webhook adapter (providers.Parse on an
// Issue webhook built from the GraphQL node), so polled and pushed events
// have the same shape, filters and dedup keys: an issue created since the
// watermark is a "create", any other an "update".
type Linear struct {
	URL      string
	Client   *http.Client
	PageSize int // default 50 (Linear allows up to 250)
	// Parse normalizes webhooks (default providers.Parse).
	Parse func(providers.Webhook) ([]runs.Event, error)
}

// maxLinearBody bounds a Linear response.
const maxLinearBody = 8 << 20

type linearCursor struct {
	UpdatedAfter time.Time `json:"updated_after"`
	// SeenIDs are the issues already handled whose updatedAt equals
	// UpdatedAfter (the query uses gte, so they come back once more).
	SeenIDs   []string   `json:"seen_ids,omitempty"`
	PageAfter string     `json:"page_after,omitempty"`
	MaxSeen   *time.Time `json:"max_seen,omitempty"`
	// MaxSeenIDs are the issues seen so far with updatedAt equal to MaxSeen.
	MaxSeenIDs []string `json:"max_seen_ids,omitempty"`
}

type linearIssue struct {
	ID        string `json:"id"`
	CreatedAt string `json:"createdAt"`
	UpdatedAt string `json:"updatedAt"`
}

type linearResponse struct {
	Data *struct {
		Issues *struct {
			Nodes    []json.RawMessage `json:"nodes"`
			PageInfo struct {
				HasNextPage bool    `json:"hasNextPage"`
				EndCursor   *string `json:"endCursor"`
			} `json:"pageInfo"`
		} `json:"issues"`
	} `json:"data"`
	Errors []struct {
		Message    string `json:"message"`
		Extensions struct {
			Code string `json:"code"`
		} `json:"extensions"`
	} `json:"errors"`
}

// Poll implements Source.
func (l *Linear) Poll(ctx context.Context, req PollRequest) (PollPage, error) {
	cur := linearCursor{UpdatedAfter: req.Since.UTC()}
	if len(req.Cursor) > 0 && string(req.Cursor) != "null" {
		if err := json.Unmarshal(req.Cursor, &cur); err != nil || cur.UpdatedAfter.IsZero() {
			// An unreadable cursor restarts from the baseline rather than
			// from the beginning of time.
			cur = linearCursor{UpdatedAfter: req.Since.UTC()}
		}
	}
	size := l.PageSize
	if size <= 0 || size > 250 {
		size = 50
	}
	vars := map[string]any{"first": size, "updatedAfter": cur.UpdatedAfter.UTC().Format(time.RFC3339Nano)}
	if cur.PageAfter != "" {
		vars["after"] = cur.PageAfter
	}
	body, _ := json.Marshal(map[string]any{"query": LinearIssuesQuery, "variables": vars})
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, l.URL, bytes.NewReader(body))
	if err != nil {
		return PollPage{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+req.Token)
	client := l.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(hreq)
	if err != nil {
		cause := errors.Unwrap(err) // no URL in the message
		if cause == nil {
			cause = err
		}
		return PollPage{}, fmt.Errorf("linear: request failed: %v", cause)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxLinearBody))
	if err != nil {
		return PollPage{}, fmt.Errorf("linear: read response: %v", err)
	}
	var out linearResponse
	decodeErr := json.Unmarshal(raw, &out)
	if rl := linearRateLimit(resp, out); rl != nil {
		return PollPage{}, rl
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return PollPage{}, fmt.Errorf("linear: HTTP %d: the integration's token was refused", resp.StatusCode)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return PollPage{}, fmt.Errorf("linear: HTTP %d%s", resp.StatusCode, graphqlMessages(out))
	case decodeErr != nil:
		return PollPage{}, errors.New("linear: malformed response")
	case len(out.Errors) > 0:
		return PollPage{}, fmt.Errorf("linear: GraphQL error%s", graphqlMessages(out))
	case out.Data == nil || out.Data.Issues == nil:
		return PollPage{}, errors.New("linear: response has no data.issues")
	}
	parse := l.Parse
	if parse == nil {
		parse = providers.Parse
	}
	page := PollPage{}
	maxSeen, maxSeenIDs := cur.MaxSeen, cur.MaxSeenIDs
	for _, node := range out.Data.Issues.Nodes {
		var is linearIssue
		if err := json.Unmarshal(node, &is); err != nil || is.ID == "" {
			continue
		}
		updated, err := time.Parse(time.RFC3339Nano, is.UpdatedAt)
		if err != nil {
			page.Problems = append(page.Problems, fmt.Sprintf("issue %s: updatedAt %q is not a timestamp", is.ID, printable(is.UpdatedAt, 40)))
			continue
		}
		updated = updated.UTC()
		switch {
		case maxSeen == nil || updated.After(*maxSeen):
			maxSeen, maxSeenIDs = &updated, []string{is.ID}
		case updated.Equal(*maxSeen) && !slices.Contains(maxSeenIDs, is.ID):
			maxSeenIDs = append(maxSeenIDs, is.ID)
		}
		if updated.Equal(cur.UpdatedAfter) && slices.Contains(cur.SeenIDs, is.ID) {
			continue // handled by the poll that set the watermark
		}
		action := "update"
		if created, err := time.Parse(time.RFC3339Nano, is.CreatedAt); err == nil && !created.Before(cur.UpdatedAfter) {
			action = "create"
		}
		hook, _ := json.Marshal(map[string]any{"type": "Issue", "action": action, "data": node, "createdAt": is.UpdatedAt})
		evs, err := parse(providers.Webhook{Provider: providers.Linear, Body: hook, ReceivedAt: req.Now,
			Headers: map[string]string{"linear-event": "Issue"}})
		if err != nil {
			page.Problems = append(page.Problems, fmt.Sprintf("issue %s: %v", is.ID, err))
			continue
		}
		page.Events = append(page.Events, evs...)
	}
	sort.SliceStable(page.Events, func(i, j int) bool { return page.Events[i].OccurredAt.Before(page.Events[j].OccurredAt) })
	next := linearCursor{UpdatedAfter: cur.UpdatedAfter, SeenIDs: cur.SeenIDs}
	pi := out.Data.Issues.PageInfo
	switch {
	case pi.HasNextPage && pi.EndCursor != nil && *pi.EndCursor != "":
		next.PageAfter, next.MaxSeen, next.MaxSeenIDs, page.More = *pi.EndCursor, maxSeen, maxSeenIDs, true
	case maxSeen != nil && maxSeen.After(next.UpdatedAfter):
		next.UpdatedAfter, next.SeenIDs = *maxSeen, maxSeenIDs
	case maxSeen != nil && maxSeen.Equal(next.UpdatedAfter):
		for _, id := range maxSeenIDs {
			if !slices.Contains(next.SeenIDs, id) {
				next.SeenIDs = append(next.SeenIDs, id)
			}
		}
	}
	page.Cursor, _ = json.Marshal(next)
	return page, nil
}

// linearRateLimit recognizes Linear's rate limiting: HTTP 429 (Retry-After
// in seconds or as a date), or a GraphQL error with code RATELIMITED (the
// reset time in X-RateLimit-Requests-Reset, epoch milliseconds).
func linearRateLimit(resp *http.Response, out linearResponse) *RateLimitedError {
	limited := resp.StatusCode == http.StatusTooManyRequests
	for _, e := range out.Errors {
		limited = limited || strings.EqualFold(e.Extensions.Code, "RATELIMITED")
	}
	if !limited {
		return nil
	}
	rl := &RateLimitedError{Provider: providers.Linear, Status: resp.StatusCode}
	if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		rl.RetryAfter = d
	} else if ms, err := strconv.ParseInt(resp.Header.Get("X-RateLimit-Requests-Reset"), 10, 64); err == nil {
		if d := time.Until(time.UnixMilli(ms)); d > 0 {
			rl.RetryAfter = d
		}
	}
	return rl
}

// retryAfter parses a Retry-After header (delta seconds or an HTTP date).
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// graphqlMessages summarizes GraphQL error messages (bounded, printable).
func graphqlMessages(out linearResponse) string {
	if len(out.Errors) == 0 {
		return ""
	}
	msgs := make([]string, 0, len(out.Errors))
	for i, e := range out.Errors {
		if i == 3 {
			break
		}
		msgs = append(msgs, printable(e.Message, 200))
	}
	return ": " + strings.Join(msgs, "; ")
}

func printable(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
