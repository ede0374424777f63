// Package sandboxtest is the behavioural suite every sandbox.Provider must
// pass: one contract, proven the same way for the local provider (with and
// without isolation), the simulated provider and cloud providers.
//
// A provider's test calls Run with the features it supports and a
// constructor:
//
//	func TestProviderContract(t *testing.T) {
//		env := sandboxtest.Shared(t) // the pinned OpenCode, when the provider runs it
//		f := sandboxtest.Features{Isolated: true, Targets: sandboxtest.Targets{HiddenPaths: []string{dataDir}}}
//		sandboxtest.Run(t, f, func(t *testing.T) sandbox.Provider {
//			p, err := e2b.New(...) // against its fake
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(p.Close)
//			return p
//		})
//	}
//
// Run calls the constructor once and runs its subtests in order against
// that provider; each also works alone (-run 'TestProviderContract/Exec').
// Every spec has a session id "sbt-<name>-<random>", the type "coding", no
// repositories, a sandbox token and, in Spec.LLM, the scripted LLM of Sim
// (the agent must reach it: a provider whose sandboxes cannot reach the
// host's loopback forwards it); Features.Spec adjusts every spec (a gateway
// URL…). Run terminates the sandboxes it started; the constructor's
// t.Cleanup closes the provider. Workspace files are written and read
// through Exec, so a provider without Executor is checked for its agent's
// state only.
//
// The subtests: Ensure (idempotent and single-flight: concurrent calls for
// one session yield one sandbox, a later call returns the live one, another
// session gets another), Alive, Exec (when the provider is a
// sandbox.Executor: in the workspace, confined to it — absolute dirs, "..",
// symlinks out, missing dirs refused — exit status, stdin, environment,
// timeout, ErrNotFound for an unknown sandbox), Terminal (when it is a
// sandbox.Terminals: a shell in the workspace that echoes, resizes and
// closes), Snapshot (a live snapshot and a pause keep the workspace and the
// agent's conversation; restoring either starts a new sandbox;
// DeleteSnapshot is idempotent and a deleted snapshot's restore fails with
// sandbox.ErrRestoreFailed), Terminate (stops the sandbox and its
// terminals, idempotent, an unknown sandbox is no error), Isolation
// (Features.Isolated: the escape probes of NewEscapeWorld through Exec and
// a terminal) and Limits (Features.Limits: process and memory limits hold
// and other sandboxes stay usable).
//
// Helpers for provider tests live here too: Shared (the pinned OpenCode and
// the scripted LLM), Prompt, AgentBash, AgentClient, ReadTerminal and the
// escape probes (NewEscapeWorld, Probes).
package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Features says what a provider supports beyond the core contract
// (EnsureSandbox, Snapshot, Pause, DeleteSnapshot, Terminate, Alive and an
// OpenCode-compatible agent at AgentURL), which every provider must pass.
// Exec and Terminal run when the provider implements sandbox.Executor and
// sandbox.Terminals.
type Features struct {
	// Isolated: the sandbox contains its processes (namespaces, no host
	// network, no host files). Isolation probes run through Exec and
	// Terminal; Targets adds what they aim at.
	Isolated bool
	Targets  Targets
	// Limits, when set, are the resource limits the provider enforces
	// per sandbox; the Limits subtest checks them. Nil: not checked.
	Limits *Limits
	// Spec, when set, adjusts every spec Run passes to EnsureSandbox.
	Spec func(*sandbox.Spec)
}

// Limits are the per-sandbox resource limits a provider claims.
type Limits struct {
	// Pids is the most processes (and threads) a sandbox may run at
	// once; 0 = not checked.
	Pids int
	// MemoryBytes is the sandbox's memory limit; 0 = not checked.
	MemoryBytes int64
}

