// The session gateway's WebSocket (/proliferate/{id}?token=…, proxied on
// this origin by the API role). It reconnects with backoff after a network
// loss; the server's init frame after each (re)connect carries the
// session's history, so the timeline is rebuilt, never lost.
import { accessToken } from './api'

export type Frame = { type: string; [k: string]: unknown }

export type SocketState = 'connecting' | 'open' | 'reconnecting' | 'closed'

export class SessionSocket {
  private ws: WebSocket | null = null
  private attempts = 0
  private stopped = false
  private timer: number | undefined
  private queue: Frame[] = []
  state: SocketState = 'connecting'

  constructor(
    private sessionID: string,
    private onFrame: (f: Frame) => void,
    private onState: (s: SocketState) => void,
  ) {
    this.connect()
  }

  private url(): string {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:'
    return `${proto}//${location.host}/proliferate/${encodeURIComponent(this.sessionID)}?token=${encodeURIComponent(accessToken() ?? '')}`
  }

  private setState(s: SocketState) {
    this.state = s
    this.onState(s)
  }

  private connect() {
    const ws = new WebSocket(this.url())
    this.ws = ws
    ws.onopen = () => {
      this.attempts = 0
      this.setState('open')
      for (const f of this.queue.splice(0)) ws.send(JSON.stringify(f))
    }
    ws.onmessage = (e) => {
      try {
        this.onFrame(JSON.parse(e.data as string) as Frame)
      } catch {
        // a frame that is not JSON is ignored
      }
    }
    ws.onclose = (e) => {
      this.ws = null
      // 1008 (policy) and 4xxx: the server refused us (no access, unknown
      // session); do not retry forever.
      if (this.stopped || e.code === 1008 || (e.code >= 4000 && e.code < 5000)) {
        this.setState('closed')
        return
      }
      this.setState('reconnecting')
      const delay = Math.min(10_000, 250 * 2 ** this.attempts++) * (0.5 + Math.random() / 2)
      this.timer = window.setTimeout(() => this.connect(), delay)
    }
  }

  // send delivers a client frame now, or after the reconnect.
  send(f: Frame) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(f))
    else this.queue.push(f)
  }

  close() {
    this.stopped = true
    window.clearTimeout(this.timer)
    this.ws?.close()
  }
}
