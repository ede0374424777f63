package gitops

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Diff limits.
const (
	// DefaultDiffMaxBytes caps the patch text of one Diff (all files
	// together): past it, patches are cut at a line boundary and marked
	// truncated.
	DefaultDiffMaxBytes = 1 << 20
	// MaxUntrackedDiffs is how many untracked files a Diff shows as added
	// (the others are listed, truncated, without a patch).
	MaxUntrackedDiffs = 200
)

// File states in DiffFile.Status.
const (
	DiffAdded     = "added"
	DiffModified  = "modified"
	DiffDeleted   = "deleted"
	DiffRenamed   = "renamed"
	DiffUntracked = "untracked"
)

// DiffFile is one file's change against HEAD.
type DiffFile struct {
	Path    string `json:"path"`
	OldPath string `json:"old_path,omitempty"` // renames
	Status  string `json:"status"`             // added | modified | deleted | renamed | untracked
	// Binary files have no patch (git's "Binary files … differ" is not
	// repeated), nor line counts.
	Binary    bool `json:"binary"`
	Additions int  `json:"additions"`
	Deletions int  `json:"deletions"`
	// Patch is the unified diff of the file (hunks only: from the first
	// "@@" line), "" for binary files and files past the size cap.
	Patch string `json:"patch"`
	// Truncated: the patch was cut (or left out) by the size cap.
	Truncated bool `json:"truncated,omitempty"`
}

// Diff is the working tree's change against HEAD (staged and unstaged
// together), untracked files included as added.
type Diff struct {
	Files []DiffFile `json:"files"`
	// Truncated: some patch was cut or left out (MaxBytes, or more than
	// MaxUntrackedDiffs untracked files).
	Truncated bool `json:"truncated"`
	// MaxBytes is the cap on the patch text that applied.
	MaxBytes int `json:"max_bytes"`
}

// DiffOptions select and bound a Diff.
type DiffOptions struct {
	// Path limits the diff to a file or directory of the repository ("":
	// everything).
	Path string
	// MaxBytes caps the patch text [DefaultDiffMaxBytes].
	MaxBytes int
}

// Diff returns the repository's uncommitted changes against HEAD (against
// the empty tree before the first commit), with untracked files (not
// ignored ones) shown as added. It only reads: the index is not touched.
func (r *Repo) Diff(ctx context.Context, o DiffOptions) (Diff, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultDiffMaxBytes
	}
	spec := []string{"--"}
	if o.Path != "" {
		p, err := CleanPath(o.Path)
		if err != nil {
			return Diff{}, &FieldError{Field: "path", Problem: strings.TrimPrefix(err.Error(), "gitops: ")}
		}
		spec = append(spec, p)
	}
	base := "HEAD"
	if !r.hasHead(ctx) {
		base = emptyTree
	}
	ro := runOpts{readOnly: true}
	common := []string{"-c", "core.quotePath=false", "diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M", base}
	ns, err := r.must(ctx, ro, "diff", append(append(append([]string{}, common...), "--numstat", "-z"), spec...)...)
	if err != nil {
		return Diff{}, err
	}
	files, err := parseNumstat(ns.Stdout)
	if err != nil {
		return Diff{}, err
	}
	patch, err := r.must(ctx, ro, "diff", append(append(append([]string{}, common...), "-p"), spec...)...)
	if err != nil {
		return Diff{}, err
	}
	sections := splitPatch(patch.Stdout)
	for i := range files {
		if i < len(sections) {
			applySection(&files[i], sections[i])
		} else if !files[i].Binary {
			files[i].Truncated = true // past the executor's output cap
		}
	}

	// Untracked files: listed by ls-files, shown as added through
	// `git diff --no-index /dev/null <file>` in one shell (one exec).
	ls, err := r.must(ctx, ro, "ls-files", append([]string{"ls-files", "--others", "--exclude-standard", "-z"}, spec...)...)
	if err != nil {
		return Diff{}, err
	}
	var untracked []string
	for _, p := range bytes.Split(ls.Stdout, []byte{0}) {
		if len(p) > 0 {
			untracked = append(untracked, string(p))
		}
	}
	out := Diff{Files: files, MaxBytes: o.MaxBytes}
	shown := untracked[:min(len(untracked), MaxUntrackedDiffs)]
	if len(shown) > 0 {
		// Each file: its path and a NUL, then git's patch and a NUL (a
		// patch holds no NUL: a file with one is shown as binary).
		script := `for f do printf '%s\0' "$f"; git -c core.quotePath=false diff --no-index --no-color --no-ext-diff --no-textconv -p -- /dev/null "$f"; printf '\0'; done; exit 0`
		res, err := r.exec(ctx, sandbox.ExecCommand{Args: append([]string{"sh", "-c", script, "sh"}, shown...), Dir: r.path, Env: gitEnv(ro), Timeout: r.opts.Timeout})
		if err != nil {
			return Diff{}, execError("git diff --no-index", err)
		}
		parts := bytes.Split(res.Stdout, []byte{0})
		got := map[string][]byte{}
		for i := 0; i+1 < len(parts); i += 2 {
			got[string(parts[i])] = parts[i+1]
		}
		for _, p := range shown {
			f := DiffFile{Path: p, Status: DiffUntracked}
			if sec, ok := got[p]; ok {
				applySection(&f, sec)
				f.Status = DiffUntracked
				f.Additions, f.Deletions = countLines(f.Patch)
			} else {
				f.Truncated = true // cut by the executor's output cap
			}
			out.Files = append(out.Files, f)
		}
	}
	for _, p := range untracked[len(shown):] {
		out.Files = append(out.Files, DiffFile{Path: p, Status: DiffUntracked, Truncated: true})
	}

	// The size cap, over the files in order.
	budget := o.MaxBytes
	for i := range out.Files {
		f := &out.Files[i]
		if len(f.Patch) > budget {
			cut := strings.LastIndexByte(f.Patch[:budget], '\n') + 1
			f.Patch, f.Truncated = f.Patch[:cut], true
		}
		budget -= len(f.Patch)
		if f.Truncated {
			out.Truncated = true
		}
	}
	return out, nil
}

