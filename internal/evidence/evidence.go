// Package evidence stores the verification evidence an agent uploads with
// the verify platform tool (session-display.md: "verify: uploads
// verification evidence"): files of its workspace (screenshots, logs, test
// reports) with a summary. The bytes go to the blob store under
// evidence/{org}/{session}/{call}-{n}; a session_evidence row per file
// records its workspace path, sniffed content type, size and SHA-256, and
// the session's run, so the session's and the run's evidence can be listed
// and downloaded within the organization.
//
// Recording is idempotent by the tool call: the blob keys are derived from
// (session, tool_call_id, position), so a retry overwrites the same
// objects with the same bytes, and the rows are inserted with ON CONFLICT
// DO NOTHING, so a call is stored once however often it is retried.
//
// Reading the files out of the sandbox (confined to the workspace, regular
// files only, symlinks never followed out) is the sandbox provider's
// (sandbox.ReadWorkspaceFile); this package checks the arguments and the
// limits before anything is read, and the total again once read.
package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/evidence/evidencedb"
)

// Limits of one verify call.
const (
	// MaxFiles is how many files one call may upload.
	MaxFiles = 10
	// MaxFileBytes bounds each file (5 MiB).
	MaxFileBytes = 5 << 20
	// MaxTotalBytes bounds the files of one call together (20 MiB).
	MaxTotalBytes = 20 << 20
	// MaxSummary bounds the summary (characters).
	MaxSummary = 4000
	// MaxPath bounds a path (bytes).
	MaxPath = 1024
)

// ErrNotFound: no such evidence in the organization.
var ErrNotFound = errors.New("evidence: not found")

// File is one file read from the workspace.
type File struct {
	// Path is the cleaned workspace-relative path.
	Path string
	Data []byte
}

// Item is one stored piece of evidence.
type Item struct {
	ID          string    `json:"id"`
	SessionID   string    `json:"session_id"`
	RunID       *string   `json:"run_id"`
	ToolCallID  string    `json:"tool_call_id"`
	Position    int       `json:"position"`
	Path        string    `json:"path"`
	ContentType string    `json:"content_type"`
	SizeBytes   int64     `json:"size_bytes"`
	SHA256      string    `json:"sha256"`
	Summary     string    `json:"summary"`
	CreatedAt   time.Time `json:"created_at"`
	// blobRef names the bytes in the blob store (never in responses).
	blobRef string
}

