// BarChart: a small inline SVG bar chart (no charting library). Each bar
// is a label (a day) and stacked segments (one per series, colored by the
// series' position in the legend).
import './barchart.css'

export type Bar = { label: string; segments: { series: string; value: number }[] }

export function BarChart(props: { bars: Bar[]; format: (v: number) => string; label: string; legend?: boolean }) {
  const { bars, format } = props
  const W = 600
  const H = 180
  const pad = 24
  const totals = bars.map((b) => b.segments.reduce((s, x) => s + x.value, 0))
  const max = Math.max(...totals, 1)
  const bw = (W - pad * 2) / Math.max(bars.length, 1)
  const series: string[] = []
  for (const b of bars) for (const s of b.segments) if (!series.includes(s.series)) series.push(s.series)
  return (
    <figure class="barchart">
      <svg class="chart" viewBox={`0 0 ${W} ${H}`} role="img" aria-label={props.label}>
        <line class="axis" x1={pad} y1={H - pad} x2={W - pad} y2={H - pad} />
        <text x={pad} y={12}>
          {format(max)}
        </text>
        {bars.map((b, i) => {
          let y = H - pad
          return (
            <g key={b.label}>
              {b.segments.map((s) => {
                const h = ((H - pad * 2) * s.value) / max
                y -= h
                return (
                  <rect key={s.series} class={'bar s' + (series.indexOf(s.series) % 6)} x={pad + i * bw + 2} y={y} width={Math.max(bw - 4, 1)} height={h}>
                    <title>
                      {b.label}
                      {props.legend || series.length > 1 ? ' · ' + s.series : ''}: {format(s.value)}
                    </title>
                  </rect>
                )
              })}
              {(bars.length <= 10 || i % Math.ceil(bars.length / 10) === 0) && (
                <text x={pad + i * bw + bw / 2} y={H - 8} text-anchor="middle">
                  {b.label.slice(5)}
                </text>
              )}
            </g>
          )
        })}
      </svg>
      {props.legend && series.length > 0 && (
        <figcaption class="legend">
          {series.map((s, i) => (
            <span key={s}>
              <i class={'swatch s' + (i % 6)} /> {s}
            </span>
          ))}
        </figcaption>
      )}
    </figure>
  )
}
