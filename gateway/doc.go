// Package gateway is the session gateway's HTTP front door: the routes
// people, automations and sandboxes use to reach live coding sessions.
//
//	POST /proliferate/sessions            create (idempotent by Idempotency-Key)
//	GET  /proliferate/{id}                session info, or the WebSocket stream
//	GET  /proliferate/{id}/status         stored status + runtime liveness
//	POST /proliferate/{id}/message        prompt (sent once per Idempotency-Key)
//	POST /proliferate/{id}/cancel         abort the running agent turn
//	POST /proliferate/{id}/tools/{tool}   platform tool callback (sandbox only)
//	POST /proliferate/{id}/start          start the runtime now (immediate mode)
//	POST /proliferate/{id}/pause          snapshot + stop the sandbox, mark paused
//	POST /proliferate/{id}/snapshot       snapshot the running sandbox
//	POST /proliferate/{id}/heartbeat      UI heartbeat: keeps the session from idling (204)
//	…    /proliferate/{id}/actions/…      action catalog, invoke, approvals (actions.go)
//	GET  /proliferate/{id}/git/…          git status/branch/commit/push/PR (git_routes.go)
//	ANY  /proxy/{sid}/{token}/opencode/…  the sandbox's OpenCode API (SSE included)
//	GET  /proxy/{sid}/{token}/terminal    terminal WebSocket (protocol in terminal.go)
//
// Design:
//   - Authentication is the REST API's (its httpapi.Authenticator): user access
//     tokens, API keys, service tokens and per-session sandbox tokens. The
//     identity always comes from the credential, never from a payload.
//   - Access: a person sees the sessions of their active organization; a
//     session of another organization is 404, like a missing one. Prompt,
//     cancel and the WebSocket's mutations are for the session's creator,
//     headless sessions (no creator) and platform services (the dashboard
//     API calls start/pause/snapshot with a service token after its own
//     creator-or-admin check). A sandbox token
//     reads its own session and calls its own tools, nothing else.
//   - Live state belongs to gateway/hub (one hub per session per process,
//     guarded by a Redis owner lease); this package translates HTTP and
//     WebSocket traffic into hub calls. A WebSocket reaching an instance
//     that does not own the session is closed with 4009 and the reason
//     "session is owned by another gateway instance".
//   - Tool callbacks are idempotent by tool_call_id through gateway/tools
//     (persisted in session_tool_invocations), so a retried callback — even
//     after a restart or on another instance — acts once.
//   - Errors use the API's one error shape (httpapi.Error, httpapi.ErrorBody).
//
// gateway/client is the Go client of these routes (and the run pipeline's
// runs.Sessions implementation); WebSockets are github.com/gorilla/websocket.
package gateway
