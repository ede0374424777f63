package app

import "github.com/proliferate/proliferate/internal/actions/redaction"

// Redactors is the process's one cache of organizations' redactors (their
// secret values and patterns): the action invocations, the configuration
// builds, the gateway's tools and the transcript publisher share it, so an
// organization's secrets are decrypted and held once and its version asked
// once per use. Call it after Postgres is open. Without a usable
// ENCRYPTION_KEYS (no secret can exist) secrets are not matched, patterns
// and token formats still are.
func (a *App) Redactors() *redaction.Cache {
	a.redactorsOnce.Do(func() {
		box, _ := a.SecretBox()
		a.redactors = redaction.NewCache(a.Pool, box, a.Log.With("component", "redaction"))
	})
	return a.redactors
}
