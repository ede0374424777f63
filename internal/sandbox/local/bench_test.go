package local_test

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/testenv"
)

// TestMain removes the benchmarks' generated workspace and the CLI built
// for the tests (sandboxtest.CLI) after the run.
func TestMain(m *testing.M) {
	testenv.AtExit(func() {
		if benchRoot != "" {
			os.RemoveAll(benchRoot)
		}
	})
	testenv.Main(m)
}

// The benchmark workspace, generated once per run: a git repository of
// ~3,000 files, ~40 MB with its .git: source-like text and a few
// incompressible binary blobs.
var (
	benchOnce  sync.Once
	benchRoot  string
	benchWS    string // the workspace (repo at its root)
	benchAgent string // an agent database directory (opencode.db + -wal)
	benchBytes int64  // bytes of regular files in benchWS
	benchErr   error
)

const (
	benchSourceFiles = 2990
	benchBlobs       = 4
	benchBlobSize    = 1 << 20 * 3 / 2 // 1.5 MB each
)

var words = strings.Fields(`func return if else for range var const type struct interface map chan go defer
	err nil ctx context string int int64 bool error byte slice len append make new select case switch
	package import fmt errors strings time sync http json Request Response Handler Server Client Config
	user session org run trigger event snapshot sandbox workspace token provider store query row rows`)

// sourceFile returns ~n bytes of Go-like text.
func sourceFile(r *rand.Rand, n int) []byte {
	var b strings.Builder
	b.WriteString("package gen\n\n")
	depth := 0
	for b.Len() < n {
		b.WriteString(strings.Repeat("\t", depth))
		for range 3 + r.IntN(8) {
			b.WriteString(words[r.IntN(len(words))])
			if r.IntN(4) == 0 {
				fmt.Fprintf(&b, "%d", r.IntN(1000))
			}
			b.WriteByte(' ')
		}
		switch r.IntN(6) {
		case 0:
			b.WriteString("{\n")
			depth = min(depth+1, 5)
		case 1:
			if depth > 0 {
				depth--
			}
			b.WriteString("}\n")
		default:
			b.WriteString("\n")
		}
	}
	return []byte(b.String())
}

func benchWorkspace(b *testing.B) {
	b.Helper()
	benchOnce.Do(func() { benchErr = generateBenchWorkspace() })
	if benchErr != nil {
		b.Fatal(benchErr)
	}
}

func generateBenchWorkspace() error {
	root, err := os.MkdirTemp("", "local-bench-")
	if err != nil {
		return err
	}
	benchRoot = root
	benchWS = filepath.Join(root, "workspace")
	benchAgent = filepath.Join(root, "agent")
	r := rand.New(rand.NewPCG(7, 7))
	for i := range benchSourceFiles {
		p := filepath.Join(benchWS, fmt.Sprintf("pkg%02d", i%60), fmt.Sprintf("sub%d", i%7), fmt.Sprintf("file%04d.go", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		// Sizes spread from 1 KB to 12 KB (mean ~6.5 KB).
		if err := os.WriteFile(p, sourceFile(r, 1024+r.IntN(11<<10)), 0o644); err != nil {
			return err
		}
	}
	blob := make([]byte, benchBlobSize)
	for i := range benchBlobs {
		for j := range blob {
			blob[j] = byte(r.Uint32())
		}
		if err := os.WriteFile(filepath.Join(benchWS, fmt.Sprintf("asset%d.bin", i)), blob, 0o644); err != nil {
			return err
		}
	}
	for _, args := range [][]string{{"init", "--quiet", "--initial-branch=main"}, {"add", "."}, {"commit", "--quiet", "-m", "bench"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = benchWS
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@b", "GIT_COMMITTER_NAME=b",
			"GIT_COMMITTER_EMAIL=b@b", "GIT_CONFIG_NOSYSTEM=1", "HOME="+root)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, out)
		}
	}
	// A conversation-sized agent database (opaque here: only copied).
	if err := os.MkdirAll(benchAgent, 0o700); err != nil {
		return err
	}
	for name, size := range map[string]int{"opencode.db": 256 << 10, "opencode.db-wal": 512 << 10} {
		if err := os.WriteFile(filepath.Join(benchAgent, name), sourceFile(r, size), 0o600); err != nil {
			return err
		}
	}
	return filepath.WalkDir(benchWS, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			benchBytes += info.Size()
		}
		return nil
	})
}

// BenchmarkSnapshot writes a snapshot of the workspace (local) and, as the
// baseline, a plain `tar czf` of the same tree. MB/s is of workspace bytes.
func BenchmarkSnapshot(b *testing.B) {
	benchWorkspace(b)
	b.Run("local", func(b *testing.B) {
		dest := filepath.Join(b.TempDir(), "snap.tar.gz")
		b.SetBytes(benchBytes)
		var size int64
		for b.Loop() {
			n, err := local.WriteSnapshotFile(context.Background(), "sess-bench", benchWS, benchAgent, dest)
			if err != nil {
				b.Fatal(err)
			}
			size = n
		}
		b.ReportMetric(float64(size), "bytes/snapshot")
		b.ReportMetric(float64(benchBytes), "workspace-bytes")
	})
	b.Run("baseline", func(b *testing.B) {
		dest := filepath.Join(b.TempDir(), "snap.tar.gz")
		b.SetBytes(benchBytes)
		for b.Loop() {
			if out, err := exec.Command("tar", "czf", dest, "-C", benchWS, ".").CombinedOutput(); err != nil {
				b.Fatalf("tar czf: %v: %s", err, out)
			}
		}
		st, err := os.Stat(dest)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.Size()), "bytes/snapshot")
	})
}

