// Dialog is a modal dialog: labelled, focus moved into it on open, kept
// inside it with Tab, given back on close; Esc and a click outside close it.
import type { ComponentChildren } from 'preact'
import { useEffect, useRef } from 'preact/hooks'

export function Dialog(props: { label: string; onClose: () => void; class?: string; children: ComponentChildren; initialFocus?: string }) {
  const box = useRef<HTMLDivElement>(null)
  useEffect(() => {
    const before = document.activeElement as HTMLElement | null
    const el = box.current
    const first = (props.initialFocus && el?.querySelector<HTMLElement>(props.initialFocus)) || el?.querySelector<HTMLElement>(focusable)
    ;(first ?? el)?.focus()
    return () => before?.focus?.()
  }, [])
  return (
    <div class="dialog-backdrop" onMouseDown={(e) => e.target === e.currentTarget && props.onClose()}>
      <div
        ref={box}
        class={'dialog ' + (props.class ?? '')}
        role="dialog"
        aria-modal="true"
        aria-label={props.label}
        tabIndex={-1}
        onKeyDown={(e) => {
          if (e.key === 'Escape') {
            e.preventDefault()
            e.stopPropagation()
            props.onClose()
          } else if (e.key === 'Tab') {
            const fs = [...(box.current?.querySelectorAll<HTMLElement>(focusable) ?? [])]
            if (fs.length === 0) return
            const i = fs.indexOf(document.activeElement as HTMLElement)
            if (e.shiftKey && i <= 0) {
              e.preventDefault()
              fs[fs.length - 1].focus()
            } else if (!e.shiftKey && i === fs.length - 1) {
              e.preventDefault()
              fs[0].focus()
            }
          }
        }}
      >
        {props.children}
      </div>
    </div>
  )
}

const focusable = 'button:not([disabled]), [href], input:not([disabled]), select, textarea, [tabindex]:not([tabindex="-1"])'
