export function Placeholder(props: { title: string }) {
  return (
    <div>
      <h1>{props.title}</h1>
      <p class="muted">Coming soon.</p>
    </div>
  )
}
