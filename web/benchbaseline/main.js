// The bench's baseline: the smallest Preact app (one component with state),
// built by the same Vite, to compare the dashboard's first-screen JS with.
import { h, render } from 'preact'
import { useState } from 'preact/hooks'

function App() {
  const [n, setN] = useState(0)
  return h('button', { onClick: () => setN(n + 1) }, 'clicked ' + n)
}

render(h(App, null), document.getElementById('app'))