// Run runs the behavioural suite against the provider newProvider returns
// (called once).
func Run(t *testing.T, f Features, newProvider func(t *testing.T) sandbox.Provider) {
	t.Helper()
	_, llm := Sim()
	s := &suite{f: f, p: newProvider(t), llm: llm, run: randomHex(3)}
	s.exec, _ = s.p.(sandbox.Executor)
	s.terms, _ = s.p.(sandbox.Terminals)
	t.Cleanup(s.terminateAll)

	t.Run("Ensure", s.testEnsure)
	t.Run("Alive", s.testAlive)
	if s.exec != nil {
		t.Run("Exec", s.testExec)
	}
	if s.terms != nil {
		t.Run("Terminal", s.testTerminal)
	}
	t.Run("Snapshot", s.testSnapshot)
	t.Run("Terminate", s.testTerminate)
	if f.Isolated {
		t.Run("Isolation", s.testIsolation)
	}
	if f.Limits != nil {
		t.Run("Limits", s.testLimits)
	}
}

type suite struct {
	f     Features
	p     sandbox.Provider
	exec  sandbox.Executor
	terms sandbox.Terminals
	llm   sandbox.LLM
	run   string // distinguishes this Run's session ids

	mu      sync.Mutex
	started []sandbox.Sandbox
	specs   map[string]sandbox.Spec // sandbox id → spec
	shared  map[string]sandbox.Sandbox
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// spec is the spec of this Run's session name.
func (s *suite) spec(name string) sandbox.Spec {
	spec := sandbox.Spec{SessionID: "sbt-" + name + "-" + s.run, OrgID: "org-sandboxtest",
		SessionType: "coding", ClientType: "web", LLM: s.llm, SandboxToken: "tok-sandboxtest-" + s.run}
	if s.f.Spec != nil {
		s.f.Spec(&spec)
	}
	return spec
}

// ensure starts (or returns) the spec's sandbox; Run terminates it.
func (s *suite) ensure(t *testing.T, spec sandbox.Spec) sandbox.Sandbox {
	t.Helper()
	sb, err := s.p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatalf("ensure %s: %v", spec.SessionID, err)
	}
	s.track(spec, sb)
	return sb
}

func (s *suite) track(spec sandbox.Spec, sb sandbox.Sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.specs == nil {
		s.specs = map[string]sandbox.Spec{}
	}
	if _, ok := s.specs[sb.ID]; !ok {
		s.specs[sb.ID] = spec
		s.started = append(s.started, sb)
	}
}

// sharedSandbox is the live sandbox of session name, shared by the
// subtests that leave it running (started by the first that needs it).
func (s *suite) sharedSandbox(t *testing.T, name string) sandbox.Sandbox {
	t.Helper()
	s.mu.Lock()
	sb, ok := s.shared[name]
	s.mu.Unlock()
	if ok {
		return sb
	}
	sb = s.ensure(t, s.spec(name))
	s.mu.Lock()
	if s.shared == nil {
		s.shared = map[string]sandbox.Sandbox{}
	}
	s.shared[name] = sb
	s.mu.Unlock()
	return sb
}

func (s *suite) terminateAll() {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sb := range started {
		_ = s.p.Terminate(ctx, s.specs[sb.ID].SessionID, sb.ID)
	}
}

// run runs a command in sb through Exec, failing the test when it cannot
// run.
func (s *suite) run1(t *testing.T, sb sandbox.Sandbox, cmd sandbox.ExecCommand) sandbox.ExecResult {
	t.Helper()
	if cmd.Timeout == 0 {
		cmd.Timeout = time.Minute
	}
	res, err := s.exec.Exec(t.Context(), sb.ID, cmd)
	if err != nil {
		t.Fatalf("exec %q in %s: %v", cmd.Args, sb.ID, err)
	}
	return res
}

