package capabilities

import (
	"encoding/json"
	"strings"
)

// Retry policy of the tool wrapper (see the package doc).
const (
	RetryBaseMS   = 500
	MaxRetries    = 5
	CallTimeoutMS = 120_000
	// EnvCallTimeoutMS bounds request_env_variables, which waits for a
	// person's answer: above the gateway's longest wait
	// (ENV_REQUEST_TIMEOUT, at most 9 minutes).
	EnvCallTimeoutMS = 600_000
)

// toolDescriptions are the descriptions the model sees.
var toolDescriptions = map[string]string{
	ToolSaveSnapshot: "Save a snapshot of the current environment (files, installed dependencies, " +
		"configuration) so future sessions start from it. In setup sessions call it once the " +
		"repository runs and its services are configured; in other sessions it saves this session's state.",
	ToolSaveServiceCommands: "Save the commands that start this project's services (dev servers, " +
		"databases, watchers). Future sessions run them automatically at start. Setup sessions only. " +
		"Each command: name, command, optional cwd (relative to the repository) and workspacePath " +
		"(which repository, for multi-repo configurations). 1 to 10 commands.",
	ToolAutomationComplete: "Report the outcome of this automation run. Mandatory at the end of " +
		"every automation run: pass the run_id and completion_id given in your instructions, the " +
		"outcome (succeeded, failed or needs_human) and a markdown summary. Call it exactly once.",
	ToolRequestEnvVariables: "Ask the user for environment variables or secrets the project needs " +
		"(API keys, database URLs) that are not already in your environment. The request is shown to the " +
		"user and this tool waits for their answer (or times out). Submitted values are exported in your " +
		"later shell commands (bash sources ~/.proliferate/env.sh) and kept in ~/.proliferate/env.json: " +
		"extract single keys with jq; never print either file or a value.",
	ToolVerify: "Upload verification evidence: files of the workspace that show your work does what was asked " +
		"(screenshots, logs, test output or reports you wrote to a file). People see them on the session and, in " +
		"an automation, on the run and in its Slack message. Give paths relative to the workspace root (your " +
		"working directory; no absolute paths, no .., no symbolic links leading out), at most 10 regular files of " +
		"at most 5 MiB each and 20 MiB in all, and a short summary of what they prove. A refused path uploads nothing.",
}

// toolArgs are the argument schemas in the plugin's zod (tool.schema).
var toolArgs = map[string]string{
	ToolSaveSnapshot: `{
    message: tool.schema.string().max(2000).optional().describe("Brief summary of what is configured"),
  }`,
	ToolSaveServiceCommands: `{
    commands: tool.schema.array(tool.schema.object({
      name: tool.schema.string().min(1).max(100).describe("Service name, e.g. web or worker"),
      command: tool.schema.string().min(1).max(1000).describe("Shell command that starts the service"),
      cwd: tool.schema.string().max(500).optional().describe("Working directory relative to the repository"),
      workspacePath: tool.schema.string().max(500).optional().describe("Repository directory in multi-repo workspaces"),
    })).min(1).max(10).describe("The service commands"),
  }`,
	ToolAutomationComplete: `{
    run_id: tool.schema.string().min(1).describe("The run id from your instructions"),
    completion_id: tool.schema.string().min(1).describe("The completion id from your instructions"),
    outcome: tool.schema.enum(["succeeded", "failed", "needs_human"]).describe("How the run ended"),
    summary_markdown: tool.schema.string().optional().describe("What was done, in markdown"),
    citations: tool.schema.array(tool.schema.string()).optional().describe("Links or references backing the summary"),
    diff_ref: tool.schema.string().optional().describe("Branch, commit or pull request with the changes"),
    test_report_ref: tool.schema.string().optional().describe("Where the test report is"),
    side_effect_refs: tool.schema.array(tool.schema.string()).optional().describe("Ids of external side effects performed"),
  }`,
	ToolVerify: `{
    paths: tool.schema.array(tool.schema.string().min(1).max(1024)).min(1).max(10).describe("Workspace-relative paths of the evidence files, e.g. [\"test-results/report.txt\", \"screenshots/home.png\"]"),
    summary: tool.schema.string().max(4000).describe("What the evidence shows"),
  }`,
	ToolRequestEnvVariables: `{
    keys: tool.schema.array(tool.schema.object({
      key: tool.schema.string().min(1).describe("Variable name, e.g. DATABASE_URL"),
      description: tool.schema.string().optional().describe("What it is for"),
      type: tool.schema.enum(["env", "secret"]).optional().describe("env: written to the env file; secret: also stored encrypted"),
      required: tool.schema.boolean().optional().describe("Defaults to true"),
      suggestions: tool.schema.array(tool.schema.object({
        label: tool.schema.string(),
        value: tool.schema.string().optional(),
        instructions: tool.schema.string().optional(),
      })).optional(),
    })).min(1).describe("The variables to request"),
  }`,
}

