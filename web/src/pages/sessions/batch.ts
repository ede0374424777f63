// Frames of a streaming agent arrive far more often than a person reads
// (2,000 tokens a second when the gateway does not coalesce them):
// applying and rendering each one on its own drops most animation frames
// and leaves the page seconds behind the stream. The batcher collects the
// frames that arrive meanwhile and hands them over at once, on an
// animation frame and at most every minGapMs (the gateway's own token
// coalescing window), so the timeline renders at most 20 times a second
// while the rest of the frames stay free for scrolling and typing. A
// hidden tab gets no animation frames: a timer flushes there too
// (throttled by the browser), so the page's state still follows the
// stream.
export type Batcher<F> = { push: (f: F) => void; flush: () => void; cancel: () => void }

export function frameBatcher<F>(apply: (frames: F[]) => void, minGapMs = 50): Batcher<F> {
  let pending: F[] = []
  let scheduled = false
  let raf = 0
  let wait: number | undefined
  let fallback: number | undefined
  let last = -Infinity
  const cancel = () => {
    if (raf) cancelAnimationFrame(raf)
    window.clearTimeout(wait)
    window.clearTimeout(fallback)
    raf = 0
    scheduled = false
  }
  const flush = () => {
    cancel()
    last = performance.now()
    if (pending.length === 0) return
    const frames = pending
    pending = []
    apply(frames)
  }
  return {
    push(f: F) {
      pending.push(f)
      if (scheduled) return
      scheduled = true
      const delay = Math.max(0, last + minGapMs - performance.now())
      wait = window.setTimeout(() => {
        raf = requestAnimationFrame(flush)
        fallback = window.setTimeout(flush, 2 * minGapMs)
      }, delay)
    },
    flush,
    cancel() {
      cancel()
      pending = []
    },
  }
}
