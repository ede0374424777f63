// Package secretbox encrypts secrets at rest with AES-256-GCM. Ciphertexts
// carry the id of the key that sealed them, so keys rotate: the first
// configured key seals, every configured key opens, and Reseal moves old
// ciphertexts to the active key.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Box seals and opens values.
type Box struct {
	aeads  map[string]cipher.AEAD
	active string
}

// ErrUndecryptable means a ciphertext is malformed, was sealed with a key that
// is no longer configured, or was tampered with. It never says which.
var ErrUndecryptable = errors.New("secretbox: cannot decrypt value")

// New parses kid:base64 keys of exactly 32 bytes (config.EncryptionKeys).
func New(keys []string) (*Box, error) {
	b := &Box{aeads: map[string]cipher.AEAD{}}
	for i, k := range keys {
		kid, b64, ok := strings.Cut(k, ":")
		raw, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || len(raw) != 32 || strings.Contains(kid, ".") {
			return nil, fmt.Errorf("secretbox: key %d is not kid:base64 of 32 bytes", i+1)
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		b.aeads[kid] = aead
		if i == 0 {
			b.active = kid
		}
	}
	if b.active == "" {
		return nil, errors.New("secretbox: no keys")
	}
	return b, nil
}

// Seal encrypts plaintext. additional binds the ciphertext to its context
// (for example "secret:<org id>:<key>") so a ciphertext copied to another row
// does not open there.
func (b *Box) Seal(plaintext, additional []byte) (string, error) {
	aead := b.aeads[b.active]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	ct := aead.Seal(nonce, nonce, plaintext, additional)
	return "v1." + b.active + "." + base64.RawStdEncoding.EncodeToString(ct), nil
}

// Open decrypts what Seal produced with the same additional data.
func (b *Box) Open(sealed string, additional []byte) ([]byte, error) {
	parts := strings.SplitN(sealed, ".", 3)
	if len(parts) != 3 || parts[0] != "v1" {
		return nil, ErrUndecryptable
	}
	aead, ok := b.aeads[parts[1]]
	if !ok {
		return nil, ErrUndecryptable
	}
	ct, err := base64.RawStdEncoding.DecodeString(parts[2])
	if err != nil || len(ct) < aead.NonceSize() {
		return nil, ErrUndecryptable
	}
	pt, err := aead.Open(nil, ct[:aead.NonceSize()], ct[aead.NonceSize():], additional)
	if err != nil {
		return nil, ErrUndecryptable
	}
	return pt, nil
}

// KeyID returns the id of the key that sealed a value ("" if malformed).
func KeyID(sealed string) string {
	parts := strings.SplitN(sealed, ".", 3)
	if len(parts) != 3 {
		return ""
	}
	return parts[1]
}

// NeedsReseal reports whether sealed uses a key other than the active one.
func (b *Box) NeedsReseal(sealed string) bool { return KeyID(sealed) != b.active }

// Reseal re-encrypts a value under the active key.
func (b *Box) Reseal(sealed string, additional []byte) (string, error) {
	pt, err := b.Open(sealed, additional)
	if err != nil {
		return "", err
	}
	return b.Seal(pt, additional)
}