// toolTemplate is one tool module. Placeholders: __DESCRIPTION__,
// __ARGS__, __TOOL__, __GATEWAY_URL__, __SESSION_ID__ (JSON strings) and
// the retry constants.
const toolTemplate = `// Generated by Proliferate (internal/agent/capabilities). Do not edit:
// rewritten at every sandbox start.
import { tool } from "@opencode-ai/plugin"

const GATEWAY_URL = (process.env.PROLIFERATE_GATEWAY_URL || __GATEWAY_URL__).replace(/\/+$/, "")
const SESSION_ID = process.env.PROLIFERATE_SESSION_ID || __SESSION_ID__
const RETRY_BASE_MS = __RETRY_BASE_MS__
const MAX_RETRIES = __MAX_RETRIES__
const CALL_TIMEOUT_MS = __CALL_TIMEOUT_MS__

// Statuses worth retrying with the same tool_call_id: overload, the same
// call still executing on the gateway (409), and server errors.
const retryable = (status) => status === 409 || status === 429 || status >= 500

async function callGatewayTool(toolName, toolCallId, args, abort) {
  const url = GATEWAY_URL + "/proliferate/" + encodeURIComponent(SESSION_ID) + "/tools/" + toolName
  const body = JSON.stringify({ tool_call_id: toolCallId, args })
  let last = "no attempt"
  for (let attempt = 0; attempt <= MAX_RETRIES; attempt++) {
    if (attempt > 0) {
      await new Promise((resolve) => setTimeout(resolve, RETRY_BASE_MS * 2 ** (attempt - 1)))
    }
    if (abort && abort.aborted) throw new Error("cancelled")
    const signals = [AbortSignal.timeout(CALL_TIMEOUT_MS)]
    if (abort) signals.push(abort)
    let res
    try {
      res = await fetch(url, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          Authorization: "Bearer " + (process.env.PROLIFERATE_SANDBOX_TOKEN || ""),
        },
        body,
        signal: AbortSignal.any(signals),
      })
    } catch (err) {
      if (abort && abort.aborted) throw new Error("cancelled")
      last = String((err && err.cause && err.cause.code) || (err && err.message) || err)
      continue
    }
    const text = await res.text().catch(() => "")
    let parsed = null
    try { parsed = JSON.parse(text) } catch {}
    if (retryable(res.status)) {
      last = "gateway answered " + res.status
      continue
    }
    if (!res.ok) {
      const msg = (parsed && parsed.error && (parsed.error.message || parsed.error)) || text || res.statusText
      throw new Error("The platform rejected " + toolName + " (HTTP " + res.status + "): " + msg)
    }
    if (!parsed || typeof parsed !== "object") throw new Error("The platform answered " + toolName + " with an invalid body")
    return parsed
  }
  throw new Error("The platform could not be reached for " + toolName + " after " + (MAX_RETRIES + 1) + " attempts: " + last)
}

export default tool({
  description: __DESCRIPTION__,
  args: __ARGS__,
  async execute(args, context) {
    const answer = await callGatewayTool(__TOOL__, context.callID, args, context.abort)
    const result = typeof answer.result === "string" ? answer.result : JSON.stringify(answer.result ?? "")
    if (answer.success === false) throw new Error(result || __TOOL__ + " failed")
    const data = answer.data && Object.keys(answer.data).length ? "\n\n" + JSON.stringify(answer.data) : ""
    return { title: __TOOL__, output: result + data, metadata: { tool_call_id: context.callID, data: answer.data ?? null } }
  },
})
`

func jsString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// ToolSource returns the TypeScript module of a platform tool ("" for an
// unknown name).
func ToolSource(name string, spec CapabilitySpec) string {
	args, ok := toolArgs[name]
	if !ok {
		return ""
	}
	return strings.NewReplacer(
		"__DESCRIPTION__", jsString(toolDescriptions[name]),
		"__ARGS__", args,
		"__TOOL__", jsString(name),
		"__GATEWAY_URL__", jsString(strings.TrimRight(spec.GatewayURL, "/")),
		"__SESSION_ID__", jsString(spec.SessionID),
		"__RETRY_BASE_MS__", itoa(RetryBaseMS),
		"__MAX_RETRIES__", itoa(MaxRetries),
		"__CALL_TIMEOUT_MS__", itoa(callTimeoutMS(name)),
	).Replace(toolTemplate)
}

// callTimeoutMS is how long the tool wrapper waits for one gateway answer.
func callTimeoutMS(name string) int {
	if name == ToolRequestEnvVariables {
		return EnvCallTimeoutMS
	}
	return CallTimeoutMS
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
