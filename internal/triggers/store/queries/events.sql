-- Trigger events: what the run stages read of a run's event.

-- name: TriggerEventSummary :one
SELECT title, url, provider FROM trigger_events WHERE id = $1;
