// Package orgs is the domain of organizations: team orgs and their slugs,
// members and their roles, invitations, domain-based discovery, onboarding
// state and the super-admin's view of every user and org. The REST handlers
// in api/orgs are thin wrappers around Store.
//
// Every organization-scoped method takes the organization id from the
// caller's credential (never from the request body) and filters on it, so an
// id of another organization is simply "not found".
//
// # Membership changes are serialised per organization
//
// Every change of a membership (role change, removal, leave, invitation
// acceptance) runs in a transaction that first locks the organization's row
// (SELECT … FOR NO KEY UPDATE), then re-reads the caller's role and the
// target's role under that lock. Two concurrent requests on one organization
// therefore run one after the other, and the second one sees the first one's
// result: two owners demoting themselves at once cannot both succeed, one
// gets ErrLastOwner.
//
// # Personal organizations
//
// A personal organization is its owner's private workspace (created at
// signup). It never gets other members: invitations into it and
// allowed_domains on it are refused (409 personal_org), and it never appears
// in domain suggestions. People collaborate in team organizations, which
// anybody can create. The original system let the better-auth plugin invite
// into any organization, which made "personal" meaningless.
package orgs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	auditlog "github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/audit/auditdb"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// Store runs the domain's operations on Postgres.
type Store struct {
	Pool *pgxpool.Pool
	// Now is the clock (invitation expiry).
	Now func() time.Time
}

// Actor is who performs an operation, for authorization and the audit log.
type Actor struct {
	UserID string
	// ImpersonatorID is the super-admin acting as UserID, if any (recorded
	// in audit details).
	ImpersonatorID string
	RequestID      string
	// APIKeyID is the API key the user called with, if any (audit trail).
	APIKeyID string
}

// Kind classifies a domain error; the API maps each kind to one status.
type Kind int

const (
	KindNotFound  Kind = iota + 1 // 404
	KindForbidden                 // 403
	KindConflict                  // 409
	KindGone                      // 410
	KindInvalid                   // 422 on Field
)

// Error is a rule the request broke.
type Error struct {
	Kind Kind
	// Code is the stable API error code (conflicts, gone).
	Code string
	// Msg is for people; for KindNotFound it names the missing thing.
	Msg string
	// Field is the request field at fault (KindInvalid).
	Field string
}

func (e *Error) Error() string { return e.Msg }

func notFound(what string) *Error { return &Error{Kind: KindNotFound, Msg: what} }
func forbidden(msg string) *Error { return &Error{Kind: KindForbidden, Msg: msg} }
func conflict(code, msg string) *Error {
	return &Error{Kind: KindConflict, Code: code, Msg: msg}
}
func invalid(field, problem string) *Error {
	return &Error{Kind: KindInvalid, Field: field, Msg: problem}
}

// Stable error codes of the domain.
const (
	CodeSlugTaken           = "slug_taken"
	CodeLastOwner           = "last_owner"
	CodeAlreadyMember       = "already_member"
	CodePersonalOrg         = "personal_org"
	CodeInvitationExpired   = "invitation_expired"
	CodeInvitationNotActive = "invitation_not_pending"
	CodeNotImpersonating    = "not_impersonating"
)

// ErrLastOwner is returned when a change would leave an organization
// without an owner.
var ErrLastOwner = conflict(CodeLastOwner, "the organization's last owner cannot leave, be removed or be demoted; make another member owner first")

// IsKind reports whether err is a domain error of kind k.
func IsKind(err error, k Kind) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == k
}

// --- shared helpers ----------------------------------------------------------

// inTx runs fn in a transaction, committing when it returns nil. A domain
// error returned together with commit=true (see commitErr) still commits, for
// state changes that accompany a refusal (an invitation marked expired).
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	err = fn(tx)
	var ce commitErr
	if errors.As(err, &ce) {
		if cerr := tx.Commit(ctx); cerr != nil {
			return cerr
		}
		return ce.err
	}
	if err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// commitErr asks inTx to commit and then return err.
type commitErr struct{ err error }

func (c commitErr) Error() string { return c.err.Error() }
func (c commitErr) Unwrap() error { return c.err }

// lockOrg serialises membership changes of one organization (see the package
// comment) and returns whether it is personal. FOR NO KEY UPDATE does not
// block rows of other tables that merely reference the organization.
func lockOrg(ctx context.Context, tx pgx.Tx, orgID string) (personal bool, err error) {
	personal, err = orgsdb.New(tx).LockOrgForMembership(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, notFound("organization")
	}
	return personal, err
}

// roleIn returns user's role in org ("" when not a member), locking the
// membership row.
func roleIn(ctx context.Context, tx pgx.Tx, orgID, userID string) (auth.Role, error) {
	r, err := orgsdb.New(tx).LockMemberRole(ctx, orgsdb.LockMemberRoleParams{OrgID: orgID, UserID: userID})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return auth.Role(r), err
}

// actorRole is the caller's current role under the organization lock: the
// role on the credential was read before the lock and may be stale.
func actorRole(ctx context.Context, tx pgx.Tx, orgID, userID string) (auth.Role, error) {
	r, err := roleIn(ctx, tx, orgID, userID)
	if err == nil && r == "" {
		return "", forbidden("you are no longer a member of this organization")
	}
	return r, err
}

func countOwners(ctx context.Context, tx pgx.Tx, orgID string) (int, error) {
	n, err := orgsdb.New(tx).CountOwners(ctx, orgID)
	return int(n), err
}

// Audit is one audit_log row.
type Audit struct {
	OrgID      string // may be ""
	Action     string
	TargetType string
	TargetID   string
	Details    map[string]any
}

// audit writes an audit row in tx on behalf of a.
func audit(ctx context.Context, tx pgx.Tx, a Actor, e Audit) error {
	details := map[string]any{}
	for k, v := range e.Details {
		details[k] = v
	}
	if a.ImpersonatorID != "" {
		details["impersonator_id"] = a.ImpersonatorID
	}
	raw, err := json.Marshal(details)
	if err != nil {
		return err
	}
	err = auditdb.New(tx).InsertAuditLog(ctx, auditdb.InsertAuditLogParams{OrgID: nullable(e.OrgID), ActorID: nullable(a.UserID),
		Action: e.Action, TargetType: e.TargetType, TargetID: e.TargetID, Details: raw, RequestID: a.RequestID})
	if err != nil {
		return fmt.Errorf("write audit row %s: %w", e.Action, err)
	}
	// The organization's audit trail (audit.events, through the outbox in
	// this transaction).
	return auditlog.Emit(ctx, tx, auditlog.Event{OrgID: e.OrgID, Action: e.Action, TargetType: e.TargetType, TargetID: e.TargetID,
		Details: e.Details, Actor: auditlog.Actor{UserID: a.UserID, APIKeyID: a.APIKeyID, ImpersonatorID: a.ImpersonatorID, RequestID: a.RequestID}})
}

// nullable is s, or nil (SQL NULL) when it is empty.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// newToken returns a random URL-safe token and its hex SHA-256.
func newToken() (token, hash string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	token = base64.RawURLEncoding.EncodeToString(b)
	return token, HashToken(token)
}

// HashToken is how invitation tokens are stored and looked up.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