// BenchmarkRestore replaces a session's workspace with a snapshot's
// (local, as EnsureSandbox does before starting the agent) and, as the
// baseline, removes a directory and `tar xzf`s a plain tarball of the same
// tree into it.
func BenchmarkRestore(b *testing.B) {
	benchWorkspace(b)
	b.Run("local", func(b *testing.B) {
		p, err := local.New(local.Options{DataDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		if _, err := local.WriteSnapshotFile(context.Background(), "sess-bench", benchWS, benchAgent, p.SnapshotPath("snap_bench")); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(benchBytes)
		for b.Loop() {
			if err := p.RestoreSnapshot("snap_bench", "sess-bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline", func(b *testing.B) {
		dir := b.TempDir()
		tarball := filepath.Join(dir, "snap.tar.gz")
		if out, err := exec.Command("tar", "czf", tarball, "-C", benchWS, ".").CombinedOutput(); err != nil {
			b.Fatalf("tar czf: %v: %s", err, out)
		}
		target := filepath.Join(dir, "workspace")
		b.SetBytes(benchBytes)
		for b.Loop() {
			if err := os.RemoveAll(target); err != nil {
				b.Fatal(err)
			}
			if err := os.Mkdir(target, 0o755); err != nil {
				b.Fatal(err)
			}
			if out, err := exec.Command("tar", "xzf", tarball, "-C", target).CombinedOutput(); err != nil {
				b.Fatalf("tar xzf: %v: %s", err, out)
			}
		}
	})
}

// BenchmarkResume is a paused session's resume: restore the snapshot and
// start the agent until it answers (EnsureSandbox), then terminate. bwrap is
// the isolated sandbox as the gateway runs it (channels, egress proxy,
// seccomp, cgroup limits); the baseline is the same without isolation.
func BenchmarkResume(b *testing.B) {
	benchWorkspace(b)
	e := setup(b)
	for _, mode := range benchModes {
		b.Run(mode.name, func(b *testing.B) {
			p := mode.provider(b, e)
			// No agent database: the generated one is not SQLite.
			noAgent := filepath.Join(benchRoot, "no-agent")
			if _, err := local.WriteSnapshotFile(context.Background(), "sess-bench", benchWS, noAgent, p.SnapshotPath("snap_bench")); err != nil {
				b.Fatal(err)
			}
			spec := sandbox.Spec{SessionID: "sess-bench", SessionType: "coding", ClientType: "web", LLM: e.llm, SnapshotID: "snap_bench",
				GatewayURL: "http://127.0.0.1:9", SandboxToken: "tok"}
			for b.Loop() {
				sb, err := p.EnsureSandbox(context.Background(), spec)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := p.Terminate(context.Background(), spec.SessionID, sb.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// benchModes are the provider set-ups the start-up benchmarks compare: the
// host-process provider (the baseline) and the isolated one with the
// gateway's default limits.
var benchModes = []struct {
	name     string
	provider func(b *testing.B, e env) *local.Provider
}{
	{"baseline", func(b *testing.B, e env) *local.Provider {
		return benchProvider(b, e, local.IsolationNone, local.Limits{})
	}},
	{"bwrap", func(b *testing.B, e env) *local.Provider {
		return benchProvider(b, e, local.IsolationBwrap, local.Limits{MemoryBytes: 2 << 30, Pids: 512, CPUPercent: 200})
	}},
}

func benchProvider(b *testing.B, e env, isolation string, limits local.Limits) *local.Provider {
	p, err := local.New(local.Options{DataDir: b.TempDir(), OpenCodeBin: e.tools.Binary, PluginDir: e.tools.PluginDir,
		Isolation: isolation, Limits: limits})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

// BenchmarkColdStart is a new session's sandbox with an empty workspace:
// EnsureSandbox until the agent answers, then terminate; bwrap against the
// baseline without isolation (benchModes).
func BenchmarkColdStart(b *testing.B) {
	e := setup(b)
	for _, mode := range benchModes {
		b.Run(mode.name, func(b *testing.B) {
			p := mode.provider(b, e)
			spec := sandbox.Spec{SessionID: "sess-cold", SessionType: "coding", ClientType: "web", LLM: e.llm,
				GatewayURL: "http://127.0.0.1:9", SandboxToken: "tok"}
			for b.Loop() {
				sb, err := p.EnsureSandbox(context.Background(), spec)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := p.Terminate(context.Background(), spec.SessionID, sb.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
