package prompts_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/agent/capabilities"
	"github.com/proliferate/proliferate/internal/agent/prompts"
)

func TestModeSelection(t *testing.T) {
	cases := []struct{ sessionType, clientType, want string }{
		{"setup", "web", prompts.ModeSetup},
		{"setup", "automation", prompts.ModeSetup},
		{"automation", "automation", prompts.ModeAutomation},
		{"coding", "automation", prompts.ModeAutomation},
		{"coding", "web", prompts.ModeCoding},
		{"coding", "slack", prompts.ModeCoding},
	}
	for _, c := range cases {
		if got := prompts.Mode(c.sessionType, c.clientType); got != c.want {
			t.Errorf("Mode(%s, %s) = %s, want %s", c.sessionType, c.clientType, got, c.want)
		}
	}
}

func TestPromptsReferenceOnlyTheirModesTools(t *testing.T) {
	ctx := prompts.PromptContext{Repos: []string{"api", "web"}, RunID: "run-9", CompletionID: "cmp-9",
		AutomationName: "Nightly triage", Instructions: "Label every issue."}
	setup := prompts.System(prompts.ModeSetup, ctx)
	coding := prompts.System(prompts.ModeCoding, ctx)
	auto := prompts.System(prompts.ModeAutomation, ctx)

	for name, p := range map[string]string{"setup": setup, "coding": coding, "automation": auto} {
		for _, want := range []string{"Proliferate", "proliferate actions", "npx @proliferate/cli", "`api`", "`web`", "Label every issue."} {
			if !strings.Contains(p, want) {
				t.Errorf("%s prompt lacks %q", name, want)
			}
		}
	}
	for _, want := range []string{"save_service_commands", "save_snapshot", "request_env_variables", "Do NOT change", "Done — Save Snapshot"} {
		if !strings.Contains(setup, want) {
			t.Errorf("setup prompt lacks %q", want)
		}
	}
	for name, p := range map[string]string{"setup": setup, "coding": coding} {
		if strings.Contains(p, "automation_complete") || strings.Contains(p, "run-9") {
			t.Errorf("%s prompt mentions the automation completion", name)
		}
	}
	if strings.Contains(coding, "save_service_commands") || strings.Contains(auto, "save_service_commands") {
		t.Error("a non-setup prompt mentions save_service_commands")
	}
	// Automation extends coding and carries the ids as "key: value" lines.
	if !strings.HasPrefix(auto, strings.TrimSuffix(coding, "\n## Additional instructions\n\nLabel every issue.\n")) {
		t.Error("the automation prompt does not extend the coding prompt")
	}
	for _, want := range []string{"automation_complete", "MUST", "\nrun_id: run-9\n", "\ncompletion_id: cmp-9\n", "needs_human", "Nightly triage"} {
		if !strings.Contains(auto, want) {
			t.Errorf("automation prompt lacks %q", want)
		}
	}
}

func TestCustomPromptKeepsModeCriticalInstructions(t *testing.T) {
	ctx := prompts.PromptContext{RunID: "run-1", CompletionID: "cmp-1"}
	got := prompts.Resolve("Only fix typos.", prompts.ModeAutomation, ctx)
	if !strings.HasPrefix(got, "Only fix typos.") || !strings.Contains(got, "run_id: run-1") || !strings.Contains(got, "automation_complete") {
		t.Fatalf("custom automation prompt lost the completion instructions:\n%s", got)
	}
	if got := prompts.Resolve("Be brief.", prompts.ModeSetup, ctx); !strings.Contains(got, "save_snapshot") {
		t.Fatalf("custom setup prompt lost the snapshot instruction:\n%s", got)
	}
	if got := prompts.Resolve("Be brief.", prompts.ModeCoding, ctx); strings.TrimSpace(got) != "Be brief." {
		t.Fatalf("custom coding prompt %q", got)
	}
	if got := prompts.Resolve("  ", prompts.ModeCoding, ctx); got != prompts.System(prompts.ModeCoding, ctx) {
		t.Fatal("a blank custom prompt did not fall back to the mode's prompt")
	}
}

// Coding and automation prompts tell the agent how to push and open a pull
// request with the commands that exist (cmd/proliferate's git-credential
// and pr; their usage is tested there).
func TestPromptsTellHowToOpenAPullRequest(t *testing.T) {
	for _, mode := range []string{prompts.ModeCoding, prompts.ModeAutomation} {
		p := prompts.System(mode, prompts.PromptContext{})
		for _, want := range []string{"git push -u origin BRANCH", "proliferate pr create --title", "never\n  ask for a token"} {
			if !strings.Contains(p, want) {
				t.Errorf("%s prompt lacks %q", mode, want)
			}
		}
	}
}

// Every mode's prompt, custom or not, names what the session works on: its
// repositories, its configuration and (automation) the automation.
func TestPromptsNameTheSessionsReposConfigurationAndAutomation(t *testing.T) {
	ctx := prompts.PromptContext{Repos: []string{"api", "web"}, RepoNames: []string{"acme/api", "acme/web"},
		ConfigurationName: "Acme stack", AutomationName: "Nightly triage", RunID: "run-1", CompletionID: "cmp-1"}
	for _, mode := range []string{prompts.ModeSetup, prompts.ModeCoding, prompts.ModeAutomation} {
		for _, custom := range []string{"", "Only fix typos."} {
			got := prompts.Resolve(custom, mode, ctx)
			want := []string{"`api` (acme/api)", "`web` (acme/web)", `"Acme stack"`}
			if mode == prompts.ModeAutomation {
				want = append(want, `"Nightly triage"`, "run_id: run-1")
			}
			if custom != "" && !strings.HasPrefix(got, custom) {
				t.Errorf("%s: the custom prompt does not lead:\n%s", mode, got)
			}
			for _, w := range want {
				if !strings.Contains(got, w) {
					t.Errorf("%s (custom %q) lacks %q:\n%s", mode, custom, w, got)
				}
			}
		}
	}
	one := prompts.System(prompts.ModeCoding, prompts.PromptContext{Repos: []string{"."}, RepoNames: []string{"acme/api"}})
	if !strings.Contains(one, "The repository (acme/api) is checked out at `.`") {
		t.Errorf("single repo:\n%s", one)
	}
}

// Every platform tool a mode's prompt names is a tool that mode's sessions
// have, and the coding and automation prompts describe verify (relative
// paths, the limits) as the tool takes it.
func TestPromptsNameOnlyToolsTheModeHas(t *testing.T) {
	ctx := prompts.PromptContext{Repos: []string{"."}, RunID: "r", CompletionID: "c"}
	for _, m := range []struct{ mode, sessionType, clientType string }{
		{prompts.ModeSetup, "setup", "web"}, {prompts.ModeCoding, "coding", "web"}, {prompts.ModeAutomation, "automation", "automation"},
	} {
		p := prompts.System(m.mode, ctx)
		have := capabilities.ToolsFor(m.sessionType, m.clientType)
		for _, tool := range capabilities.AllTools() {
			if regexp.MustCompile(`\b`+tool+`\b`).MatchString(p) && !slices.Contains(have, tool) {
				t.Errorf("%s prompt names %s, which its sessions do not have", m.mode, tool)
			}
		}
	}
	for _, mode := range []string{prompts.ModeCoding, prompts.ModeAutomation} {
		p := prompts.System(mode, ctx)
		for _, want := range []string{"call verify", "relative to the", "at most 10 files"} {
			if !strings.Contains(p, want) {
				t.Errorf("%s prompt lacks %q", mode, want)
			}
		}
	}
}
