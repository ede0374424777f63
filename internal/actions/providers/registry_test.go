package providers_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/providers"
	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
	"github.com/proliferate/proliferate/internal/actions/providers/sentryfake"
	"github.com/proliferate/proliferate/internal/slack/slackfake"
)

func TestRegistryResolvesEverySourceWithItsURL(t *testing.T) {
	lin := linearfake.New(t)
	lin.AddToken("lin_tok", "u1")
	lin.AddTeam(linearfake.Team{ID: "t1", Key: "ENG", Name: "Eng"})
	sen := sentryfake.New(t)
	sen.AddToken("sen_tok")
	sen.AddProject("acme", "web")
	sl := slackfake.New(t)
	sl.AddToken("xoxb-tok", "T1")
	sl.AddChannel("T1", "C1")

	reg := providers.NewRegistry(providers.Config{LinearURL: lin.URL(), SentryURL: sen.URL(), SlackURL: sl.URL(),
		Timeout: 300 * time.Millisecond})
	if ids := reg.IDs(); !slices.Equal(ids, []string{"linear", "sentry", "slack"}) {
		t.Fatalf("ids %v", ids)
	}
	if _, ok := reg.Source("github"); ok {
		t.Fatal("an unknown integration resolved")
	}
	ctx := context.Background()
	for _, c := range []struct{ id, action, params, token string }{
		{"linear", "create_issue", `{"teamId":"t1","title":"from the registry"}`, "lin_tok"},
		{"sentry", "list_issues", `{"organization_slug":"acme","project_slug":"web"}`, "sen_tok"},
		{"slack", "send_message", `{"channel":"C1","text":"hello"}`, "xoxb-tok"},
	} {
		src, ok := reg.Source(c.id)
		if !ok || src.ID() != c.id {
			t.Fatalf("source %q: %v", c.id, src)
		}
		defs, err := src.ListActions(ctx, actions.ExecContext{})
		if err != nil || !slices.ContainsFunc(defs, func(d actions.Definition) bool { return d.ID == c.action }) {
			t.Fatalf("%s catalog: %v %v", c.id, defs, err)
		}
		if g, err := src.Guide(ctx, actions.ExecContext{}); err != nil || !strings.Contains(g, "--integration "+c.id) {
			t.Fatalf("%s guide: %v", c.id, err)
		}
		if err := actions.Validate(defs[slices.IndexFunc(defs, func(d actions.Definition) bool { return d.ID == c.action })], json.RawMessage(c.params)); err != nil {
			t.Fatalf("%s params: %v", c.id, err)
		}
		if _, err := src.Execute(ctx, c.action, json.RawMessage(c.params), actions.ExecContext{Token: c.token}); err != nil {
			t.Fatalf("%s %s: %v", c.id, c.action, err)
		}
	}
	if lin.MutationCount() != 1 || len(sen.Requests()) != 1 || len(sl.Posts()) != 1 {
		t.Fatalf("linear %d mutations, sentry %d requests, slack %d posts", lin.MutationCount(), len(sen.Requests()), len(sl.Posts()))
	}

	// The configured timeout reaches the sources.
	sen.Hang()
	src, _ := reg.Source("sentry")
	start := time.Now()
	_, err := src.Execute(ctx, "get_issue", json.RawMessage(`{"issue_id":"1"}`), actions.ExecContext{Token: "sen_tok"})
	var ee *actions.ExecError
	if !errors.As(err, &ee) || ee.Status != 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("hang: %v after %s", err, time.Since(start))
	}

	// Invalid params are recognisable through the registry's sentinel.
	_, err = src.Execute(ctx, "get_issue", json.RawMessage(`{"issue_id":".."}`), actions.ExecContext{Token: "sen_tok"})
	if !errors.Is(err, providers.ErrInvalidParams) {
		t.Fatalf("invalid params: %v", err)
	}
}

func TestConstructorsCoverTheSameIDs(t *testing.T) {
	for id, ctor := range providers.Constructors() {
		if got := ctor(providers.Config{}).ID(); got != id {
			t.Errorf("constructor %q builds source %q", id, got)
		}
	}
}