// sh runs a shell script in the workspace root and returns its stdout,
// failing on a non-zero exit.
func (s *suite) sh(t *testing.T, sb sandbox.Sandbox, script string, env map[string]string) string {
	t.Helper()
	res := s.run1(t, sb, sandbox.ExecCommand{Args: []string{"sh", "-c", script}, Env: env})
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s%s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

func (s *suite) alive(t *testing.T, sb sandbox.Sandbox) bool {
	t.Helper()
	alive, err := s.p.Alive(t.Context(), sb.ID)
	if err != nil {
		t.Fatalf("alive %s: %v", sb.ID, err)
	}
	return alive
}

func (s *suite) testEnsure(t *testing.T) {
	spec := s.spec("main")
	// Concurrent calls for one session yield one sandbox.
	const n = 4
	var wg sync.WaitGroup
	results := make([]sandbox.Sandbox, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { results[i], errs[i] = s.p.EnsureSandbox(t.Context(), spec) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("ensure %d: %v", i, errs[i])
		}
		s.track(spec, results[i])
	}
	sb := results[0]
	for i := range n {
		if results[i] != sb {
			t.Fatalf("concurrent ensures returned different sandboxes: %+v vs %+v", results[i], sb)
		}
	}
	if sb.ID == "" || sb.AgentURL == "" || sb.Workspace == "" {
		t.Fatalf("sandbox %+v lacks an id, agent URL or workspace", sb)
	}
	s.mu.Lock()
	if s.shared == nil {
		s.shared = map[string]sandbox.Sandbox{}
	}
	s.shared["main"] = sb
	s.mu.Unlock()

	// A later call returns the live sandbox; its agent answers.
	again, err := s.p.EnsureSandbox(t.Context(), spec)
	if err != nil || again != sb {
		t.Fatalf("ensure of a live sandbox: %+v %v, want %+v", again, err, sb)
	}
	if _, err := AgentClient(t, sb).Health(t.Context()); err != nil {
		t.Fatalf("agent health: %v", err)
	}
	// Another session gets another sandbox.
	other := s.sharedSandbox(t, "other")
	if other.ID == sb.ID {
		t.Fatalf("two sessions share sandbox %s", sb.ID)
	}
}

func (s *suite) testAlive(t *testing.T) {
	sb := s.sharedSandbox(t, "main")
	if !s.alive(t, sb) {
		t.Fatal("a running sandbox is not alive")
	}
	if alive := s.alive(t, sandbox.Sandbox{ID: "sbt-never-" + s.run}); alive {
		t.Fatal("an unknown sandbox is alive")
	}
}

func (s *suite) testExec(t *testing.T) {
	sb := s.sharedSandbox(t, "main")
	ctx := t.Context()
	// Files written by one command are there for the next, in the
	// workspace root and its subdirectories.
	s.sh(t, sb, `mkdir -p sub/deeper && printf root > mark.txt && printf sub > sub/deeper/mark.txt && ln -sfn sub/deeper inside && ln -sfn / escape`, nil)
	for dir, want := range map[string]string{"": "root", "sub/deeper": "sub", "sub/deeper/": "sub", "inside": "sub"} {
		res := s.run1(t, sb, sandbox.ExecCommand{Args: []string{"cat", "mark.txt"}, Dir: dir})
		if res.ExitCode != 0 || string(res.Stdout) != want {
			t.Errorf("cat mark.txt in %q = %q (exit %d, %s), want %q", dir, res.Stdout, res.ExitCode, res.Stderr, want)
		}
	}
	// Confined: absolute dirs, dot-dot and symlinks leading out are
	// refused, as are missing dirs and files.
	for _, dir := range []string{"/", "/tmp", "..", "sub/../..", "escape", "escape/", "escape/etc", "missing", "mark.txt"} {
		if res, err := s.exec.Exec(ctx, sb.ID, sandbox.ExecCommand{Args: []string{"pwd"}, Dir: dir}); err == nil {
			t.Errorf("Exec in %q ran (%q), want refused", dir, res.Stdout)
		}
	}
	// Exit status, stdin, environment, stderr.
	res := s.run1(t, sb, sandbox.ExecCommand{Args: []string{"sh", "-c", `cat; printf "$GREETING"; echo err >&2; exit 3`},
		Stdin: []byte("in|"), Env: map[string]string{"GREETING": "hi"}})
	if res.ExitCode != 3 || string(res.Stdout) != "in|hi" || string(res.Stderr) != "err\n" {
		t.Fatalf("exec result %+v, want exit 3, stdout in|hi, stderr err", res)
	}
	// The timeout ends the command and what it started.
	if _, err := s.exec.Exec(ctx, sb.ID, sandbox.ExecCommand{Args: []string{"sh", "-c", "sleep 60 & sleep 60"}, Timeout: 300 * time.Millisecond}); err == nil {
		t.Fatal("a timed-out command reported success")
	}
	if _, err := s.exec.Exec(ctx, "sbt-unknown-"+s.run, sandbox.ExecCommand{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("exec in an unknown sandbox: %v, want ErrNotFound", err)
	}
	if _, err := s.exec.Exec(ctx, sb.ID, sandbox.ExecCommand{}); err == nil {
		t.Fatal("an empty command ran")
	}
	s.sh(t, sb, `rm -rf sub inside escape mark.txt`, nil)
}

func (s *suite) testTerminal(t *testing.T) {
	sb := s.sharedSandbox(t, "main")
	spec := s.spec("main")
	if _, err := s.terms.OpenTerminal(t.Context(), spec.SessionID, "sbt-unknown-"+s.run, 80, 24, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("terminal in an unknown sandbox: %v, want ErrNotFound", err)
	}
	term, err := s.terms.OpenTerminal(t.Context(), spec.SessionID, sb.ID, 80, 24, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := ReadTerminal(term)
	TypeLine(t, term, "echo $((6*7))")
	out.WaitFor(t, "\r42\r\n")

	// The shell starts in the workspace.
	TypeLine(t, term, "printf terminal > from-terminal.txt && echo written-$((1+1))")
	out.WaitFor(t, "\rwritten-2\r\n")
	if s.exec != nil {
		if got := s.sh(t, sb, "cat from-terminal.txt && rm from-terminal.txt", nil); got != "terminal" {
			t.Fatalf("the terminal's file in the workspace: %q", got)
		}
	}

	TypeLine(t, term, "stty size")
	out.WaitFor(t, "\r24 80\r\n")
	if err := term.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	TypeLine(t, term, "stty size")
	out.WaitFor(t, "\r40 120\r\n")

	if err := term.Close(); err != nil {
		t.Fatal(err)
	}
	if err := term.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	<-out.Done
	if !errors.Is(out.Err(), io.EOF) {
		t.Fatalf("read after close: %v, want io.EOF", out.Err())
	}
	if _, err := term.Write([]byte("echo\n")); err == nil {
		t.Fatal("write after close succeeded")
	}
}

// conversation is one exchange with the agent, to find again after a
// restore.
type conversation struct {
	session        string
	prompt, answer string
}

func (s *suite) converse(t *testing.T, sb sandbox.Sandbox, text string) conversation {
	t.Helper()
	msgs := Prompt(t, sb, "hello", text)
	if len(msgs) != 2 || msgs[0].Text() != text || msgs[1].Info.Role != "assistant" || msgs[1].Text() == "" {
		t.Fatalf("conversation %+v, want the prompt and an answer", msgs)
	}
	return conversation{session: msgs[0].Info.SessionID, prompt: text, answer: msgs[1].Text()}
}

// hasConversation checks that sb's agent has the conversation c.
func (s *suite) hasConversation(t *testing.T, sb sandbox.Sandbox, c conversation, when string) {
	t.Helper()
	got, err := AgentClient(t, sb).Messages(t.Context(), c.session)
	if err != nil {
		t.Fatalf("history %s: %v", when, err)
	}
	if len(got) != 2 || got[0].Text() != c.prompt || got[1].Text() != c.answer {
		t.Fatalf("history %s: %+v, want %q and %q", when, got, c.prompt, c.answer)
	}
}

// workFile is the file the snapshot tests keep in the workspace.
const workFile = "work/in-progress.txt"

func (s *suite) hasWork(t *testing.T, sb sandbox.Sandbox, want, when string) {
	t.Helper()
	if s.exec == nil {
		return // the workspace is reachable only through Exec
	}
	if got := s.sh(t, sb, "cat "+workFile, nil); got != want {
		t.Fatalf("%s %s = %q, want %q", workFile, when, got, want)
	}
}

func (s *suite) testSnapshot(t *testing.T) {
	ctx := t.Context()
	spec := s.spec("snap")
	sb := s.ensure(t, spec)
	if s.exec != nil {
		s.sh(t, sb, `mkdir -p work && printf "$WORK" > `+workFile, map[string]string{"WORK": "before the pause"})
	}
	c := s.converse(t, sb, "Say hello, please.")

	// A live snapshot keeps the sandbox running.
	live, err := s.p.Snapshot(ctx, spec.SessionID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if live.ID == "" {
		t.Fatal("snapshot without an id")
	}
	if !s.alive(t, sb) {
		t.Fatal("a snapshot stopped the sandbox")
	}
	if _, err := s.p.Snapshot(ctx, spec.SessionID, "sbt-unknown-"+s.run); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("snapshot of an unknown sandbox: %v, want ErrNotFound", err)
	}

	// Pause = snapshot + stop.
	paused, err := s.p.Pause(ctx, spec.SessionID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if paused.ID == "" || paused.ID == live.ID {
		t.Fatalf("pause snapshot %q (live snapshot %q)", paused.ID, live.ID)
	}
	if s.alive(t, sb) {
		t.Fatal("a paused sandbox is alive")
	}

	// Resume from the pause: a new sandbox with the work and the
	// conversation.
	resume := spec
	resume.SnapshotID = paused.ID
	sb2 := s.ensure(t, resume)
	if sb2.ID == sb.ID {
		t.Fatal("the resumed sandbox reuses the paused sandbox's id")
	}
	s.hasWork(t, sb2, "before the pause", "after resume")
	s.hasConversation(t, sb2, c, "after resume")
	if err := s.p.Terminate(ctx, spec.SessionID, sb2.ID); err != nil {
		t.Fatal(err)
	}

	// The live snapshot restores too.
	resume.SnapshotID = live.ID
	sb3 := s.ensure(t, resume)
	s.hasWork(t, sb3, "before the pause", "after restoring a live snapshot")
	s.hasConversation(t, sb3, c, "after restoring a live snapshot")
	if err := s.p.Terminate(ctx, spec.SessionID, sb3.ID); err != nil {
		t.Fatal(err)
	}

	// DeleteSnapshot is idempotent; a deleted snapshot cannot be restored.
	for i := range 2 {
		if err := s.p.DeleteSnapshot(ctx, live.ID); err != nil {
			t.Fatalf("delete #%d: %v", i+1, err)
		}
	}
	for _, id := range []string{"snap-never-" + s.run, "", "../../etc/passwd", "a/b?c#d"} {
		if err := s.p.DeleteSnapshot(ctx, id); err != nil {
			t.Fatalf("delete of the unknown snapshot %q: %v", id, err)
		}
	}
	gone := s.spec("snap-gone")
	gone.SnapshotID = live.ID
	if sb4, err := s.p.EnsureSandbox(ctx, gone); !errors.Is(err, sandbox.ErrRestoreFailed) {
		if err == nil {
			s.track(gone, sb4)
		}
		t.Fatalf("restore of a deleted snapshot: %v, want ErrRestoreFailed", err)
	}
	if err := s.p.DeleteSnapshot(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) testTerminate(t *testing.T) {
	ctx := t.Context()
	spec := s.spec("term")
	sb := s.ensure(t, spec)
	var out *TermReader
	if s.terms != nil {
		term, err := s.terms.OpenTerminal(ctx, spec.SessionID, sb.ID, 80, 24, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer term.Close()
		out = ReadTerminal(term)
		TypeLine(t, term, "echo shell-up")
		out.WaitFor(t, "\rshell-up\r\n")
	}
	if err := s.p.Terminate(ctx, spec.SessionID, sb.ID); err != nil {
		t.Fatal(err)
	}
	if s.alive(t, sb) {
		t.Fatal("a terminated sandbox is alive")
	}
	if out != nil {
		<-out.Done // the terminal ended with its sandbox
		if _, err := s.terms.OpenTerminal(ctx, spec.SessionID, sb.ID, 80, 24, nil); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("terminal in a terminated sandbox: %v, want ErrNotFound", err)
		}
	}
	if s.exec != nil {
		if _, err := s.exec.Exec(ctx, sb.ID, sandbox.ExecCommand{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("exec in a terminated sandbox: %v, want ErrNotFound", err)
		}
	}
	if err := s.p.Terminate(ctx, spec.SessionID, sb.ID); err != nil {
		t.Fatalf("second terminate: %v", err)
	}
	if err := s.p.Terminate(ctx, "sbt-unknown-"+s.run, "sbt-unknown-"+s.run); err != nil {
		t.Fatalf("terminate of an unknown sandbox: %v", err)
	}
}

// probeFile is where the isolation test puts the probe script.
const probeFile = ".sandboxtest-probe.sh"

func (s *suite) testIsolation(t *testing.T) {
	if s.exec == nil {
		t.Fatal("Features.Isolated needs an Executor to probe from")
	}
	// Another session's sandbox with a secret in its workspace.
	victim := s.sharedSandbox(t, "other")
	secret := "victim-secret-" + randomHex(6)
	s.sh(t, victim, `printf "$S" > secret.txt`, map[string]string{"S": secret})
	tg := s.f.Targets
	tg.OtherFile, tg.OtherSecret = strings.TrimSuffix(victim.Workspace, "/")+"/secret.txt", secret
	w := NewEscapeWorld(t, tg)

	sb := s.sharedSandbox(t, "main")
	s.run1(t, sb, sandbox.ExecCommand{Args: []string{"sh", "-c", "cat > " + probeFile}, Stdin: []byte(w.Script(""))})
	t.Run("exec", func(t *testing.T) {
		res := s.run1(t, sb, sandbox.ExecCommand{Args: []string{"bash", probeFile}})
		if res.ExitCode != 0 {
			t.Fatalf("probe script: exit %d: %s", res.ExitCode, res.Stderr)
		}
		w.Check(t, "exec", string(res.Stdout))
	})
	if s.terms != nil {
		t.Run("terminal", func(t *testing.T) {
			term, err := s.terms.OpenTerminal(t.Context(), s.spec("main").SessionID, sb.ID, 200, 50, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer term.Close()
			out := ReadTerminal(term)
			TypeLine(t, term, "bash "+probeFile+" 2>&1")
			w.Check(t, "terminal", out.WaitFor(t, "probe-end-42"))
		})
	}
	s.sh(t, sb, "rm -f "+probeFile, nil)
	if got := s.sh(t, victim, "cat secret.txt", nil); got != secret || !s.alive(t, victim) {
		t.Fatalf("the victim's secret %q, alive %v", got, s.alive(t, victim))
	}
}

// testLimits is the hook for providers with resource limits (a sandbox of
// its own, as hitting a limit may end it): a sandbox cannot run twice
// Limits.Pids processes or hold twice Limits.MemoryBytes, and other
// sandboxes stay usable meanwhile.
func (s *suite) testLimits(t *testing.T) {
	if s.exec == nil {
		t.Fatal("Features.Limits needs an Executor to probe from")
	}
	l := s.f.Limits
	sb := s.ensure(t, s.spec("limits"))
	if l.Pids > 0 {
		t.Run("pids", func(t *testing.T) {
			// Start twice the limit of sleeping processes; count how many ran.
			script := fmt.Sprintf(`n=0; i=0; while [ $i -lt %d ]; do i=$((i+1)); if sleep 120 & then n=$((n+1)); else break; fi; done
echo started=$n; kill $(jobs -p) 2>/dev/null; exit 0`, 2*l.Pids)
			res, err := s.exec.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"sh", "-c", script}, Timeout: 2 * time.Minute})
			if err == nil && strings.Contains(string(res.Stdout), fmt.Sprintf("started=%d\n", 2*l.Pids)) {
				t.Fatalf("%d processes started under a limit of %d: %s", 2*l.Pids, l.Pids, res.Stdout)
			}
		})
	}
	if l.MemoryBytes > 0 {
		t.Run("memory", func(t *testing.T) {
			// tail keeps a line of twice the limit in memory.
			script := fmt.Sprintf(`head -c %d /dev/zero | tail -n 1 >/dev/null && echo survived`, 2*l.MemoryBytes)
			res, err := s.exec.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"sh", "-c", script}, Timeout: 2 * time.Minute})
			if err == nil && res.ExitCode == 0 {
				t.Fatalf("a process used twice the memory limit of %d bytes: %s", l.MemoryBytes, res.Stdout)
			}
		})
	}
	// Other sandboxes are unaffected.
	main := s.sharedSandbox(t, "main")
	if got := s.sh(t, main, "echo ok", nil); got != "ok\n" || !s.alive(t, main) {
		t.Fatalf("another sandbox after the limits: %q, alive %v", got, s.alive(t, main))
	}
	if err := s.p.Terminate(t.Context(), s.spec("limits").SessionID, sb.ID); err != nil {
		t.Fatal(err)
	}
}
