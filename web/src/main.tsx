import { render } from 'preact'
import { App } from './app'
import { ErrorBoundary } from './lib/boundary'
import './styles.css'

render(
  <ErrorBoundary>
    <App />
  </ErrorBoundary>,
  document.getElementById('app')!,
)
