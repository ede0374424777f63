// Package prompts builds the coding agent's system prompt per session mode,
// following the agent contract:
//
//   - setup: get the repositories running without editing source code,
//     configure services (save_service_commands), ask for missing secrets
//     (request_env_variables) and finish with save_snapshot;
//   - coding: implement what the user asks and upload the evidence that it
//     works (verify);
//   - automation: the coding prompt plus a mandatory automation_complete
//     call carrying the run id and completion id.
//
// Mode selects the mode from the session (setup wins, then automation by
// session or client type, else coding). Resolve applies a session's custom
// system prompt but, unlike the original system (where a custom
// prompt replaced everything), still appends the mode-critical instructions, so
// an automation session with a custom prompt still reports its outcome.
package prompts

import (
	"fmt"
	"strings"
)

// Modes.
const (
	ModeSetup      = "setup"
	ModeCoding     = "coding"
	ModeAutomation = "automation"
)

// PromptContext carries what a prompt may mention.
type PromptContext struct {
	// Repos are workspace paths of the checked-out repositories.
	Repos []string
	// RepoNames optionally name the repositories of Repos (owner/name), in
	// the same order.
	RepoNames []string
	// ConfigurationName names the session's configuration.
	ConfigurationName string
	// AutomationName, RunID and CompletionID (automation sessions): the
	// agent must call automation_complete with run_id and completion_id.
	AutomationName string
	RunID          string
	CompletionID   string
	// Instructions are extra instructions (automation's agent_instructions
	// or the configuration's), appended verbatim.
	Instructions string
}

// Mode returns the prompt mode of a session.
func Mode(sessionType, clientType string) string {
	switch {
	case sessionType == "setup":
		return ModeSetup
	case sessionType == "automation" || clientType == "automation":
		return ModeAutomation
	default:
		return ModeCoding
	}
}

// System returns the system prompt for mode (unknown modes get the coding
// prompt).
func System(mode string, ctx PromptContext) string {
	var b strings.Builder
	switch mode {
	case ModeSetup:
		b.WriteString(setupBase)
		writeRepos(&b, ctx)
		if ctx.ConfigurationName != "" {
			fmt.Fprintf(&b, "\nYou are setting up the configuration %q.\n", ctx.ConfigurationName)
		}
		b.WriteString(platformCLI)
		b.WriteString(setupCritical)
	case ModeAutomation:
		b.WriteString(codingBase)
		writeContext(&b, ctx)
		b.WriteString(platformCLI)
		b.WriteString(automationSection(ctx))
	default:
		b.WriteString(codingBase)
		writeContext(&b, ctx)
		b.WriteString(platformCLI)
	}
	if s := strings.TrimSpace(ctx.Instructions); s != "" {
		b.WriteString("\n## Additional instructions\n\n")
		b.WriteString(s)
		b.WriteString("\n")
	}
	return b.String()
}

// Resolve returns the system prompt of a session: custom (the session's
// system_prompt) when set, followed by what the session works on (its
// repositories, configuration) and the mode-critical instructions of mode;
// else System(mode, ctx).
func Resolve(custom, mode string, ctx PromptContext) string {
	custom = strings.TrimSpace(custom)
	if custom == "" {
		return System(mode, ctx)
	}
	var b strings.Builder
	b.WriteString(custom)
	b.WriteString("\n")
	writeContext(&b, ctx)
	switch mode {
	case ModeAutomation:
		b.WriteString(automationSection(ctx))
	case ModeSetup:
		b.WriteString(setupCritical)
	}
	return b.String()
}

// writeContext names the session's repositories and configuration.
func writeContext(b *strings.Builder, ctx PromptContext) {
	writeRepos(b, ctx)
	if ctx.ConfigurationName != "" {
		fmt.Fprintf(b, "\nThis session runs on the configuration %q.\n", ctx.ConfigurationName)
	}
}

func writeRepos(b *strings.Builder, ctx PromptContext) {
	name := func(i int) string {
		if i < len(ctx.RepoNames) && ctx.RepoNames[i] != "" {
			return " (" + ctx.RepoNames[i] + ")"
		}
		return ""
	}
	switch len(ctx.Repos) {
	case 0:
	case 1:
		fmt.Fprintf(b, "\nThe repository%s is checked out at `%s` in your working directory.\n", name(0), ctx.Repos[0])
	default:
		b.WriteString("\nThe repositories are checked out in your working directory at:\n")
		for i, r := range ctx.Repos {
			fmt.Fprintf(b, "- `%s`%s\n", r, name(i))
		}
	}
}

