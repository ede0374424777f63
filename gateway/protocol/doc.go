// Package protocol is the session gateway's wire contract: the frames of a
// session's WebSocket stream (server → client and client → server, with
// their type words and close codes) and the JSON bodies of the gateway's
// session routes. The hub, the gateway's HTTP routes, the Go client
// (gateway/client) and the dashboard's TypeScript types (web/src/protocol.ts,
// generated from this package: see TypeScript) all use it.
//
// It is a leaf: it imports only the standard library, so a consumer of the
// client does not compile the hub.
package protocol
