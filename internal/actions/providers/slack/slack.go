// Package slack is the Slack provider action source: send_message over the
// Slack Web API's chat.postMessage.
//
// Wire format: POST {base}/chat.postMessage (base is SLACK_API_URL, by
// default https://slack.com/api) with a JSON body {channel, text,
// thread_ts} and the workspace's bot token (ExecContext.Token) as
// `Authorization: Bearer`. Slack answers HTTP 200 with {"ok": true, …},
// returned as the result, or {"ok": false, "error": code}, which becomes an
// *actions.ExecError whose Message is Slack's code (channel_not_found,
// not_in_channel, …). Other HTTP statuses (429, 5xx) are *actions.ExecError
// with that status; nothing is retried here, so a message is never posted
// twice by this layer. Timeouts are *actions.ExecError with Status 0.
//
// internal/slack's client is not reused: its Message has no thread_ts and it
// waits out rate limits inside the call, beyond the 30 s action budget.
package slack

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/providers/remote"
)

// DefaultBaseURL is the Slack Web API base.
const DefaultBaseURL = "https://slack.com/api"

//go:embed guide.md
var guide string

// Options configure a Source (BaseURL is the Web API base; default
// DefaultBaseURL).
type Options = remote.SourceOptions

// Source is the Slack action source. It is stateless and safe for
// concurrent use.
type Source struct {
	remote.Catalog
	base string
	c    *remote.Client
}

// New returns the source.
func New(o Options) *Source {
	base, c := o.Client("slack", DefaultBaseURL)
	return &Source{Catalog: remote.Catalog{SourceID: "slack", Name: "Slack", GuideMD: guide, Defs: Definitions}, base: base, c: c}
}

var _ actions.Source = (*Source)(nil)

const sendMessageSchema = `{"type":"object","additionalProperties":false,"required":["channel","text"],"properties":{
"channel":{"type":"string","minLength":1,"description":"Channel id (C…), or a DM / group id."},
"text":{"type":"string","minLength":1,"description":"Message text (Slack mrkdwn)."},
"thread_ts":{"type":"string","minLength":1,"description":"Reply in the thread of this message timestamp."}}}`

// Definitions returns the catalog (a fresh copy).
func Definitions() []actions.Definition {
	return []actions.Definition{
		{ID: "send_message", Risk: actions.RiskWrite, Params: json.RawMessage(sendMessageSchema),
			Description: "Post a message to a Slack channel, optionally as a thread reply."},
	}
}

// Execute implements actions.Source.
func (s *Source) Execute(ctx context.Context, actionID string, params json.RawMessage, ec actions.ExecContext) (json.RawMessage, error) {
	if actionID != "send_message" {
		return nil, fmt.Errorf("slack %q: %w", actionID, actions.ErrUnknownAction)
	}
	var p struct {
		Channel  string `json:"channel"`
		Text     string `json:"text"`
		ThreadTS string `json:"thread_ts,omitempty"`
	}
	if err := remote.DecodeParams(params, &p); err != nil {
		return nil, fmt.Errorf("slack send_message: %w", err)
	}
	switch {
	case p.Channel == "":
		return nil, fmt.Errorf("slack send_message: %w", remote.Required("channel"))
	case p.Text == "":
		return nil, fmt.Errorf("slack send_message: %w", remote.Required("text"))
	}
	resp, err := s.c.Do(ctx, remote.Request{Action: actionID, Method: http.MethodPost, URL: s.base + "/chat.postMessage",
		Body: p, Authorization: "Bearer " + ec.Token, Token: ec.Token})
	if err != nil {
		return nil, err
	}
	if resp.Status != http.StatusOK {
		msg := http.StatusText(resp.Status)
		if resp.Status == http.StatusTooManyRequests {
			msg = "ratelimited"
			if ra := resp.Header.Get("Retry-After"); ra != "" {
				msg += ", retry after " + remote.Truncate(ra, 10) + " s"
			}
		}
		return nil, &actions.ExecError{Status: resp.Status, Message: "slack: " + msg}
	}
	var env struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(resp.Body, &env); err != nil {
		return nil, &actions.ExecError{Status: resp.Status, Message: "slack: answer is not JSON"}
	}
	if !env.OK {
		code := env.Error
		if code == "" {
			code = "unknown_error"
		}
		return nil, &actions.ExecError{Status: resp.Status, Message: remote.Truncate(remote.Scrub(code, ec.Token), 200)}
	}
	return json.RawMessage(resp.Body), nil
}
