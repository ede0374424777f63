package identity

import (
	"strings"
	"time"
	"unicode"

	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity"
)

// SignupRequest creates an account. The password is 10–128 characters and
// passes identity.CheckPassword (not a common password or a keyboard run,
// not containing the email or name).
type SignupRequest struct {
	Email    string `json:"email" binding:"required,email,max=254"`
	Password string `json:"password" binding:"required,min=10,max=128"`
	Name     string `json:"name" binding:"required,max=100"`
}

// Validate rejects a blank name and control characters.
func (r *SignupRequest) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	if strings.TrimSpace(r.Name) == "" {
		fes = append(fes, httpapi.FieldError{Field: "name", Problem: "must not be blank"})
	} else if hasControl(r.Name) {
		fes = append(fes, httpapi.FieldError{Field: "name", Problem: "must not contain control characters"})
	}
	if hasControl(r.Email) {
		fes = append(fes, httpapi.FieldError{Field: "email", Problem: "must not contain control characters"})
	}
	if problem := identity.CheckPassword(r.Password, r.Email, r.Name); problem != "" {
		fes = append(fes, httpapi.FieldError{Field: "password", Problem: problem})
	}
	return fes
}

// hasControl reports whether s has a control character (NUL cannot even be
// stored in a text column).
func hasControl(s string) bool { return strings.IndexFunc(s, unicode.IsControl) >= 0 }

// LoginRequest logs in with a password.
type LoginRequest struct {
	Email    string `json:"email" binding:"required,max=254"`
	Password string `json:"password" binding:"required,max=128"`
}

// Validate rejects control characters in the email.
func (r *LoginRequest) Validate() []httpapi.FieldError {
	if hasControl(r.Email) {
		return []httpapi.FieldError{{Field: "email", Problem: "must not contain control characters"}}
	}
	return nil
}

// RefreshRequest exchanges a refresh token.
type RefreshRequest struct {
	RefreshToken string `json:"refresh_token" binding:"required,max=200"`
}

// PasswordResetRequest asks for a password reset link.
type PasswordResetRequest struct {
	Email string `json:"email" binding:"required,email,max=254"`
}

// Validate rejects control characters.
func (r *PasswordResetRequest) Validate() []httpapi.FieldError {
	if hasControl(r.Email) {
		return []httpapi.FieldError{{Field: "email", Problem: "must not contain control characters"}}
	}
	return nil
}

// PasswordResetRequested is the answer to every reset request, whether or
// not an account has the address.
type PasswordResetRequested struct {
	Status  string `json:"status" doc:"always accepted"`
	Message string `json:"message"`
}

// ResetPasswordRequest sets a new password with the token of a reset link.
type ResetPasswordRequest struct {
	Token    string `json:"token" binding:"required,max=200"`
	Password string `json:"password" binding:"required,min=10,max=128"`
}

// PasswordResetDone confirms a reset.
type PasswordResetDone struct {
	Status          string `json:"status" doc:"always password_reset"`
	SessionsRevoked int    `json:"sessions_revoked" doc:"login sessions signed out (every one of the person's)"`
}

// VerifyEmailRequest carries the token of a verification link.
type VerifyEmailRequest struct {
	Token string `json:"token" binding:"required,max=200"`
}

// VerifyEmailResponse confirms the verification.
type VerifyEmailResponse struct {
	Email         string `json:"email"`
	EmailVerified bool   `json:"email_verified"`
}

// User is a person as the API shows them.
type User struct {
	ID            string    `json:"id"`
	Email         string    `json:"email"`
	Name          string    `json:"name"`
	Image         *string   `json:"image"`
	EmailVerified bool      `json:"email_verified"`
	ActiveOrgID   *string   `json:"active_org_id"`
	CreatedAt     time.Time `json:"created_at"`
}

// AuthResponse is what signup, login and refresh return.
type AuthResponse struct {
	User                  User      `json:"user"`
	TokenType             string    `json:"token_type" doc:"always Bearer"`
	AccessToken           string    `json:"access_token"`
	AccessTokenExpiresAt  time.Time `json:"access_token_expires_at"`
	RefreshToken          string    `json:"refresh_token" doc:"shown once; exchange it at /auth/refresh before refresh_token_expires_at"`
	RefreshTokenExpiresAt time.Time `json:"refresh_token_expires_at"`
}

// Me is the caller.
type Me struct {
	User
	// ActiveOrgID (from User) is the organization requests act in: the
	// active organization, or the key's organization for an org-scoped API key;
	// null when the person is no longer a member of it.
	Role           *string `json:"role" doc:"role in the active organization"`
	IsSuperAdmin   bool    `json:"is_super_admin"`
	AuthKind       string  `json:"auth_kind" doc:"user (access token) or api_key"`
	APIKeyID       *string `json:"api_key_id,omitempty"`
	ImpersonatorID *string `json:"impersonator_id,omitempty"`
}

// CreateAPIKeyRequest creates an API key. Without expires_in_days the key
// never expires; with org_id it always acts in that organization (the caller
// must be a member).
type CreateAPIKeyRequest struct {
	Name          string  `json:"name" binding:"required,max=100"`
	ExpiresInDays *int    `json:"expires_in_days" binding:"omitempty,min=1,max=3650"`
	OrgID         *string `json:"org_id" binding:"omitempty,uuid"`
}

// Validate rejects a blank name and control characters.
func (r *CreateAPIKeyRequest) Validate() []httpapi.FieldError {
	if strings.TrimSpace(r.Name) == "" {
		return []httpapi.FieldError{{Field: "name", Problem: "must not be blank"}}
	}
	if hasControl(r.Name) {
		return []httpapi.FieldError{{Field: "name", Problem: "must not contain control characters"}}
	}
	return nil
}

// APIKey is a key without its secret.
type APIKey struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix" doc:"the key's first characters, to recognise it"`
	OrgID      *string    `json:"org_id"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at" doc:"updated at most once a minute"`
	ExpiresAt  *time.Time `json:"expires_at"`
}

// CreatedAPIKey is a new key with its secret, shown only in this response.
type CreatedAPIKey struct {
	APIKey
	Key string `json:"key" doc:"the secret (pk_…); store it now, it is never shown again"`
}
