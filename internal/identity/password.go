// Package identity is the credential domain code of the identity API:
// password hashing (argon2id), random bearer secrets and their hashes, slugs
// for personal organizations, and the service tokens the platform's own roles
// present to each other. It has no HTTP or database code.
package identity

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/crypto/argon2"
)

// Password length policy, in characters (Unicode code points).
const (
	MinPasswordLen = 10
	MaxPasswordLen = 128
)

// Argon2Params are the argon2id cost parameters. They are written into every
// hash (PHC string), so raising them later still verifies old hashes, and a
// login with an old hash re-hashes it (NeedsRehash).
type Argon2Params struct {
	Memory  uint32 // KiB
	Time    uint32 // iterations
	Threads uint8
	SaltLen uint32
	KeyLen  uint32
}

// DefaultParams follow the OWASP password storage recommendation for
// argon2id (19 MiB, 2 iterations, 1 thread).
var DefaultParams = Argon2Params{Memory: 19 * 1024, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}

// hashSlots bounds concurrent argon2 computations: each takes Memory KiB, so a
// burst of logins cannot exhaust the process's memory; excess requests queue.
var hashSlots = make(chan struct{}, max(2, 2*runtime.GOMAXPROCS(0)))

func acquire(ctx context.Context) error {
	select {
	case hashSlots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func release() { <-hashSlots }

// HashPassword returns the argon2id PHC string of password:
// $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash> (unpadded standard base64).
func HashPassword(ctx context.Context, password string) (string, error) {
	return hashWith(ctx, password, DefaultParams)
}

func hashWith(ctx context.Context, password string, p Argon2Params) (string, error) {
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	if err := acquire(ctx); err != nil {
		return "", err
	}
	defer release()
	key := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// ErrMalformedHash means a stored hash is not an argon2id PHC string.
var ErrMalformedHash = errors.New("identity: malformed password hash")

// parsePHC reads a hash written by HashPassword.
func parsePHC(phc string) (p Argon2Params, salt, key []byte, err error) {
	parts := strings.Split(phc, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, nil, nil, ErrMalformedHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return p, nil, nil, ErrMalformedHash
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &p.Threads); err != nil {
		return p, nil, nil, ErrMalformedHash
	}
	// Refuse absurd parameters from a corrupted row rather than allocating them.
	if p.Memory < 8 || p.Memory > 1<<20 || p.Time < 1 || p.Time > 16 || p.Threads < 1 {
		return p, nil, nil, ErrMalformedHash
	}
	b64 := base64.RawStdEncoding
	if salt, err = b64.DecodeString(parts[4]); err != nil || len(salt) < 8 {
		return p, nil, nil, ErrMalformedHash
	}
	if key, err = b64.DecodeString(parts[5]); err != nil || len(key) < 16 || len(key) > 64 {
		return p, nil, nil, ErrMalformedHash
	}
	p.SaltLen, p.KeyLen = uint32(len(salt)), uint32(len(key))
	return p, salt, key, nil
}

// VerifyPassword reports whether password matches the PHC hash, comparing in
// constant time, and whether the hash should be replaced because its
// parameters are not the current ones.
func VerifyPassword(ctx context.Context, password, phc string) (ok, needsRehash bool, err error) {
	p, salt, want, err := parsePHC(phc)
	if err != nil {
		return false, false, err
	}
	if err := acquire(ctx); err != nil {
		return false, false, err
	}
	defer release()
	got := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
	ok = subtle.ConstantTimeCompare(got, want) == 1
	return ok, ok && p != DefaultParams, nil
}

// dummyHash is a hash of a random password with the default parameters,
// computed on first use.
var dummyHash = sync.OnceValue(func() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h, err := hashWith(context.Background(), base64.RawStdEncoding.EncodeToString(b), DefaultParams)
	if err != nil {
		panic(err)
	}
	return h
})

// DummyVerify spends the time of a password check against a hash that
// matches nothing. Login calls it when the email is unknown (or the account
// has no password), so response timing does not tell which emails exist.
func DummyVerify(ctx context.Context, password string) error {
	_, _, err := VerifyPassword(ctx, password, dummyHash())
	return err
}