// CleanPath checks one path argument and returns it cleaned: a relative
// path of the workspace (slash-separated, no NUL or control characters, at
// most MaxPath bytes) that does not climb out of it with "..". The
// provider confines the read again (symlinks).
func CleanPath(p string) (string, error) {
	switch {
	case strings.TrimSpace(p) == "":
		return "", errors.New("is empty")
	case len(p) > MaxPath:
		return "", fmt.Errorf("is longer than %d bytes", MaxPath)
	case strings.IndexFunc(p, unicode.IsControl) >= 0:
		return "", errors.New("contains control characters")
	case strings.HasPrefix(p, "/"):
		return "", errors.New("is absolute: give the path relative to the workspace root (your working directory)")
	case strings.Contains(p, `\`):
		return "", errors.New("contains a backslash")
	}
	c := path.Clean(p)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", errors.New("leaves the workspace")
	}
	return c, nil
}

// safeTypes are served with their own type; anything else a browser could
// run (HTML, SVG, XML) is stored as text/plain or octet-stream.
var safeTypes = map[string]bool{
	"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true, "image/bmp": true,
	"application/pdf": true, "application/json": true, "application/zip": true, "application/x-gzip": true,
	"video/mp4": true, "video/webm": true, "text/plain": true, "text/csv": true, "text/markdown": true,
}

// textExt are extensions stored as text/plain when their bytes are text.
var textExt = map[string]string{
	".json": "application/json", ".csv": "text/csv", ".md": "text/markdown",
}

// SniffContentType returns the content type evidence is stored and
// served with: sniffed from the bytes (http.DetectContentType), refined by
// the extension for text, and never a type a browser would execute.
func SniffContentType(name string, data []byte) string {
	ct := http.DetectContentType(data)
	base, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "application/octet-stream"
	}
	if strings.HasPrefix(base, "text/") {
		if t, ok := textExt[strings.ToLower(path.Ext(name))]; ok {
			base = t
		} else {
			base = "text/plain"
		}
	}
	if !safeTypes[base] {
		return "application/octet-stream"
	}
	if cs := params["charset"]; cs != "" && (strings.HasPrefix(base, "text/") || base == "application/json") {
		return base + "; charset=" + cs
	}
	return base
}

// Store records and reads evidence.
type Store struct {
	Pool *pgxpool.Pool
	// Blobs holds the bytes; nil: Record and Open fail (listing works).
	Blobs blobstore.Store
}

// Call is one verify call to record.
type Call struct {
	OrgID, SessionID string
	// RunID is the session's run, if any.
	RunID      *string
	ToolCallID string
	Summary    string
	Files      []File
}

// BlobKey is where file n of a call is stored: derived from the call so a
// retry writes the same objects.
func BlobKey(orgID, sessionID, toolCallID string, n int) string {
	h := sha256.Sum256([]byte(toolCallID))
	return fmt.Sprintf("evidence/%s/%s/%s-%d", orgID, sessionID, hex.EncodeToString(h[:12]), n)
}

// Record stores the files of a call (once per session and tool call id)
// and returns its items.
func (s *Store) Record(ctx context.Context, c Call) ([]Item, error) {
	if s.Blobs == nil {
		return nil, errors.New("evidence: no blob store")
	}
	type put struct {
		ct, sum, ref string
		size         int
	}
	puts := make([]put, len(c.Files))
	for i, f := range c.Files {
		sum := sha256.Sum256(f.Data)
		ct := SniffContentType(f.Path, f.Data)
		ref, err := s.Blobs.Put(ctx, BlobKey(c.OrgID, c.SessionID, c.ToolCallID, i), f.Data, ct)
		if err != nil {
			return nil, fmt.Errorf("evidence: store %s: %w", f.Path, err)
		}
		puts[i] = put{ct: ct, sum: hex.EncodeToString(sum[:]), ref: ref, size: len(f.Data)}
	}
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		for i, f := range c.Files {
			p := puts[i]
			if err := evidencedb.New(tx).RecordEvidence(ctx, evidencedb.RecordEvidenceParams{
				OrgID: c.OrgID, SessionID: c.SessionID, RunID: c.RunID, ToolCallID: c.ToolCallID, Position: int32(i), Path: f.Path,
				ContentType: p.ct, SizeBytes: int64(p.size), Sha256: p.sum, BlobRef: p.ref, Summary: c.Summary,
			}); err != nil {
				return fmt.Errorf("evidence: record %s: %w", f.Path, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.list(ctx, evidencedb.ListEvidenceParams{OrgID: c.OrgID, SessionID: &c.SessionID, ToolCallID: &c.ToolCallID})
}

// list lists the evidence the filter selects, oldest first (at most 1,000
// items: a session rarely has more than a few dozen).
func (s *Store) list(ctx context.Context, f evidencedb.ListEvidenceParams) ([]Item, error) {
	rows, err := evidencedb.New(s.Pool).ListEvidence(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("evidence: list: %w", err)
	}
	items := make([]Item, len(rows))
	for i, r := range rows {
		items[i] = Item{ID: r.ID, SessionID: r.SessionID, RunID: r.RunID, ToolCallID: r.ToolCallID, Position: int(r.Position),
			Path: r.Path, ContentType: r.ContentType, SizeBytes: r.SizeBytes, SHA256: r.Sha256, Summary: r.Summary,
			CreatedAt: r.CreatedAt, blobRef: r.BlobRef}
	}
	return items, nil
}

// ListSession lists a session's evidence of the organization, oldest first.
func (s *Store) ListSession(ctx context.Context, orgID, sessionID string) ([]Item, error) {
	return s.list(ctx, evidencedb.ListEvidenceParams{OrgID: orgID, SessionID: &sessionID})
}

// ListRun lists a run's evidence of the organization, oldest first.
func (s *Store) ListRun(ctx context.Context, orgID, runID string) ([]Item, error) {
	return s.list(ctx, evidencedb.ListEvidenceParams{OrgID: orgID, RunID: &runID})
}

// Open returns one piece of evidence of a session of the organization and
// its bytes; ErrNotFound when there is none (or its blob is gone).
func (s *Store) Open(ctx context.Context, orgID, sessionID, id string) (Item, []byte, error) {
	items, err := s.list(ctx, evidencedb.ListEvidenceParams{OrgID: orgID, SessionID: &sessionID, ID: &id})
	if err != nil {
		return Item{}, nil, err
	}
	if len(items) == 0 {
		return Item{}, nil, ErrNotFound
	}
	if s.Blobs == nil {
		return Item{}, nil, errors.New("evidence: no blob store")
	}
	data, err := s.Blobs.Get(ctx, items[0].blobRef)
	if errors.Is(err, blobstore.ErrNotFound) {
		return Item{}, nil, ErrNotFound
	}
	if err != nil {
		return Item{}, nil, fmt.Errorf("evidence: read %s: %w", id, err)
	}
	return items[0], data, nil
}
