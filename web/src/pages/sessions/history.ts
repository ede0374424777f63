// A finished or paused session's history from the REST API
// (GET /sessions/{id}/messages), turned into the timeline's messages.
import { get, type Page } from '../../lib/api'
import type { Msg } from './timeline'

export type HistoryEntry = {
  id: string
  kind: string // user_message | agent_message | tool_call | status | error
  message_id: string | null
  part_id: string | null
  role: string | null
  text: string | null
  tool: {
    tool_call_id: string
    name: string
    status: string
    title: string | null
    input: unknown
    output: string
    error: string | null
    duration_ms?: number | null
  } | null
  status: string | null
  code: string | null
  occurred_at: string
}

export async function loadHistory(id: string, signal: AbortSignal, max = 2000): Promise<Msg[]> {
  const entries: HistoryEntry[] = []
  let cursor: string | undefined
  do {
    const page = await get<Page<HistoryEntry>>(`/sessions/${encodeURIComponent(id)}/messages`, { signal, query: { limit: 100, cursor } })
    entries.push(...page.items)
    cursor = page.next_cursor
  } while (cursor && entries.length < max)
  return toMessages(entries)
}

export function toMessages(entries: HistoryEntry[]): Msg[] {
  const out: Msg[] = []
  const byID = new Map<string, Msg>()
  const at = (e: HistoryEntry, role: string): Msg => {
    const key = e.message_id ?? e.id
    let m = byID.get(key)
    if (!m || m.role !== role) {
      m = { id: key, role, parts: [], completed: true, createdAt: Date.parse(e.occurred_at) }
      byID.set(key, m)
      out.push(m)
    }
    return m
  }
  for (const e of entries) {
    switch (e.kind) {
      case 'user_message':
        at({ ...e, message_id: e.id }, 'user').parts.push({ kind: 'text', id: e.id, text: e.text ?? '' })
        break
      case 'agent_message':
        at(e, 'assistant').parts.push({ kind: 'text', id: e.part_id ?? e.id, text: e.text ?? '' })
        break
      case 'tool_call':
        if (e.tool)
          at(e, 'assistant').parts.push({
            kind: 'tool',
            id: e.id,
            tool: e.tool.name,
            toolCallId: e.tool.tool_call_id,
            status: e.tool.status,
            input: e.tool.input,
            output: e.tool.output,
            error: e.tool.error ?? undefined,
            title: e.tool.title ?? undefined,
            durationMs: e.tool.duration_ms ?? undefined,
          })
        break
      case 'status':
      case 'error':
        out.push({
          id: e.id,
          role: 'system',
          parts: [{ kind: 'text', id: e.id, text: e.kind === 'error' ? `Error ${e.code ?? ''}: ${e.text ?? ''}` : `Status: ${e.status ?? e.text ?? ''}` }],
          completed: true,
          createdAt: Date.parse(e.occurred_at),
        })
        break
    }
  }
  return out
}
