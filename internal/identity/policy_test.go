package identity

import "testing"

func TestCheckPassword(t *testing.T) {
	for _, c := range []struct {
		pw, email, name string
		ok              bool
	}{
		{"correct horse battery", "ada@example.com", "Ada Lovelace", true},
		{"violet-anchor-meadow", "grace@hopper.dev", "Grace Hopper", true},
		{"9384756102", "", "", true},
		{"short", "", "", false},
		{"password123", "", "", false},
		{"Password2024!", "", "", false},
		{"123qwertyuiop", "", "", false},
		{"iloveyou!!!!", "", "", false},
		{"1234567890", "", "", false},
		{"0987654321", "", "", false},
		{"abcdefghijk", "", "", false},
		{"zyxwvutsrqp", "", "", false},
		{"1q2w3e4r5t6y", "", "", false},
		{"aaaaaaaaaaaa", "", "", false},
		{"abababababab", "", "", false},
		{"Proliferate!!1", "", "", false},
		{"my-lovelace-rocks", "ada@example.com", "Ada Lovelace", false},
		{"xx-adalovelace-xx", "adalovelace@example.com", "A", false},
		{"hopper-deploys-daily", "grace@hopper.dev", "G", false},
		{"ada is fine here!", "ada@example.com", "Ada", true}, // words under 4 characters are not refused
	} {
		got := CheckPassword(c.pw, c.email, c.name)
		if (got == "") != c.ok {
			t.Errorf("CheckPassword(%q, %q, %q) = %q, want ok=%v", c.pw, c.email, c.name, got, c.ok)
		}
	}
}
