// Agent text as markdown, rendered safely: marked turns it into HTML,
// DOMPurify removes anything executable (scripts, handlers, javascript:
// URLs), and links open in a new tab without access to this window
// (rel=noopener noreferrer). Never innerHTML of unsanitized agent text.
import DOMPurify from 'dompurify'
import { marked } from 'marked'
import { useMemo } from 'preact/hooks'

let hooked = false

export function renderMarkdown(text: string): string {
  if (!hooked) {
    hooked = true
    DOMPurify.addHook('afterSanitizeAttributes', (node) => {
      if (node.tagName === 'A') {
        node.setAttribute('target', '_blank')
        node.setAttribute('rel', 'noopener noreferrer')
      }
    })
  }
  const html = marked.parse(text, { async: false, gfm: true, breaks: false }) as string
  return DOMPurify.sanitize(html, { FORBID_TAGS: ['style', 'form', 'input', 'textarea', 'button'], FORBID_ATTR: ['style'] })
}

// Markdown renders text; the HTML is recomputed only when text changes, so
// a streaming timeline re-renders only the part that grows.
export function Markdown(props: { text: string; class?: string }) {
  const html = useMemo(() => renderMarkdown(props.text), [props.text])
  return <div class={'md ' + (props.class ?? '')} dangerouslySetInnerHTML={{ __html: html }} />
}
