// A trigger's provider filters rendered from the provider's JSON Schema
// (GET /providers): strings and enums as inputs and selects, lists of
// enums as checkboxes, lists of strings or integers as comma-separated
// inputs, anything nested (conditions, property filters) as JSON. The API
// validates the config with the same schema and names the bad property.
import { useState } from 'preact/hooks'
import { Field, TextArea } from '../../lib/ui'
import { Select } from './form'
import type { JSONSchema } from './types'

export type SchemaValue = Record<string, unknown>

// kind says how a property is edited.
function kind(p: JSONSchema): 'string' | 'enum' | 'integer' | 'boolean' | 'enum-list' | 'string-list' | 'integer-list' | 'json' {
  if (p.type === 'string') return p.enum ? 'enum' : 'string'
  if (p.type === 'integer' || p.type === 'number') return 'integer'
  if (p.type === 'boolean') return 'boolean'
  if (p.type === 'array' && p.items) {
    if (p.items.enum) return 'enum-list'
    if (p.items.type === 'string') return 'string-list'
    if (p.items.type === 'integer') return 'integer-list'
  }
  return 'json'
}

const label = (name: string) => name.replace(/_/g, ' ').replace(/^./, (c) => c.toUpperCase())

// SchemaForm edits value (the config) by schema; error(name) is the API's
// problem with config.<name>; onJSONError reports a JSON box that does not
// parse (the form is not submitted then).
export function SchemaForm(props: {
  schema: JSONSchema
  value: SchemaValue
  onChange: (v: SchemaValue) => void
  error: (name: string) => string | undefined
  onJSONError: (name: string, bad: boolean) => void
}) {
  const props_ = props.schema.properties ?? {}
  const names = Object.keys(props_).sort()
  const [raw, setRaw] = useState<Record<string, string>>({})
  const [bad, setBad] = useState<Record<string, boolean>>({})
  if (names.length === 0) return <p class="muted small">This provider has no filters.</p>
  const set = (name: string, v: unknown) => {
    const next = { ...props.value }
    if (v === undefined || v === '' || (Array.isArray(v) && v.length === 0)) delete next[name]
    else next[name] = v
    props.onChange(next)
  }
  return (
    <div class="schema-form">
      {names.map((name) => {
        const p = props_[name]
        const v = props.value[name]
        const err = props.error(name)
        const hint = p.description
        const fname = 'config.' + name
        switch (kind(p)) {
          case 'string':
            return <Field key={name} label={label(name)} name={fname} hint={hint} error={err} value={(v as string) ?? ''} onInput={(e) => set(name, e.currentTarget.value)} />
          case 'enum':
            return (
              <Select key={name} label={label(name)} name={fname} hint={hint} error={err} value={(v as string) ?? ''} onChange={(e) => set(name, e.currentTarget.value)}>
                <option value="">Any</option>
                {(p.enum ?? []).map((o) => (
                  <option key={String(o)} value={String(o)}>
                    {String(o)}
                  </option>
                ))}
              </Select>
            )
          case 'integer':
            return (
              <Field
                key={name}
                label={label(name)}
                name={fname}
                inputMode="numeric"
                hint={hint}
                error={err}
                value={v === undefined ? '' : String(v)}
                onInput={(e) => {
                  const s = e.currentTarget.value.trim()
                  set(name, s === '' ? undefined : Number.isFinite(Number(s)) ? Number(s) : s)
                }}
              />
            )
          case 'boolean':
            return (
              <label class="check" key={name}>
                <input type="checkbox" name={fname} checked={v === true} onChange={(e) => set(name, e.currentTarget.checked || undefined)} /> {label(name)}
              </label>
            )
          case 'enum-list': {
            const list = (v as string[]) ?? []
            return (
              <fieldset key={name} class="enum-list">
                <legend>{label(name)}</legend>
                {hint && <div class="hint">{hint}</div>}
                <div class="row">
                  {(p.items?.enum ?? []).map((o) => (
                    <label class="check" key={String(o)}>
                      <input
                        type="checkbox"
                        name={fname}
                        value={String(o)}
                        checked={list.includes(String(o))}
                        onChange={(e) => set(name, e.currentTarget.checked ? [...list, String(o)] : list.filter((x) => x !== String(o)))}
                      />{' '}
                      {String(o)}
                    </label>
                  ))}
                </div>
                {err && (
                  <div class="field-error" role="alert" data-field={fname}>
                    {err}
                  </div>
                )}
              </fieldset>
            )
          }
          case 'string-list':
          case 'integer-list': {
            const ints = kind(p) === 'integer-list'
            return (
              <Field
                key={name}
                label={label(name)}
                name={fname}
                hint={(hint ?? '') + ' Comma-separated.'}
                error={err}
                value={raw[name] ?? ((v as unknown[]) ?? []).join(', ')}
                onInput={(e) => {
                  const s = e.currentTarget.value
                  setRaw({ ...raw, [name]: s })
                  const parts = s.split(',').map((x) => x.trim()).filter(Boolean)
                  set(name, ints ? parts.map((x) => (Number.isFinite(Number(x)) ? Number(x) : x)) : parts)
                }}
              />
            )
          }
          default:
            return (
              <TextArea
                key={name}
                label={label(name) + ' (JSON)'}
                name={fname}
                hint={hint}
                rows={3}
                error={bad[name] ? 'must be valid JSON' : err}
                value={raw[name] ?? (v === undefined ? '' : JSON.stringify(v, null, 2))}
                onInput={(e) => {
                  const s = e.currentTarget.value
                  setRaw({ ...raw, [name]: s })
                  if (s.trim() === '') {
                    setBad({ ...bad, [name]: false })
                    props.onJSONError(name, false)
                    set(name, undefined)
                    return
                  }
                  try {
                    set(name, JSON.parse(s))
                    setBad({ ...bad, [name]: false })
                    props.onJSONError(name, false)
                  } catch {
                    setBad({ ...bad, [name]: true })
                    props.onJSONError(name, true)
                  }
                }}
              />
            )
        }
      })}
    </div>
  )
}
