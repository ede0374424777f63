package gitops

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/proliferate/proliferate/gateway/protocol"
)

// File kinds in Status.Files.
const (
	KindChanged   = protocol.GitKindChanged
	KindRenamed   = protocol.GitKindRenamed
	KindUnmerged  = protocol.GitKindUnmerged
	KindUntracked = protocol.GitKindUntracked
	KindIgnored   = protocol.GitKindIgnored
)

// FileStatus is one entry of `git status --porcelain=v2` (its wire form is
// the gateway protocol's).
type FileStatus = protocol.GitFileStatus

// Status is a repository's state (its wire form is the gateway
// protocol's).
type Status = protocol.GitStatus

// ParseStatus parses `git status --porcelain=v2 --branch -z` output
// (NUL-terminated records). Probes are left unset.
func ParseStatus(out []byte) (Status, error) {
	st := Status{Files: []FileStatus{}}
	recs := bytes.Split(out, []byte{0})
	for i := 0; i < len(recs); i++ {
		rec := string(recs[i])
		if rec == "" {
			continue
		}
		switch rec[0] {
		case '#':
			if err := parseHeader(&st, rec); err != nil {
				return Status{}, err
			}
		case '1':
			f := strings.SplitN(rec, " ", 9)
			if len(f) != 9 || len(f[1]) != 2 {
				return Status{}, fmt.Errorf("gitops: malformed status entry %q", rec)
			}
			st.Files = append(st.Files, FileStatus{Path: f[8], Kind: KindChanged, Index: f[1][:1], Worktree: f[1][1:]})
		case '2':
			f := strings.SplitN(rec, " ", 10)
			if len(f) != 10 || len(f[1]) != 2 || i+1 >= len(recs) || len(recs[i+1]) == 0 {
				return Status{}, fmt.Errorf("gitops: malformed rename entry %q", rec)
			}
			i++ // with -z the original path is the next record
			st.Files = append(st.Files, FileStatus{Path: f[9], OrigPath: string(recs[i]), Kind: KindRenamed, Index: f[1][:1], Worktree: f[1][1:]})
		case 'u':
			f := strings.SplitN(rec, " ", 11)
			if len(f) != 11 || len(f[1]) != 2 {
				return Status{}, fmt.Errorf("gitops: malformed unmerged entry %q", rec)
			}
			st.Files = append(st.Files, FileStatus{Path: f[10], Kind: KindUnmerged, Index: f[1][:1], Worktree: f[1][1:]})
		case '?', '!':
			if len(rec) < 3 {
				return Status{}, fmt.Errorf("gitops: malformed entry %q", rec)
			}
			kind := KindUntracked
			if rec[0] == '!' {
				kind = KindIgnored
			}
			st.Files = append(st.Files, FileStatus{Path: rec[2:], Kind: kind, Index: rec[:1], Worktree: rec[:1]})
		default:
			return Status{}, fmt.Errorf("gitops: unknown status entry %q", rec)
		}
	}
	st.Clean = len(st.Files) == 0
	return st, nil
}

func parseHeader(st *Status, rec string) error {
	f := strings.Fields(rec)
	if len(f) < 3 {
		return nil // unknown headers are ignored
	}
	switch f[1] {
	case "branch.oid":
		if f[2] != "(initial)" {
			st.Head = f[2]
		}
	case "branch.head":
		if f[2] == "(detached)" {
			st.Detached = true
		} else {
			st.Branch = f[2]
		}
	case "branch.upstream":
		st.Upstream = f[2]
	case "branch.ab":
		if len(f) != 4 {
			return fmt.Errorf("gitops: malformed header %q", rec)
		}
		a, err1 := strconv.Atoi(strings.TrimPrefix(f[2], "+"))
		b, err2 := strconv.Atoi(strings.TrimPrefix(f[3], "-"))
		if err1 != nil || err2 != nil {
			return fmt.Errorf("gitops: malformed header %q", rec)
		}
		st.Ahead, st.Behind = a, b
	}
	return nil
}

// lines splits command output into non-empty trimmed lines.
func lines(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}
