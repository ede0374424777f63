// Package gateway will own live sessions: per-session hubs with Redis owner
// leases, sandbox providers, the OpenCode agent bridge (HTTP + SSE), the
// WebSocket protocol, tool callbacks and action routes. See the gateway issue
// and ../shared/specs/sessions-gateway.md. Nothing is built here yet.
package gateway
