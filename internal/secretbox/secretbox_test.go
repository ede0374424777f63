package secretbox_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/secretbox"
)

func key(kid string, fill byte) string {
	b := make([]byte, 32)
	for i := range b {
		b[i] = fill
	}
	return kid + ":" + base64.StdEncoding.EncodeToString(b)
}

func TestSealOpenRotate(t *testing.T) {
	old, err := secretbox.New([]string{key("k1", 1)})
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := old.Seal([]byte("sk-live-123"), []byte("secret:org:KEY"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "sk-live-123") {
		t.Fatal("plaintext visible in ciphertext")
	}
	// After rotation k2 seals, k1 still opens.
	rotated, _ := secretbox.New([]string{key("k2", 2), key("k1", 1)})
	pt, err := rotated.Open(sealed, []byte("secret:org:KEY"))
	if err != nil || string(pt) != "sk-live-123" {
		t.Fatalf("open after rotation: %q %v", pt, err)
	}
	if !rotated.NeedsReseal(sealed) {
		t.Fatal("a k1 value needs resealing under k2")
	}
	resealed, err := rotated.Reseal(sealed, []byte("secret:org:KEY"))
	if err != nil || secretbox.KeyID(resealed) != "k2" {
		t.Fatalf("reseal: %s %v", resealed, err)
	}
	// Wrong context, tampering, unknown keys: all ErrUndecryptable.
	for name, c := range map[string]struct {
		box  *secretbox.Box
		val  string
		data string
	}{
		"other row":    {rotated, sealed, "secret:org:OTHER"},
		"tampered":     {rotated, sealed[:len(sealed)-2] + "AA", "secret:org:KEY"},
		"key removed":  {mustNew(t, key("k3", 3)), sealed, "secret:org:KEY"},
		"garbage":      {rotated, "not a ciphertext", ""},
		"wrong format": {rotated, "v2.k1.abc", ""},
	} {
		if _, err := c.box.Open(c.val, []byte(c.data)); !errors.Is(err, secretbox.ErrUndecryptable) {
			t.Errorf("%s: want ErrUndecryptable, got %v", name, err)
		}
	}
}

func mustNew(t *testing.T, keys ...string) *secretbox.Box {
	b, err := secretbox.New(keys)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzOpen(f *testing.F) {
	b, _ := secretbox.New([]string{key("k1", 1)})
	s, _ := b.Seal([]byte("x"), nil)
	f.Add(s)
	f.Add("v1.k1.")
	f.Fuzz(func(t *testing.T, in string) {
		_, _ = b.Open(in, nil) // must never panic
	})
}
