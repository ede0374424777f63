package analyticsapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	analyticsapi "github.com/proliferate/proliferate/api/analytics"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/analytics"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// materialize applies what the tool-materializer group would.
func materialize(t *testing.T, e *apitest.Env, calls []analytics.ToolCall, sess []analytics.Session, usage []analytics.UsageDelta) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, e.Deps.Pool, func(tx pgx.Tx) error {
		if err := analytics.ApplyToolCalls(ctx, tx, calls); err != nil {
			return err
		}
		return analytics.ApplyUsage(ctx, tx, sess, usage)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestToolsAndUsageOrgScoped(t *testing.T) {
	e := apitest.New(t, []func(*api.Server) error{analyticsapi.Register})
	alice, mallory := e.NewUser(t), e.NewUser(t)
	sess := sessionstest.New(t, e.Deps.Pool, alice.OrgID, sessionstest.Options{CreatedBy: alice.ID, Status: "stopped"})
	day := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	ms := func(v int64) *int64 { return &v }
	var calls []analytics.ToolCall
	for i := range 20 {
		status := "completed"
		if i == 0 {
			status = "error"
		}
		calls = append(calls, analytics.ToolCall{EventID: uuid.NewString(), OrgID: alice.OrgID, SessionID: sess, ToolCallID: uuid.NewString(),
			Source: analytics.SourceTranscript, ToolName: "bash", Status: status, DurationMS: ms(100), FinishedAt: &day})
	}
	materialize(t, e, calls,
		[]analytics.Session{{SessionID: sess, OrgID: alice.OrgID, UserID: alice.ID}},
		[]analytics.UsageDelta{{Key: uuid.NewString(), OrgID: alice.OrgID, SessionID: sess, At: day, Messages: 3, ActiveSeconds: 60, PRs: 1, CreditsMicros: 2_000_000},
			{Key: uuid.NewString(), OrgID: alice.OrgID, SessionID: sess, At: day, InputTokens: 1200, OutputTokens: 340, CacheReadTokens: 5000, CacheWriteTokens: 60}})

	var tools analyticsapi.Tools
	e.Do(t, http.MethodGet, "/analytics/tools?from=2026-03-01&to=2026-03-31", alice.Token, nil).Expect(t, http.StatusOK, &tools)
	if len(tools.Tools) != 1 || tools.Tools[0].Calls != 20 || tools.Tools[0].Failures != 1 || tools.Tools[0].P50MS < 93 || tools.Tools[0].P95MS > 108 {
		t.Fatalf("tools = %+v", tools)
	}
	var usage analyticsapi.Usage
	e.Do(t, http.MethodGet, "/analytics/usage?from=2026-03-01&to=2026-03-31&by=person", alice.Token, nil).Expect(t, http.StatusOK, &usage)
	if len(usage.Days) != 1 || usage.Days[0].Key != alice.ID || usage.Days[0].Day != "2026-03-02" || usage.Days[0].CreditsMicros != 2_000_000 || usage.Days[0].PRs != 1 {
		t.Fatalf("usage = %+v", usage)
	}
	e.Do(t, http.MethodGet, "/analytics/usage?from=2026-03-01&to=2026-03-31", alice.Token, nil).Expect(t, http.StatusOK, &usage)
	if usage.By != "automation" || len(usage.Days) != 1 || usage.Days[0].Key != "" || usage.Days[0].Messages != 3 {
		t.Fatalf("usage by automation = %+v", usage)
	}
	var st analyticsapi.SessionTools
	e.Do(t, http.MethodGet, "/analytics/sessions/"+sess+"/tools", alice.Token, nil).Expect(t, http.StatusOK, &st)
	if len(st.Calls) != 20 {
		t.Fatalf("session calls = %d", len(st.Calls))
	}
	var su analytics.SessionUsage
	e.Do(t, http.MethodGet, "/analytics/sessions/"+sess+"/usage", alice.Token, nil).Expect(t, http.StatusOK, &su)
	if want := (analytics.SessionUsage{Messages: 3, ActiveSeconds: 60, PRs: 1, CreditsMicros: 2_000_000,
		InputTokens: 1200, OutputTokens: 340, CacheReadTokens: 5000, CacheWriteTokens: 60}); su != want {
		t.Fatalf("session usage = %+v, want %+v", su, want)
	}
	// A session with no usage yet: zeros, not 404.
	fresh := sessionstest.New(t, e.Deps.Pool, alice.OrgID, sessionstest.Options{CreatedBy: alice.ID, Status: "running"})
	e.Do(t, http.MethodGet, "/analytics/sessions/"+fresh+"/usage", alice.Token, nil).Expect(t, http.StatusOK, &su)
	if su != (analytics.SessionUsage{}) {
		t.Fatalf("fresh session usage = %+v", su)
	}
	e.Do(t, http.MethodGet, "/analytics/sessions/not-a-uuid/usage", alice.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")

	// Another organization sees nothing of it.
	e.Do(t, http.MethodGet, "/analytics/tools?from=2026-03-01&to=2026-03-31", mallory.Token, nil).Expect(t, http.StatusOK, &tools)
	e.Do(t, http.MethodGet, "/analytics/usage?from=2026-03-01&to=2026-03-31&by=person", mallory.Token, nil).Expect(t, http.StatusOK, &usage)
	if len(tools.Tools) != 0 || len(usage.Days) != 0 {
		t.Fatalf("another organization sees %+v, %+v", tools, usage)
	}
	e.Do(t, http.MethodGet, "/analytics/sessions/"+sess+"/tools", mallory.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")
	e.Do(t, http.MethodGet, "/analytics/sessions/"+sess+"/usage", mallory.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")
	e.Do(t, http.MethodGet, "/analytics/sessions/"+uuid.NewString()+"/usage", alice.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")

	// The default range is the 30 days up to today.
	e.Do(t, http.MethodGet, "/analytics/tools", alice.Token, nil).Expect(t, http.StatusOK, &tools)
	if to, _ := time.Parse(time.DateOnly, tools.To); tools.From != to.AddDate(0, 0, -29).Format(time.DateOnly) {
		t.Fatalf("default range %s..%s", tools.From, tools.To)
	}
	// Bad dates and ranges: 422 with the field.
	for _, q := range []string{"from=2026-13-01", "to=yesterday", "from=2026-03-05&to=2026-03-01", "from=2025-01-01&to=2026-03-01"} {
		e.Do(t, http.MethodGet, "/analytics/tools?"+q, alice.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
	}
	e.Do(t, http.MethodGet, "/analytics/usage?by=repo", alice.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
	// Unauthenticated.
	e.Do(t, http.MethodGet, "/analytics/tools", "", nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
}
