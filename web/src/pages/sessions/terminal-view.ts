// The terminal tab's xterm.js side, loaded on demand (its own chunk: the
// first screen's JS does not carry xterm). One TerminalView is one xterm
// in an element; connect opens the gateway's terminal WebSocket and pipes
// it both ways (protocol in gateway/terminal.go: binary frames are bytes,
// text frames JSON control messages such as resize).
import { Terminal } from '@xterm/xterm'
import { FitAddon } from '@xterm/addon-fit'
import '@xterm/xterm/css/xterm.css'

export type TerminalEvents = {
  onOpen: () => void
  // opened: whether the socket ever opened (a refused handshake did not).
  onClose: (code: number, reason: string, opened: boolean) => void
}

const enc = new TextEncoder()

export class TerminalView {
  readonly term: Terminal
  private fit = new FitAddon()
  private ws: WebSocket | null = null
  private ro: ResizeObserver
  private disposed = false

  constructor(
    private el: HTMLElement,
    private ev: TerminalEvents,
  ) {
    this.term = new Terminal({
      cursorBlink: true,
      fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, monospace',
      fontSize: 13,
      scrollback: 5000,
      theme: { background: '#111418', foreground: '#e6e6e6' },
    })
    this.term.loadAddon(this.fit)
    this.term.open(el)
    // Keystrokes go as binary frames (the bytes the pty gets).
    this.term.onData((d) => this.sendBytes(enc.encode(d)))
    this.term.onBinary((d) => this.sendBytes(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff)))
    // A new size (window resized, tab shown, phone rotated) goes to the pty.
    this.term.onResize(({ cols, rows }) => this.sendResize(cols, rows))
    this.ro = new ResizeObserver(() => this.refit())
    this.ro.observe(el)
    window.addEventListener('resize', this.refit)
    this.refit()
  }

  // refit sizes the terminal to its element (not while it is hidden).
  refit = () => {
    if (this.disposed || this.el.clientWidth === 0 || this.el.clientHeight === 0) return
    try {
      this.fit.fit()
    } catch {
      // not measurable yet: the next resize fits it
    }
    this.el.dataset.cols = String(this.term.cols)
    this.el.dataset.rows = String(this.term.rows)
  }

  // connect opens a socket at url(cols, rows), replacing any open one.
  connect(url: (cols: number, rows: number) => string) {
    this.ws?.close()
    this.refit()
    const ws = new WebSocket(url(this.term.cols, this.term.rows))
    ws.binaryType = 'arraybuffer'
    this.ws = ws
    let opened = false
    ws.onopen = () => {
      opened = true
      this.ev.onOpen()
      this.term.focus()
    }
    ws.onmessage = (e) => {
      if (e.data instanceof ArrayBuffer) this.term.write(new Uint8Array(e.data))
      else this.term.write(String(e.data))
    }
    ws.onclose = (e) => {
      if (this.ws !== ws) return // replaced or disposed
      this.ws = null
      this.ev.onClose(e.code, e.reason, opened)
    }
  }

  // notice writes a line of the page's own (dim) into the terminal.
  notice(text: string) {
    this.term.write(`\r\n\x1b[2m${text}\x1b[0m\r\n`)
  }

  focus() {
    this.term.focus()
  }

  private sendBytes(b: Uint8Array) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(b)
  }

  private sendResize(cols: number, rows: number) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: 'resize', cols, rows }))
  }

  dispose() {
    this.disposed = true
    const ws = this.ws
    this.ws = null
    ws?.close()
    this.ro.disconnect()
    window.removeEventListener('resize', this.refit)
    this.term.dispose()
  }
}