// parseNumstat parses `git diff --numstat -z`: "add\tdel\tpath\0", or for
// a rename "add\tdel\t\0old\0new\0"; binary files count "-".
func parseNumstat(b []byte) ([]DiffFile, error) {
	files := []DiffFile{}
	recs := bytes.Split(b, []byte{0})
	for i := 0; i < len(recs); i++ {
		rec := string(recs[i])
		if rec == "" {
			continue
		}
		f := strings.SplitN(rec, "\t", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("gitops: malformed numstat entry %q", rec)
		}
		d := DiffFile{Status: DiffModified}
		if f[0] == "-" && f[1] == "-" {
			d.Binary = true
		} else {
			a, err1 := strconv.Atoi(f[0])
			r, err2 := strconv.Atoi(f[1])
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("gitops: malformed numstat entry %q", rec)
			}
			d.Additions, d.Deletions = a, r
		}
		if f[2] == "" { // rename: old and new paths follow
			if i+2 >= len(recs) {
				return nil, fmt.Errorf("gitops: malformed numstat rename %q", rec)
			}
			d.OldPath, d.Path, d.Status = string(recs[i+1]), string(recs[i+2]), DiffRenamed
			i += 2
		} else {
			d.Path = f[2]
		}
		files = append(files, d)
	}
	return files, nil
}

// splitPatch splits `git diff -p` output into its files' sections (in
// the order of --numstat: both follow git's diff queue).
func splitPatch(b []byte) [][]byte {
	var out [][]byte
	start := -1
	for i := 0; i < len(b); {
		end := bytes.IndexByte(b[i:], '\n')
		next := len(b)
		if end >= 0 {
			next = i + end + 1
		}
		if bytes.HasPrefix(b[i:], []byte("diff --git ")) {
			if start >= 0 {
				out = append(out, b[start:i])
			}
			start = i
		}
		i = next
	}
	if start >= 0 {
		out = append(out, b[start:])
	}
	return out
}

// applySection sets a file's status, binary flag and patch (its hunks)
// from its section of a patch.
func applySection(f *DiffFile, sec []byte) {
	s := string(sec)
	hunks := strings.Index(s, "\n@@")
	header := s
	if hunks >= 0 {
		header = s[:hunks+1]
		f.Patch = s[hunks+1:]
	}
	for _, l := range strings.Split(header, "\n") {
		switch {
		case strings.HasPrefix(l, "new file mode"):
			if f.Status != DiffRenamed {
				f.Status = DiffAdded
			}
		case strings.HasPrefix(l, "deleted file mode"):
			f.Status = DiffDeleted
		case strings.HasPrefix(l, "Binary files ") || l == "GIT binary patch":
			f.Binary, f.Patch, f.Additions, f.Deletions = true, "", 0, 0
		}
	}
}

// countLines counts a patch's added and removed lines.
func countLines(patch string) (add, del int) {
	for _, l := range strings.Split(patch, "\n") {
		switch {
		case strings.HasPrefix(l, "+"):
			add++
		case strings.HasPrefix(l, "-"):
			del++
		}
	}
	return add, del
}
