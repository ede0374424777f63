// Package api will be the Gin REST API for the dashboard (/api/v1), org-scoped,
// with one error shape and an OpenAPI document. See the control-plane issue and
// ../shared/specs/auth-orgs.md. Nothing is built here yet.
package api
