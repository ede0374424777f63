// Nango's Connect UI in a frame, spoken directly (the frame protocol of
// Nango's frontend SDK, without the SDK): the frame at the Connect UI's URL
// (?apiURL=…) posts {type:'ready'}; we answer {type:'session_token'}; it
// posts {type:'connect', payload:{connectionId, providerConfigKey}} when the
// person has connected, and {type:'close'} when they are done.

export type NangoSession = { token: string; connect_ui_url: string; api_url: string; provider_config_key: string }
export type NangoConnected = { connectionId: string; providerConfigKey: string }

// openConnectUI resolves with the connection made, or null if the person
// closed the frame without connecting.
export function openConnectUI(s: NangoSession): Promise<NangoConnected | null> {
  return new Promise((resolve) => {
    const url = new URL(s.connect_ui_url)
    url.searchParams.set('apiURL', s.api_url)
    const frame = document.createElement('iframe')
    frame.src = url.href
    frame.className = 'nango-connect'
    frame.title = 'Connect with Nango'
    frame.allow = 'clipboard-write'
    let connected: NangoConnected | null = null
    const done = () => {
      window.removeEventListener('message', onMessage)
      frame.remove()
      document.body.style.overflow = ''
      resolve(connected)
    }
    const onMessage = (e: MessageEvent) => {
      if (e.origin !== url.origin || e.source !== frame.contentWindow) return
      const d = e.data as { type?: string; payload?: NangoConnected }
      if (!d || typeof d !== 'object') return
      if (d.type === 'ready') frame.contentWindow?.postMessage({ type: 'session_token', sessionToken: s.token }, url.origin)
      else if (d.type === 'connect' && d.payload?.connectionId) connected = d.payload
      else if (d.type === 'close') done()
    }
    window.addEventListener('message', onMessage)
    document.body.style.overflow = 'hidden'
    document.body.append(frame)
  })
}
