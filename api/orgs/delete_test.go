package orgs_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/api/orgs"
	"github.com/proliferate/proliferate/consumers/enforcer"
	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/gatewaytest"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	domain "github.com/proliferate/proliferate/internal/orgs"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/snapshots"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func newDeletionEnv(t *testing.T) *apitest.Env {
	t.Helper()
	return apitest.New(t, []func(*api.Server) error{orgs.Register, identity.Register})
}

// orgKey creates an API key scoped to the org and returns it.
func orgKey(t *testing.T, env *apitest.Env, token, orgID string) string {
	t.Helper()
	var out map[string]any
	env.Do(t, "POST", "/api-keys", token, map[string]any{"name": "ci", "org_id": orgID}).Expect(t, 201, &out)
	k, _ := out["key"].(string)
	if k == "" {
		t.Fatalf("no key in %v", out)
	}
	return k
}

func deletionState(t *testing.T, env *apitest.Env, orgID string) string {
	t.Helper()
	var s string
	if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT coalesce((SELECT coalesce(delete_after::text, 'none')
		FROM organizations WHERE id = $1), 'gone')`, orgID).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Scheduling a deletion: only an owner of the organization, confirming
// with its exact name, never a personal organization; refusals change
// nothing. While pending the organization is read-only, its API keys are
// refused, nothing new starts, its people may leave; an owner restores it
// and everything works again.
func TestScheduleAndRestoreDeletion(t *testing.T) {
	env := newDeletionEnv(t)
	ctx := context.Background()
	tm := newTeam(t, env)
	var org domain.Membership
	env.Do(t, "GET", "/orgs/current", tm.Owner.Token, nil).Expect(t, 200, &org)
	key := orgKey(t, env, tm.Owner.Token, tm.OrgID)
	other := newTeam(t, env) // another organization's owner
	path := "/orgs/" + tm.OrgID
	confirm := map[string]any{"confirm_name": org.Name}

	// Refusals: members and admins 403, another organization's owner and
	// malformed ids 404, a wrong or missing confirmation 422, a personal
	// organization 409.
	env.Do(t, "DELETE", path, tm.Admin.Token, confirm).ExpectError(t, 403, httpapi.CodeForbidden)
	env.Do(t, "DELETE", path, tm.Member.Token, confirm).ExpectError(t, 403, httpapi.CodeForbidden)
	env.Do(t, "DELETE", path, other.Owner.Token, confirm).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "DELETE", "/orgs/not-a-uuid", tm.Owner.Token, confirm).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "DELETE", "/orgs/"+uuid.NewString(), tm.Owner.Token, confirm).ExpectError(t, 404, httpapi.CodeNotFound)
	body := env.Do(t, "DELETE", path, tm.Owner.Token, map[string]any{"confirm_name": strings.ToUpper(org.Name)}).
		ExpectError(t, 422, httpapi.CodeValidation)
	if raw, _ := json.Marshal(body.Error.Details); !strings.Contains(string(raw), `"field":"confirm_name"`) {
		t.Fatalf("details %s", raw)
	}
	env.Do(t, "DELETE", path, tm.Owner.Token, map[string]any{}).ExpectError(t, 422, httpapi.CodeValidation)
	personal := env.NewUser(t)
	var pers domain.Membership
	env.Do(t, "GET", "/orgs/current", personal.Token, nil).Expect(t, 200, &pers)
	env.Do(t, "DELETE", "/orgs/"+pers.ID, personal.Token, map[string]any{"confirm_name": pers.Name}).ExpectError(t, 409, domain.CodePersonalOrg)
	if deletionState(t, env, tm.OrgID) != "none" || deletionState(t, env, pers.ID) != "none" ||
		env.CountRows(t, "audit_log", "action LIKE 'org.deletion%'") != 0 {
		t.Fatal("a refused deletion changed something")
	}
	// Restoring what is not scheduled: 409; by a non-owner 403; by an outsider 404.
	env.Do(t, "POST", path+"/restore", tm.Owner.Token, nil).ExpectError(t, 409, domain.CodeNotPendingDeletion)

	// The owner schedules it: 202 with the grace period (ORG_DELETION_GRACE, 7 days).
	var d domain.Deletion
	env.Do(t, "DELETE", path, tm.Owner.Token, confirm).Expect(t, 202, &d)
	if d.ID != tm.OrgID || d.Name != org.Name || d.DeleteAfter.Sub(d.ScheduledAt) != 7*24*time.Hour ||
		d.ScheduledBy == nil || *d.ScheduledBy != tm.Owner.ID {
		t.Fatalf("deletion %+v", d)
	}
	var again domain.Deletion
	env.Do(t, "DELETE", path, tm.Owner.Token, confirm).Expect(t, 202, &again)
	if !again.DeleteAfter.Equal(d.DeleteAfter) || env.CountRows(t, "audit_log", "org_id = $1 AND action = 'org.deletion_schedule'", tm.OrgID) != 1 {
		t.Fatalf("a repeated schedule moved it: %+v", again)
	}
	// Members see the schedule.
	var cur domain.Membership
	env.Do(t, "GET", "/orgs/current", tm.Member.Token, nil).Expect(t, 200, &cur)
	if cur.DeleteAfter == nil || !cur.DeleteAfter.Equal(d.DeleteAfter) {
		t.Fatalf("current org %+v", cur)
	}

	// Pending: writes 409, API keys 403, new sessions and runs refused.
	env.Do(t, "PATCH", "/orgs/current", tm.Admin.Token, map[string]any{"name": "Renamed"}).ExpectError(t, 409, domain.CodePendingDeletion)
	env.Do(t, "POST", "/orgs/current/invitations", tm.Admin.Token, map[string]any{"email": "x-" + tm.Owner.Email, "role": "member"}).
		ExpectError(t, 409, domain.CodePendingDeletion)
	env.Do(t, "GET", "/orgs/current", key, nil).ExpectError(t, 403, domain.CodePendingDeletion)
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	store := &sessions.Store{Pool: env.Deps.Pool, Codec: codec}
	if _, _, err := store.Create(ctx, sessions.CreateInput{OrgID: tm.OrgID, CreatedBy: &tm.Owner.ID}); !errors.Is(err, sessions.ErrOrgPendingDeletion) {
		t.Fatalf("session created while pending: %v", err)
	}
	if n := env.CountRows(t, "sessions", "org_id = $1", tm.OrgID); n != 0 {
		t.Fatalf("%d sessions", n)
	}
	// Its people may still leave.
	env.Do(t, "POST", "/orgs/current/leave", tm.Member.Token, nil).Expect(t, 204, nil)

	// Restore: not by an admin (403) or an outsider (404); the owner can.
	env.Do(t, "POST", path+"/restore", tm.Admin.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	env.Do(t, "POST", path+"/restore", other.Owner.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
	var restored domain.Membership
	env.Do(t, "POST", path+"/restore", tm.Owner.Token, nil).Expect(t, 200, &restored)
	if restored.DeleteAfter != nil || deletionState(t, env, tm.OrgID) != "none" {
		t.Fatalf("restored %+v", restored)
	}
	env.Do(t, "POST", path+"/restore", tm.Owner.Token, nil).ExpectError(t, 409, domain.CodeNotPendingDeletion)
	env.Do(t, "GET", "/orgs/current", key, nil).Expect(t, 200, nil)
	env.Do(t, "PATCH", "/orgs/current", tm.Admin.Token, map[string]any{"name": org.Name + " 2"}).Expect(t, 200, nil)
	if _, _, err := store.Create(ctx, sessions.CreateInput{OrgID: tm.OrgID, CreatedBy: &tm.Owner.ID}); err != nil {
		t.Fatal(err)
	}
	if env.CountRows(t, "audit_log", "org_id = $1 AND action = 'org.deletion_cancel' AND actor_id = $2", tm.OrgID, tm.Owner.ID) != 1 {
		t.Fatal("restore not audited")
	}
	// The other organization never changed.
	if deletionState(t, env, other.OrgID) != "none" || env.CountRows(t, "members", "org_id = $1", other.OrgID) != 3 {
		t.Fatal("the other organization changed")
	}
}

// A restore after the grace period is refused: the deletion is under way.
func TestRestoreAfterGrace(t *testing.T) {
	env := newDeletionEnv(t)
	tm := newTeam(t, env)
	var org domain.Membership
	env.Do(t, "GET", "/orgs/current", tm.Owner.Token, nil).Expect(t, 200, &org)
	env.Do(t, "DELETE", "/orgs/"+tm.OrgID, tm.Owner.Token, map[string]any{"confirm_name": org.Name}).Expect(t, 202, nil)
	env.Exec(t, `UPDATE organizations SET delete_after = now() - interval '1 second' WHERE id = $1`, tm.OrgID)
	env.Do(t, "POST", "/orgs/"+tm.OrgID+"/restore", tm.Owner.Token, nil).ExpectError(t, 409, domain.CodeDeletionGraceOver)
}

// deletionWorld is the API, a real gateway with the simulated sandbox
// provider (as the billing enforcer's tests), and the org-deletion job
// pausing through that gateway.
type deletionWorld struct {
	env    *apitest.Env
	store  *sessions.Store
	hubs   *hub.Manager
	pauser domain.SessionPauser
	codec  *schemas.Codec
	// cleaner is the gateway's snapshot cleaner, over the simulated
	// provider.
	cleaner *snapshots.Cleaner
	prov    *agentsim.Provider
}

type gonePaused struct{ enforcer.GatewayPauser }

func (g gonePaused) Pause(ctx context.Context, orgID, sessionID, reason string) error {
	if err := g.GatewayPauser.Pause(ctx, orgID, sessionID, reason); err != nil && !errors.Is(err, enforcer.ErrGone) {
		return err
	}
	return nil
}

func newDeletionWorld(t *testing.T) *deletionWorld {
	t.Helper()
	env := newDeletionEnv(t)
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	prov := agentsim.NewProvider(agentsim.Options{})
	t.Cleanup(prov.Close)
	book := snapshots.New(snapshots.Deps{Pool: env.Deps.Pool, Providers: []sandbox.Provider{prov}})
	w := &deletionWorld{env: env, codec: codec, store: &sessions.Store{Pool: env.Deps.Pool, Codec: codec},
		cleaner: snapshots.NewCleaner(book, snapshots.CleanerOptions{}), prov: prov}
	g := gatewaytest.Start(t, gateway.Deps{Cfg: env.Deps.Cfg, Pool: env.Deps.Pool, Redis: env.Deps.Redis, Codec: codec,
		Sessions: w.store, Authenticator: env.Server.Authenticator()},
		hub.Deps{Provider: prov, Snapshots: book, Gate: domain.BootGate(env.Deps.Pool, nil)})
	w.hubs = g.Hubs
	w.pauser = gonePaused{enforcer.GatewayPauser{C: g.ServiceClient("org-deletion")}}
	return w
}

// running starts a session's sandbox through the gateway's hub.
func (w *deletionWorld) running(t *testing.T, orgID, userID string) string {
	t.Helper()
	id := sessionstest.New(t, w.env.Deps.Pool, orgID, sessionstest.Options{CreatedBy: userID})
	h, err := w.hubs.Hub(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureRuntimeReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	return id
}

// Schedule → the job pauses the running session through the gateway →
// the clock passes the grace period → finalize: a crash midway (after
// the integrations were disconnected) leaves the organization scheduled,
// the rerun deletes everything and publishes org.deleted on audit.events
// without secrets, a third run does nothing.
func TestFinalizeDeletion(t *testing.T) {
	w := newDeletionWorld(t)
	env := w.env
	ctx := context.Background()
	tm := newTeam(t, env)
	var org domain.Membership
	env.Do(t, "GET", "/orgs/current", tm.Owner.Token, nil).Expect(t, 200, &org)
	orgKey(t, env, tm.Owner.Token, tm.OrgID)
	const secretValue = "s3cr3t-deploy-value"
	if _, err := secrets.Create(ctx, env.Deps.Pool, env.Deps.Box, secrets.CreateInput{OrgID: tm.OrgID, Key: "DEPLOY_TOKEN", Value: secretValue}); err != nil {
		t.Fatal(err)
	}
	env.Exec(t, `INSERT INTO integrations (org_id, provider, integration_id, connection_id, provider_config_key, visibility, created_by)
		VALUES ($1, 'nango', 'linear', $2, 'linear', 'private', $3)`, tm.OrgID, "conn-"+uuid.NewString(), tm.Admin.ID)
	invite(t, env, tm.Admin.Token, "someone-"+tm.Owner.Email, auth.RoleMember)
	sid := w.running(t, tm.OrgID, tm.Owner.ID)
	bystander := newTeam(t, env)

	env.Do(t, "DELETE", "/orgs/"+tm.OrgID, tm.Owner.Token, map[string]any{"confirm_name": org.Name}).Expect(t, 202, nil)

	svc, err := integrations.New(integrations.Options{Cfg: env.Deps.Cfg, Pool: env.Deps.Pool, Redis: env.Deps.Redis, Box: env.Deps.Box})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	crashes := 1
	r := &domain.Reaper{Pool: env.Deps.Pool, Pauser: w.pauser, Now: func() time.Time { return now },
		Disconnect: func(ctx context.Context, orgID string) error {
			if err := svc.DisconnectOrg(ctx, orgID); err != nil {
				return err
			}
			if orgID == tm.OrgID && crashes > 0 { // the process dies right after disconnecting
				crashes--
				return errors.New("crash")
			}
			return nil
		}}

	// Within the grace period: the running session is paused (resumable
	// after a restore), nothing is deleted.
	res, err := r.Sweep(ctx)
	if err != nil || res.Paused < 1 {
		t.Fatalf("sweep %+v %v", res, err)
	}
	s, err := w.store.Get(ctx, "", sid)
	if err != nil || s.Status != sessions.StatusPaused || s.PauseReason == nil || *s.PauseReason != sessions.PauseOrgDeletion || s.SnapshotID == nil {
		t.Fatalf("session %+v %v", s, err)
	}
	// Resuming it is refused while the deletion is pending.
	h, err := w.hubs.Hub(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureRuntimeReady(ctx); err == nil {
		t.Fatal("a paused session resumed while its organization is pending deletion")
	} else if d, ok := billing.AsDenial(err); !ok || d.Code != domain.CodePendingDeletion {
		t.Fatalf("resume refused with %v", err)
	}
	if s, _ := w.store.Get(ctx, "", sid); s.Status != sessions.StatusPaused {
		t.Fatalf("session %s after a refused resume", s.Status)
	}
	if f, err := r.Finalize(ctx, tm.OrgID); err != nil || f.Deleted || deletionState(t, env, tm.OrgID) == "gone" {
		t.Fatalf("finalized within the grace period: %+v %v", f, err)
	}

	// Past the grace period. The first run crashes after disconnecting.
	now = now.Add(7*24*time.Hour + time.Minute)
	if f, err := r.Finalize(ctx, tm.OrgID); err == nil || !strings.Contains(err.Error(), "crash") {
		t.Fatalf("first finalize: %+v %v (state %s, now %s)", f, err, deletionState(t, env, tm.OrgID), now)
	}
	if deletionState(t, env, tm.OrgID) == "gone" || env.CountRows(t, "integrations", "org_id = $1", tm.OrgID) != 0 {
		t.Fatal("after the crash: the organization must remain, its integrations gone")
	}
	res, err = r.Sweep(ctx)
	if err != nil || res.Finalized < 1 || res.Failed != 0 {
		t.Fatalf("sweep %+v %v", res, err)
	}
	for table, col := range map[string]string{"organizations": "id", "members": "org_id", "invitations": "org_id", "sessions": "org_id",
		"secrets": "org_id", "api_keys": "org_id", "integrations": "org_id"} {
		if n := env.CountRows(t, table, col+" = $1", tm.OrgID); n != 0 {
			t.Fatalf("%d %s rows left", n, table)
		}
	}
	// The gateway's snapshot cleaner deletes the provider storage of the
	// deleted sessions' snapshots.
	if env.CountRows(t, "session_snapshots", "org_id = $1 AND session_id = $2 AND deleted_at IS NULL", tm.OrgID, sid) != 1 {
		t.Fatal("the paused session's snapshot is not in the books")
	}
	if _, err := w.cleaner.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if env.CountRows(t, "session_snapshots", "org_id = $1 AND delete_reason = 'session_deleted' AND provider_deleted_at IS NOT NULL", tm.OrgID) != 1 {
		t.Fatal("the snapshot was not deleted at the provider")
	}
	// Its former members have no active organization; the bystander's is untouched.
	env.Do(t, "GET", "/orgs/current", tm.Admin.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	if deletionState(t, env, bystander.OrgID) != "none" || env.CountRows(t, "members", "org_id = $1", bystander.OrgID) != 3 {
		t.Fatal("the bystander organization changed")
	}

	// org.delete on audit.events, through the outbox, once, without the secret.
	orgDeleted := func() []*schemas.AuditEvent {
		rows, err := env.Deps.Pool.Query(ctx, `SELECT value FROM outbox WHERE topic = $1 AND key = $2 ORDER BY id`, topics.AuditEvents, tm.OrgID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []*schemas.AuditEvent
		for rows.Next() {
			var v []byte
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(v), secretValue) {
				t.Fatal("the secret reached audit.events")
			}
			ev, err := w.codec.Decode(v)
			if err != nil {
				t.Fatal(err)
			}
			if p := ev.Payload.(*schemas.AuditEvent); p.Action == "org.delete" {
				out = append(out, p)
			}
		}
		return out
	}
	deleted := orgDeleted()
	if len(deleted) != 1 || deleted[0].ActorType != schemas.AuditActorSystem || deleted[0].DetailsJSON == nil ||
		!strings.Contains(*deleted[0].DetailsJSON, `"secrets":1`) || !strings.Contains(*deleted[0].DetailsJSON, org.Name) {
		t.Fatalf("org.delete events %+v", deleted)
	}

	// Again: nothing to do, nothing written.
	if f, err := r.Finalize(ctx, tm.OrgID); err != nil || f.Deleted {
		t.Fatalf("second finalize %+v %v", f, err)
	}
	if _, err := r.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if len(orgDeleted()) != 1 {
		t.Fatal("org.delete published twice")
	}
}
