// The session's timeline, built from the gateway's frames: the init frame
// (sent on every connect and reconnect) replaces the history, and the live
// frames (message, token, tool_*, message_complete/cancelled) extend it.
// A pure reducer, so a reconnect or a replay of frames gives the same view.
import type {
  ActionInvocation,
  AutoStartOutputMessage,
  ChatMessage,
  ChatPart,
  ServerFrame,
  SessionInfo,
} from '../../protocol'

export type ToolPart = {
  kind: 'tool'
  id: string
  tool: string
  toolCallId: string
  status: string
  input?: unknown
  output?: string
  error?: string
  title?: string
  durationMs?: number
}
export type TextPart = { kind: 'text'; id: string; text: string; reasoning?: boolean }
export type Part = ToolPart | TextPart

export type Msg = {
  id: string
  role: string
  parts: Part[]
  completed: boolean
  cancelled?: boolean
  createdAt?: number
}

export type Notice = { id: number; code: string; message: string; action?: string }

export type EnvKey = {
  key: string
  description?: string
  type?: string
  required?: boolean
  suggestions?: { label: string; value?: string; instructions?: string }[]
}
export type EnvRequest = { toolCallId: string; keys: EnvKey[] }

export type Timeline = {
  info?: SessionInfo
  status: string
  agent: string
  statusMessage?: string
  messages: Msg[]
  notices: Notice[]
  env: EnvRequest[]
  approvals: Record<string, ActionInvocation>
  previews: Record<number, { url: string; open_url?: string }>
  services?: AutoStartOutputMessage
  snapshot?: { ok: boolean; id?: string; error?: string }
  initialized: boolean
}

export const emptyTimeline: Timeline = {
  status: 'connecting',
  agent: 'unknown',
  messages: [],
  notices: [],
  env: [],
  approvals: {},
  previews: {},
  initialized: false,
}

let noticeID = 0

function fromChatPart(p: ChatPart): Part {
  if (p.type === 'tool')
    return {
      kind: 'tool',
      id: p.id,
      tool: p.tool ?? 'tool',
      toolCallId: p.tool_call_id ?? p.id,
      status: p.status ?? 'completed',
      input: p.input,
      output: p.output,
      error: p.error,
      title: p.title,
    }
  return { kind: 'text', id: p.id, text: p.text ?? '', reasoning: p.type === 'reasoning' }
}

export function fromChat(m: ChatMessage): Msg {
  const parts = (m.parts ?? []).map(fromChatPart)
  if (parts.length === 0 && m.content) parts.push({ kind: 'text', id: m.id + ':content', text: m.content })
  return { id: m.id, role: m.role, parts, completed: m.completed, createdAt: m.created_at }
}

// upsert changes the message with id (created as an assistant message when
// the stream names one the client has not seen).
function upsert(t: Timeline, id: string | undefined, f: (m: Msg) => Msg): Timeline {
  const key = id || 'current'
  const i = t.messages.findIndex((m) => m.id === key)
  const messages = t.messages.slice()
  if (i < 0) messages.push(f({ id: key, role: 'assistant', parts: [], completed: false }))
  else messages[i] = f(messages[i])
  return { ...t, messages }
}

function upsertPart(m: Msg, match: (p: Part) => boolean, make: () => Part, f: (p: Part) => Part): Msg {
  const i = m.parts.findIndex(match)
  const parts = m.parts.slice()
  if (i < 0) parts.push(f(make()))
  else parts[i] = f(parts[i])
  return { ...m, parts }
}

// lastOpenAssistant is the id of the last assistant message not finished
// (message_complete may come without a message id).
function lastOpen(t: Timeline): string | undefined {
  for (let i = t.messages.length - 1; i >= 0; i--) if (t.messages[i].role === 'assistant' && !t.messages[i].completed) return t.messages[i].id
  return undefined
}

