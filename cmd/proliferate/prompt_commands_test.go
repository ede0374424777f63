package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/agent/capabilities"
	"github.com/proliferate/proliferate/internal/agent/prompts"
)

// mentionRE finds `proliferate COMMAND [SUB|SUB…]` in the agent's texts.
var mentionRE = regexp.MustCompile(`proliferate ([a-z][a-z-]*)(?: ([a-z][a-z|-]*))?`)

// Every `proliferate …` command the agent's system prompts (all modes) and
// its guide and instructions mention exists: the real binary answers
// `proliferate COMMAND SUB --help` with success, so the agent is never told
// about a command that does not exist.
func TestEveryCommandThePromptMentionsRuns(t *testing.T) {
	var texts []string
	for _, mode := range []string{prompts.ModeSetup, prompts.ModeCoding, prompts.ModeAutomation} {
		texts = append(texts, prompts.System(mode, prompts.PromptContext{}))
	}
	files, err := capabilities.Write(t.TempDir(), capabilities.CapabilitySpec{SessionType: "coding", ClientType: "web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{files.ActionsGuide, files.Instructions} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(b))
	}
	var cmds []string
	for _, text := range texts {
		for _, m := range mentionRE.FindAllStringSubmatch(text, -1) {
			if m[1] == "on" || m[1] == "cli" { // prose: "Proliferate on Kafka", npx @proliferate/cli
				continue
			}
			subs := strings.Split(m[2], "|")
			for _, s := range subs {
				cmds = append(cmds, strings.TrimSpace(m[1]+" "+s))
			}
		}
	}
	slices.Sort(cmds)
	cmds = slices.Compact(cmds)
	for _, want := range []string{"services list", "services start", "services stop", "services restart", "services logs", "pr create", "actions list"} {
		if !slices.Contains(cmds, want) {
			t.Errorf("the prompt and guide never mention `proliferate %s` (found %v)", want, cmds)
		}
	}
	bin := filepath.Join(t.TempDir(), "proliferate")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, c := range cmds {
		args := append(strings.Fields(c), "--help")
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage: proliferate") {
			t.Errorf("proliferate %s --help: %v\n%s", c, err, out)
		}
	}
	t.Logf("commands the agent is told about: %v", cmds)
}
