package orgs_test

import (
	"sync"
	"testing"

	"github.com/proliferate/proliferate/internal/httpapi"
	domain "github.com/proliferate/proliferate/internal/orgs"
)

func TestOnboarding(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)

	var st domain.Onboarding
	env.Do(t, "GET", "/onboarding", tm.Member.Token, nil).Expect(t, 200, &st)
	if !st.HasOrg || st.OrgID != tm.OrgID || st.OnboardingComplete || st.TrialRequested || st.Trial != nil ||
		st.MemberCount != 3 || st.RepoCount != 0 || st.BillingState != "unconfigured" || st.IsPersonal {
		t.Fatalf("status %+v", st)
	}

	// Complete: admins and owners; idempotent.
	env.Do(t, "POST", "/onboarding/complete", tm.Member.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	if env.CountRows(t, "organizations", "id = $1 AND onboarding_complete", tm.OrgID) != 0 {
		t.Fatal("member completed onboarding")
	}
	env.Do(t, "POST", "/onboarding/complete", tm.Admin.Token, nil).Expect(t, 200, &st)
	if !st.OnboardingComplete {
		t.Fatalf("status %+v", st)
	}
	env.Do(t, "POST", "/onboarding/complete", tm.Owner.Token, nil).Expect(t, 200, &st)
	if env.CountRows(t, "audit_log", "org_id = $1 AND action = 'onboarding.complete'", tm.OrgID) != 1 {
		t.Fatal("completion audited more than once")
	}

	// Trial: owners only, recorded once.
	for _, u := range []string{tm.Member.Token, tm.Admin.Token} {
		env.Do(t, "POST", "/onboarding/start-trial", u, map[string]any{"plan": "pro"}).ExpectError(t, 403, httpapi.CodeForbidden)
	}
	if env.CountRows(t, "trial_requests", "org_id = $1", tm.OrgID) != 0 {
		t.Fatal("refused trial request written")
	}
	var tr, tr2 domain.TrialRequest
	env.Do(t, "POST", "/onboarding/start-trial", tm.Owner.Token, map[string]any{"plan": "pro"}).Expect(t, 201, &tr)
	if tr.Plan != "pro" || tr.RequestedBy == nil || *tr.RequestedBy != tm.Owner.ID {
		t.Fatalf("trial %+v", tr)
	}
	env.Do(t, "POST", "/onboarding/start-trial", tm.Owner.Token, map[string]any{"plan": "team"}).Expect(t, 200, &tr2)
	if tr2.ID != tr.ID || tr2.Plan != "pro" {
		t.Fatalf("second request %+v, first %+v", tr2, tr)
	}
	if env.CountRows(t, "trial_requests", "org_id = $1", tm.OrgID) != 1 {
		t.Fatal("trial requested twice")
	}
	env.Do(t, "GET", "/onboarding", tm.Member.Token, nil).Expect(t, 200, &st)
	if !st.TrialRequested || st.Trial == nil || st.Trial.ID != tr.ID {
		t.Fatalf("status %+v", st)
	}

	// Concurrent first requests: one record, one 201.
	tm2 := newTeam(t, env)
	var wg sync.WaitGroup
	statuses := make([]int, 4)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = env.Do(t, "POST", "/onboarding/start-trial", tm2.Owner.Token, map[string]any{"plan": "pro"}).Status
		}()
	}
	wg.Wait()
	created := 0
	for _, s := range statuses {
		switch s {
		case 201:
			created++
		case 200:
		default:
			t.Fatalf("statuses %v", statuses)
		}
	}
	if created != 1 || env.CountRows(t, "trial_requests", "org_id = $1", tm2.OrgID) != 1 {
		t.Fatalf("statuses %v", statuses)
	}

	// Without an active organization: has_org=false, not an error.
	u := env.NewUser(t)
	env.Exec(t, `UPDATE users SET active_org_id = NULL WHERE id = $1`, u.ID)
	var none domain.Onboarding
	env.Do(t, "GET", "/onboarding", u.Token, nil).Expect(t, 200, &none)
	if st = none; st.HasOrg || st.OrgID != "" {
		t.Fatalf("status %+v", st)
	}
	env.Do(t, "POST", "/onboarding/complete", u.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
}