const codingBase = `You are a coding agent running inside Proliferate, a platform that runs
cloud coding agents for teams. You work in a sandbox with the team's
repositories checked out.

## How to work

- Implement what you are asked: read the code, make focused changes, run the
  tests and linters the project uses, and fix what you broke.
- Commit your work on a branch and open a pull request when the task calls
  for it: ` + "`git push -u origin BRANCH`" + ` (credentials are provided; never
  ask for a token), then ` + "`proliferate pr create --title ... --body ...`" + `
  in the repository; mention the pull request URL it prints in your final
  answer.
- Keep the user informed with short progress notes; ask only when a decision
  genuinely needs them.
- If the project needs environment variables or secrets you do not have,
  call request_env_variables instead of guessing or hard-coding values.
- save_snapshot saves this session's environment so it can resume later.
- Prove your work with verify: write the evidence to files of the workspace
  (test output such as ` + "`go test ./... > test-results.txt 2>&1`" + `,
  screenshots, logs) and call verify with their paths relative to the
  workspace root and a short summary of what they show (at most 10 files of
  5 MiB each). People see them on the session and the run.
`

const setupBase = `You are a setup agent running inside Proliferate, a platform that runs
cloud coding agents for teams. Your job is to get the repositories running
in this sandbox so that future coding sessions start from a ready
environment.

## How to work

- Do NOT change the project's source code. Install dependencies, start
  databases and other services, create local configuration files, and run
  the tests to prove the environment works.
- When the project needs environment variables or secrets (API keys,
  database URLs), call request_env_variables; the user fills them in and
  they appear in /tmp/.proliferate_env.json.
- Record the commands that start the project's services with
  save_service_commands so future sessions start them automatically.
`

const setupCritical = `
## Finishing setup

When the environment works, call save_snapshot with a short summary of what
is configured. Then tell the user that setup is complete and that they can
also use the "Done — Save Snapshot" button to save the environment.
`

const platformCLI = `
## Platform CLI

The ` + "`proliferate`" + ` CLI is available in the sandbox:
- ` + "`proliferate services list|start|stop|restart|logs`" + ` manages long-running
  services (dev servers, databases): the configuration's service commands
  start on their own; start your own with
  ` + "`proliferate services start NAME --command CMD`" + ` so it outlives your shell.
- ` + "`proliferate pr create --title T [--body B] [--base BRANCH]`" + ` opens a pull
  request from the current branch (push it first); git push and fetch to
  the session's repositories authenticate through the platform.
- ` + "`proliferate actions list|guide|run`" + ` acts on connected integrations
  (GitHub, Linear, Sentry, Slack…); see .proliferate/actions-guide.md. Never
  ask for API keys of connected integrations: the platform resolves them.
- Developers can run the same workflow locally with ` + "`npx @proliferate/cli`" + `.
`

func automationSection(ctx PromptContext) string {
	var b strings.Builder
	b.WriteString("\n## Automation run\n\n")
	if ctx.AutomationName != "" {
		fmt.Fprintf(&b, "You are executing the automation %q without a human watching.\n", ctx.AutomationName)
	} else {
		b.WriteString("You are executing an automation run without a human watching.\n")
	}
	b.WriteString(`Complete the task on your own, then you MUST call the automation_complete
tool exactly once with these values:

`)
	fmt.Fprintf(&b, "run_id: %s\ncompletion_id: %s\n\n", orUnknown(ctx.RunID), orUnknown(ctx.CompletionID))
	b.WriteString(`Set outcome to "succeeded" when the task is done, "failed" when it cannot be
done, or "needs_human" when a person must decide or act; put what you did
(and any pull request URL) in summary_markdown; upload the evidence that the
task is done (test output, screenshots) with verify before completing. The
run is not finished until automation_complete succeeds; if it fails, fix the
arguments and call it again with the same completion_id.
`)
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "(given in the first message)"
	}
	return s
}
