package tools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/proliferate/proliferate/internal/evidence"
	"github.com/proliferate/proliferate/internal/sandbox"
)

// Verify is the verify platform tool: it uploads files of the workspace as
// the session's verification evidence.
const Verify = "verify"

// Error codes of a refused verify call (Result.Data["error"]).
const (
	VerifyInvalid        = "invalid_arguments"
	VerifyTooMany        = "too_many_files"
	VerifyOutside        = "path_outside_workspace"
	VerifyNotFound       = "file_not_found"
	VerifyNotRegular     = "not_a_regular_file"
	VerifyTooLarge       = "file_too_large"
	VerifyTotalTooLarge  = "total_too_large"
	VerifyNotConfigured  = "evidence_unavailable"
	verifyReadFailed     = "read_failed"
	verifyMaxTotalString = "20 MiB"
)

// VerifyTool is the verify tool over d (registered by New; tests register
// it with their own evidence store).
func VerifyTool(d Deps) Tool {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	return Tool{Name: Verify, Execute: d.verify}
}

func verifyFailure(code, format string, args ...any) Result {
	r := Failure(format, args...)
	r.Data = map[string]any{"error": code}
	return r
}

// verify reads the named workspace files through the session's sandbox
// provider (confined to the workspace: absolute paths, ".." and symbolic
// links leading out are refused; regular files only), checks the limits
// (evidence.MaxFiles files of at most evidence.MaxFileBytes,
// evidence.MaxTotalBytes in all) and stores them with the summary
// (evidence.Store.Record). Any refusal stores nothing and names the
// offending path. Once per tool_call_id, like every platform tool.
func (d Deps) verify(ctx context.Context, c Call) (Result, error) {
	var args struct {
		Paths   []string `json:"paths"`
		Summary string   `json:"summary"`
	}
	if err := decodeArgs(c.Args, &args); err != nil {
		return verifyFailure(VerifyInvalid, "%v", err), nil
	}
	switch {
	case len(args.Paths) == 0:
		return verifyFailure(VerifyInvalid, "Invalid arguments: paths must name at least one file of the workspace"), nil
	case len(args.Paths) > evidence.MaxFiles:
		return verifyFailure(VerifyTooMany, "Invalid arguments: at most %d files per call (got %d); call verify again for the rest",
			evidence.MaxFiles, len(args.Paths)), nil
	case utf8.RuneCountInString(args.Summary) > evidence.MaxSummary || strings.ContainsRune(args.Summary, 0):
		return verifyFailure(VerifyInvalid, "Invalid arguments: summary must be at most %d characters of text", evidence.MaxSummary), nil
	}
	paths := make([]string, len(args.Paths))
	seen := map[string]bool{}
	for i, p := range args.Paths {
		clean, err := evidence.CleanPath(p)
		if err != nil {
			code := VerifyInvalid
			if strings.Contains(err.Error(), "leaves the workspace") || strings.Contains(err.Error(), "absolute") {
				code = VerifyOutside
			}
			return verifyFailure(code, "Invalid arguments: paths[%d] %q %v", i, p, err), nil
		}
		if seen[clean] {
			return verifyFailure(VerifyInvalid, "Invalid arguments: paths[%d] %q is listed twice", i, p), nil
		}
		seen[clean] = true
		paths[i] = clean
	}
	if d.Evidence == nil || d.Evidence.Blobs == nil {
		return verifyFailure(VerifyNotConfigured, "verify is not available: this platform has no evidence store configured"), nil
	}
	rt, err := c.Runtime(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("session runtime: %w", err)
	}
	files := make([]evidence.File, 0, len(paths))
	total := 0
	for i, p := range paths {
		data, err := rt.ReadWorkspaceFile(ctx, p, evidence.MaxFileBytes)
		switch {
		case errors.Is(err, sandbox.ErrFileNotFound):
			return verifyFailure(VerifyNotFound, "paths[%d] %q: no such file in the workspace; nothing was uploaded", i, p), nil
		case errors.Is(err, sandbox.ErrOutsideWorkspace):
			return verifyFailure(VerifyOutside, "paths[%d] %q leads out of the workspace (a symbolic link?); nothing was uploaded", i, p), nil
		case errors.Is(err, sandbox.ErrNotRegularFile):
			return verifyFailure(VerifyNotRegular, "paths[%d] %q is not a regular file (name files, not directories); nothing was uploaded", i, p), nil
		case errors.Is(err, sandbox.ErrFileTooLarge):
			return verifyFailure(VerifyTooLarge, "paths[%d] %q is larger than %d MiB; nothing was uploaded (upload a smaller excerpt)",
				i, p, evidence.MaxFileBytes>>20), nil
		case errors.Is(err, sandbox.ErrFilesUnsupported):
			return verifyFailure(VerifyNotConfigured, "verify is not available: this sandbox provider cannot read workspace files"), nil
		case err != nil:
			d.Log.Error("verify: read workspace file", "session_id", c.Session.ID, "path", p, "error", err)
			return verifyFailure(verifyReadFailed, "paths[%d] %q could not be read; nothing was uploaded", i, p), nil
		}
		total += len(data)
		if total > evidence.MaxTotalBytes {
			return verifyFailure(VerifyTotalTooLarge, "the files add up to more than %s; nothing was uploaded (split them over several calls)",
				verifyMaxTotalString), nil
		}
		files = append(files, evidence.File{Path: p, Data: data})
	}
	items, err := d.Evidence.Record(ctx, evidence.Call{OrgID: c.Session.OrgID, SessionID: c.Session.ID, RunID: c.Session.RunID,
		ToolCallID: c.ToolCallID, Summary: args.Summary, Files: files})
	if err != nil {
		return Result{}, err
	}
	var lines []string
	list := make([]map[string]any, 0, len(items))
	for _, it := range items {
		lines = append(lines, fmt.Sprintf("%s (%s, %d bytes)", it.Path, it.ContentType, it.SizeBytes))
		list = append(list, map[string]any{"id": it.ID, "path": it.Path, "contentType": it.ContentType,
			"sizeBytes": it.SizeBytes, "sha256": it.SHA256})
	}
	return Result{Success: true,
		Result: fmt.Sprintf("Uploaded %d file(s) as verification evidence: %s. People see them on the session%s.",
			len(items), strings.Join(lines, ", "), map[bool]string{true: " and its run", false: ""}[c.Session.RunID != nil]),
		Data: map[string]any{"count": len(items), "evidence": list}}, nil
}
