package transcript

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proliferate/proliferate/internal/transcript/transcriptdb"
	"github.com/proliferate/proliferate/schemas"
)

// DB is what the store needs: a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Message is one materialized transcript entry (a row of session_messages).
type Message struct {
	ID         string        `json:"id" doc:"the event id"`
	SessionID  string        `json:"session_id"`
	Kind       string        `json:"kind" doc:"user_message, agent_message, tool_call, status or error"`
	MessageID  *string       `json:"message_id"`
	PartID     *string       `json:"part_id"`
	Role       *string       `json:"role"`
	UserID     *string       `json:"user_id"`
	Text       *string       `json:"text"`
	Tool       *ToolCallView `json:"tool"`
	Status     *string       `json:"status"`
	Code       *string       `json:"code"`
	Truncated  bool          `json:"truncated" doc:"text was cut to 64 KiB"`
	OccurredAt time.Time     `json:"occurred_at"`
	seq        int64
}

// ToolCallView is a finished tool call of a Message.
type ToolCallView struct {
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
	Status     string          `json:"status"`
	Title      *string         `json:"title"`
	Input      json.RawMessage `json:"input"`
	Output     string          `json:"output"`
	Error      *string         `json:"error"`
	DurationMS int64           `json:"duration_ms"`
}

// Seq is the message's position in its session's history.
func (m Message) Seq() int64 { return m.seq }

// Row is a decoded transcript record ready to apply.
type Row struct {
	EventID    string
	OrgID      string
	OccurredAt time.Time
	P          *schemas.SessionTranscript
}

// RowFromEvent checks ev is a well-formed transcript event.
func RowFromEvent(ev *schemas.Event) (Row, error) {
	p, ok := ev.Payload.(*schemas.SessionTranscript)
	if !ok {
		return Row{}, fmt.Errorf("transcript: event %s is %s, not %s", ev.EventID, ev.EventType, schemas.TypeSessionTranscript)
	}
	if !isUUID(ev.EventID) || !isUUID(ev.OrgID) || !isUUID(p.SessionID) {
		return Row{}, fmt.Errorf("transcript: event %s: event id, org id and session id must be UUIDs", ev.EventID)
	}
	return Row{EventID: ev.EventID, OrgID: ev.OrgID, OccurredAt: ev.OccurredAt, P: p}, nil
}

// Apply inserts rows in order, each once (a known event id inserts
// nothing), skipping sessions deleted meanwhile (tombstoned), and queues
// the new rows for the search index (IndexSearch). It returns how many
// rows were new. One statement for the whole batch.
func Apply(ctx context.Context, db DB, rows []Row) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	cols := struct {
		id, org, sess, kind, msg, part, role, user, text, callID, tname, tstatus, ttitle, tin, tout, terr, status, code []*string
		dur                                                                                                             []*int64
		trunc                                                                                                           []bool
		at                                                                                                              []time.Time
	}{}
	for _, r := range rows {
		p := r.P
		id, org, sess, kind := r.EventID, r.OrgID, p.SessionID, p.Kind
		cols.id = append(cols.id, &id)
		cols.org = append(cols.org, &org)
		cols.sess = append(cols.sess, &sess)
		cols.kind = append(cols.kind, &kind)
		cols.msg = append(cols.msg, p.MessageID)
		cols.part = append(cols.part, p.PartID)
		cols.role = append(cols.role, p.Role)
		cols.user = append(cols.user, p.UserID)
		cols.text = append(cols.text, clean(p.Text))
		cols.status = append(cols.status, p.Status)
		cols.code = append(cols.code, p.Code)
		cols.trunc = append(cols.trunc, p.Truncated || (p.Tool != nil && p.Tool.Truncated))
		cols.at = append(cols.at, r.OccurredAt)
		if t := p.Tool; t != nil {
			callID, name, st, in, out := t.ToolCallID, t.Name, t.Status, t.InputJSON, t.Output
			d := t.DurationMs
			cols.callID = append(cols.callID, &callID)
			cols.tname = append(cols.tname, &name)
			cols.tstatus = append(cols.tstatus, &st)
			cols.ttitle = append(cols.ttitle, clean(t.Title))
			cols.tin = append(cols.tin, clean(&in))
			cols.tout = append(cols.tout, clean(&out))
			cols.terr = append(cols.terr, clean(t.Error))
			cols.dur = append(cols.dur, &d)
		} else {
			cols.callID = append(cols.callID, nil)
			cols.tname = append(cols.tname, nil)
			cols.tstatus = append(cols.tstatus, nil)
			cols.ttitle = append(cols.ttitle, nil)
			cols.tin = append(cols.tin, nil)
			cols.tout = append(cols.tout, nil)
			cols.terr = append(cols.terr, nil)
			cols.dur = append(cols.dur, nil)
		}
	}
	tag, err := db.Exec(ctx, `WITH ins AS (INSERT INTO session_messages (event_id, org_id, session_id, kind, message_id, part_id, role, user_id, text,
			tool_call_id, tool_name, tool_status, tool_title, tool_input, tool_output, tool_error, duration_ms, status, code, truncated, occurred_at)
		SELECT u.id::uuid, u.org::uuid, u.sess::uuid, u.kind, u.msg, u.part, u.role, u.usr, u.txt,
			u.call_id, u.tname, u.tstatus, u.ttitle, u.tin, u.tout, u.terr, u.dur, u.status, u.code, u.trunc, u.at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
			$10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::bigint[], $18::text[], $19::text[],
			$20::boolean[], $21::timestamptz[]) WITH ORDINALITY
			AS u(id, org, sess, kind, msg, part, role, usr, txt, call_id, tname, tstatus, ttitle, tin, tout, terr, dur, status, code, trunc, at, ord)
		WHERE NOT EXISTS (SELECT 1 FROM session_message_tombstones t WHERE t.session_id = u.sess::uuid)
		ORDER BY u.ord
		ON CONFLICT (event_id) DO NOTHING
		RETURNING seq)
		INSERT INTO session_message_search_queue (seq) SELECT seq FROM ins`,
		cols.id, cols.org, cols.sess, cols.kind, cols.msg, cols.part, cols.role, cols.user, cols.text,
		cols.callID, cols.tname, cols.tstatus, cols.ttitle, cols.tin, cols.tout, cols.terr, cols.dur, cols.status, cols.code,
		cols.trunc, cols.at)
	if err != nil {
		return 0, fmt.Errorf("transcript: apply %d entries: %w", len(rows), err)
	}
	return tag.RowsAffected(), nil
}