export function reduce(t: Timeline, f: ServerFrame): Timeline {
  switch (f.type) {
    case 'init':
      return {
        ...t,
        info: f.session,
        status: f.status.status,
        agent: f.status.agent,
        statusMessage: f.status.message,
        messages: (f.messages ?? []).map(fromChat),
        // pending env requests are re-sent after init by the gateway
        env: [],
        initialized: true,
      }
    case 'status':
      return { ...t, status: f.status, agent: f.agent, statusMessage: f.message }
    case 'message': {
      const m = fromChat(f.message)
      const i = t.messages.findIndex((x) => x.id === m.id)
      const messages = t.messages.slice()
      if (i < 0) messages.push(m)
      else messages[i] = { ...m, parts: m.parts.length ? m.parts : messages[i].parts }
      return { ...t, messages }
    }
    case 'token':
      return upsert(t, f.message_id, (m) =>
        upsertPart(
          m,
          (p) => p.id === f.part_id,
          () => ({ kind: 'text', id: f.part_id, text: '' }),
          (p) => (p.kind === 'text' ? { ...p, text: p.text + f.token } : p),
        ),
      )
    case 'text_part_complete':
      return upsert(t, f.message_id, (m) =>
        upsertPart(
          m,
          (p) => p.id === f.part_id,
          () => ({ kind: 'text', id: f.part_id, text: '' }),
          (p) => (p.kind === 'text' ? { ...p, text: f.text } : p),
        ),
      )
    case 'tool_start':
      return upsert(t, f.message_id, (m) =>
        upsertPart(
          m,
          (p) => p.kind === 'tool' && p.toolCallId === f.tool_call_id,
          () => ({ kind: 'tool', id: f.part_id || f.tool_call_id, tool: f.tool, toolCallId: f.tool_call_id, status: 'running' }),
          (p) => (p.kind === 'tool' ? { ...p, input: f.args ?? p.input, status: 'running' } : p),
        ),
      )
    case 'tool_metadata':
      return upsert(t, f.message_id, (m) =>
        upsertPart(
          m,
          (p) => p.kind === 'tool' && p.toolCallId === f.tool_call_id,
          () => ({ kind: 'tool', id: f.tool_call_id, tool: f.tool, toolCallId: f.tool_call_id, status: 'running' }),
          (p) => (p.kind === 'tool' ? { ...p, title: f.title ?? p.title } : p),
        ),
      )
    case 'tool_end':
      return upsert(t, f.message_id, (m) =>
        upsertPart(
          m,
          (p) => p.kind === 'tool' && p.toolCallId === f.tool_call_id,
          () => ({ kind: 'tool', id: f.tool_call_id, tool: f.tool, toolCallId: f.tool_call_id, status: f.status }),
          (p) => (p.kind === 'tool' ? { ...p, status: f.status, output: f.result, error: f.error, durationMs: f.duration_ms } : p),
        ),
      )
    case 'message_complete':
      return upsert(t, f.message_id || lastOpen(t), (m) => ({ ...m, completed: true }))
    case 'message_cancelled': {
      const id = f.message_id || lastOpen(t)
      if (!id) return { ...t, agent: 'idle' }
      return upsert(t, id, (m) => ({ ...m, completed: true, cancelled: true }))
    }
    case 'error':
      return { ...t, notices: [...t.notices.slice(-4), { id: ++noticeID, code: f.code, message: f.message, action: f.action }] }
    case 'snapshot_result':
      return { ...t, snapshot: { ok: f.success, id: f.snapshot_id, error: f.error } }
    case 'env_request': {
      const req = (f.request ?? {}) as { keys?: EnvKey[] }
      const id = f.tool_call_id ?? ''
      return { ...t, env: [...t.env.filter((e) => e.toolCallId !== id), { toolCallId: id, keys: req.keys ?? [] }] }
    }
    case 'submit_env_result':
      if (f.ok) return t
      return {
        ...t,
        notices: [
          ...t.notices.slice(-4),
          { id: ++noticeID, code: f.code ?? 'submit_env_failed', message: [f.error, ...(f.fields ?? []).map((x) => `${x.field} ${x.problem}`)].filter(Boolean).join('; ') },
        ],
      }
    case 'env_resolved':
      return { ...t, env: t.env.filter((e) => e.toolCallId !== f.tool_call_id) }
    case 'action_approval_request':
    case 'action_completed':
    case 'action_approval_result':
      return { ...t, approvals: { ...t.approvals, [f.invocation.id]: f.invocation } }
    case 'preview_url':
      return { ...t, previews: { ...t.previews, [f.port]: { url: f.url, open_url: f.open_url } } }
    case 'auto_start_output':
      return { ...t, services: f }
    default:
      return t
  }
}

// reduceAll applies frames in order. Consecutive tokens of one text part
// (a stream's frames collected between two animation frames) are applied
// as one, so the message is copied once per batch, not once per token.
export function reduceAll(t: Timeline, frames: ServerFrame[]): Timeline {
  for (let i = 0; i < frames.length; i++) {
    let f = frames[i]
    if (f.type === 'token') {
      let text = f.token
      while (i + 1 < frames.length) {
        const n = frames[i + 1]
        if (n.type !== 'token' || n.message_id !== f.message_id || n.part_id !== f.part_id) break
        text += n.token
        i++
      }
      if (text !== f.token) f = { ...f, token: text }
    }
    t = reduce(t, f)
  }
  return t
}

// withApprovals merges invocations read over REST (pending ones when the
// page opens) into the timeline.
export function withApprovals(t: Timeline, list: ActionInvocation[]): Timeline {
  const approvals = { ...t.approvals }
  for (const inv of list) if (!approvals[inv.id]) approvals[inv.id] = inv
  return { ...t, approvals }
}
