package local_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// BenchmarkPrebuiltBoot is a new session of a configuration in the
// isolated (bwrap) sandbox until its agent answers, then terminated:
// "snapshot" boots from the configuration's snapshot (the version-key
// check with git ls-remote, then the restore), "baseline" clones the
// repository (the generated ~40 MB workspace, over git's file:// pack
// protocol) as a session without a usable snapshot does. Both end with the
// same repository checked out; a real configuration snapshot also carries
// the installed dependencies a fresh clone would still have to install, so
// this ratio is the floor of what a prebuilt configuration saves.
func BenchmarkPrebuiltBoot(b *testing.B) {
	benchWorkspace(b)
	e := setup(b)
	repos := []sandbox.Repo{{CloneURL: "file://" + benchWS, WorkspacePath: "."}}
	boot := func(b *testing.B, p *local.Provider, spec sandbox.Spec, before func()) {
		for b.Loop() {
			if before != nil {
				before()
			}
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
	}
	spec := sandbox.Spec{SessionID: "sess-prebuilt", SessionType: "coding", ClientType: "web", LLM: e.llm,
		GatewayURL: "http://127.0.0.1:9", SandboxToken: "tok", Repos: repos}
	b.Run("snapshot", func(b *testing.B) {
		p := benchModes[1].provider(b, e)
		// The setup session's snapshot: the cloned repository, no agent
		// state of this session.
		noAgent := filepath.Join(benchRoot, "no-agent")
		if _, err := local.WriteSnapshotFile(context.Background(), "sess-setup", benchWS, noAgent, p.SnapshotPath("snap_cfg")); err != nil {
			b.Fatal(err)
		}
		s := spec
		s.SnapshotID = "snap_cfg"
		b.SetBytes(benchBytes)
		boot(b, p, s, func() {
			if _, err := prebuilds.RemoteRevs(context.Background(), repos); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("baseline", func(b *testing.B) {
		p := benchModes[1].provider(b, e)
		b.SetBytes(benchBytes)
		boot(b, p, spec, nil)
	})
}