// clean drops NUL bytes, which Postgres text cannot hold.
func clean(s *string) *string {
	if s == nil || !strings.ContainsRune(*s, 0) {
		return s
	}
	c := strings.ReplaceAll(*s, "\x00", "")
	return &c
}

// DeleteSession removes a deleted session's history and tombstones it, so
// a replay of its transcript inserts nothing.
func DeleteSession(ctx context.Context, db DB, sessionID string) error {
	if !isUUID(sessionID) {
		return nil
	}
	if err := transcriptdb.New(db).DeleteTranscript(ctx, sessionID); err != nil {
		return fmt.Errorf("transcript: delete history of %s: %w", sessionID, err)
	}
	return nil
}

// fromRow is the message a session_messages row holds.
func fromRow(r transcriptdb.SessionMessage) Message {
	m := Message{seq: r.Seq, ID: r.EventID, SessionID: r.SessionID, Kind: r.Kind, MessageID: r.MessageID, PartID: r.PartID,
		Role: r.Role, UserID: r.UserID, Text: r.Text, Status: r.Status, Code: r.Code, Truncated: r.Truncated,
		OccurredAt: r.OccurredAt.UTC()}
	if r.ToolCallID != nil {
		tv := &ToolCallView{ToolCallID: *r.ToolCallID, Title: r.ToolTitle, Error: r.ToolError}
		if r.ToolName != nil {
			tv.Name = *r.ToolName
		}
		if r.ToolStatus != nil {
			tv.Status = *r.ToolStatus
		}
		if in := r.ToolInput; in != nil && json.Valid([]byte(*in)) {
			tv.Input = json.RawMessage(*in)
		} else {
			tv.Input = json.RawMessage(`{}`)
		}
		if r.ToolOutput != nil {
			tv.Output = *r.ToolOutput
		}
		if r.DurationMs != nil {
			tv.DurationMS = *r.DurationMs
		}
		m.Tool = tv
	}
	return m
}

// ErrBadCursor is a cursor that does not name a message of the session.
var ErrBadCursor = errors.New("transcript: cursor does not name a message of this session")

// List returns up to limit messages of the session after the message
// afterID (empty: from the start), in order. The caller checked the
// session belongs to orgID; the query is org-scoped too.
func List(ctx context.Context, db DB, orgID, sessionID, afterID string, limit int) ([]Message, error) {
	if !isUUID(orgID) || !isUUID(sessionID) {
		return []Message{}, nil
	}
	var after int64
	if afterID != "" {
		if !isUUID(afterID) {
			return nil, ErrBadCursor
		}
		var err error
		after, err = transcriptdb.New(db).TranscriptCursor(ctx, transcriptdb.TranscriptCursorParams{
			EventID: afterID, SessionID: sessionID, OrgID: orgID})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrBadCursor
		}
		if err != nil {
			return nil, fmt.Errorf("transcript: cursor: %w", err)
		}
	}
	rows, err := transcriptdb.New(db).ListTranscript(ctx, transcriptdb.ListTranscriptParams{
		SessionID: sessionID, OrgID: orgID, After: after, Max: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("transcript: list: %w", err)
	}
	return collect(rows), nil
}

// Last returns the last limit messages of the session, in order (the
// history a client gets on init).
func Last(ctx context.Context, db DB, orgID, sessionID string, limit int) ([]Message, error) {
	if !isUUID(orgID) || !isUUID(sessionID) {
		return []Message{}, nil
	}
	rows, err := transcriptdb.New(db).LastTranscript(ctx, transcriptdb.LastTranscriptParams{
		SessionID: sessionID, OrgID: orgID, Max: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("transcript: history: %w", err)
	}
	return collect(rows), nil
}

func collect(rows []transcriptdb.SessionMessage) []Message {
	out := make([]Message, 0, len(rows))
	for _, r := range rows {
		out = append(out, fromRow(r))
	}
	return out
}

// Hit is one search result: a message of one of the organization's
// sessions.
type Hit struct {
	SessionID    string    `json:"session_id"`
	SessionTitle string    `json:"session_title"`
	MessageID    string    `json:"id" doc:"the event id of the message"`
	Kind         string    `json:"kind"`
	Snippet      string    `json:"snippet" doc:"the matching text with the query's words between ** and **"`
	Rank         float32   `json:"rank"`
	OccurredAt   time.Time `json:"occurred_at"`
	seq          int64
}

// SearchCursor is a position in search results (rank DESC, seq DESC).
type SearchCursor struct {
	Rank float32 `json:"r"`
	Seq  int64   `json:"s"`
}

// EncodeCursor renders c for a next_cursor.
func (c SearchCursor) Encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeSearchCursor parses what Encode wrote.
func DecodeSearchCursor(s string) (SearchCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var c SearchCursor
	if err != nil || json.Unmarshal(b, &c) != nil || c.Seq <= 0 {
		return c, ErrBadCursor
	}
	return c, nil
}

// Cursor is the position of h for the next page.
func (h Hit) Cursor() SearchCursor { return SearchCursor{Rank: h.Rank, Seq: h.seq} }

// IndexSearch indexes up to limit queued rows for search (the oldest
// first) and returns how many it took from the queue: fewer than limit
// means the queue was empty when it looked. Computing the full-text
// vector is most of the cost of a history row, so Apply only queues it
// (session_message_search_queue, in the inserting statement) and this
// does it off the history's path. The indexed text is what people read:
// the text, the tool's name, title and output, the error. Workers share the queue (FOR UPDATE
// SKIP LOCKED) and a failure leaves it as it was; a queued row deleted
// since (its session was) is dropped from the queue.
func IndexSearch(ctx context.Context, db DB, limit int) (int, error) {
	n, err := transcriptdb.New(db).IndexSearch(ctx, int32(limit))
	if err != nil {
		return 0, fmt.Errorf("transcript: index for search: %w", err)
	}
	return int(n), nil
}

// MaxQuery bounds a search query's length in bytes.
const MaxQuery = 500

// Search finds the organization's messages matching q (web search syntax:
// words, "phrases", -excluded, or), best first, up to limit after the
// cursor. Only sessions that still exist in the organization are searched.
func Search(ctx context.Context, db DB, orgID, q string, after *SearchCursor, limit int) ([]Hit, error) {
	if !isUUID(orgID) {
		return []Hit{}, nil
	}
	rank, seq := float32(3.4e38), int64(1<<62)
	if after != nil {
		rank, seq = after.Rank, after.Seq
	}
	rows, err := transcriptdb.New(db).SearchTranscripts(ctx, transcriptdb.SearchTranscriptsParams{
		OrgID: orgID, AfterRank: rank, AfterSeq: seq, Max: int32(limit), Query: q})
	if err != nil {
		return nil, fmt.Errorf("transcript: search: %w", err)
	}
	out := make([]Hit, 0, len(rows))
	for _, r := range rows {
		out = append(out, Hit{seq: r.Seq, SessionID: r.SessionID, SessionTitle: r.Title, MessageID: r.EventID, Kind: r.Kind,
			OccurredAt: r.OccurredAt.UTC(), Rank: r.Rank, Snippet: r.Snippet})
	}
	return out, nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}
