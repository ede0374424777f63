package identity

import (
	_ "embed"
	"strings"
	"unicode"
	"unicode/utf8"
)

//go:embed common_passwords.txt
var commonPasswordsText string

// commonPasswords is the embedded list, lower case.
var commonPasswords = func() map[string]bool {
	m := map[string]bool{}
	for line := range strings.Lines(commonPasswordsText) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			m[line] = true
		}
	}
	return m
}()

// sequences are runs people type instead of a password; a password that is
// a stretch of one of them (or of its reverse) is refused.
var sequences = []string{
	"abcdefghijklmnopqrstuvwxyz",
	"01234567890",
	"qwertyuiopasdfghjklzxcvbnm",
	"1qaz2wsx3edc4rfv5tgb6yhn7ujm8ik9ol0p",
	"1q2w3e4r5t6y7u8i9o0p",
}

// minDistinct is how many different characters a password needs
// ("aaaaaaaaaa" and "ababababab" are refused).
const minDistinct = 5

// CheckPassword applies the password policy beyond length (NIST SP 800-63B
// refuse values from lists of commonly used or compromised
// passwords, repetitive or sequential characters, and context-specific
// words such as the user's name and the service's). It returns the problem
// to show for the password field, or "" when the password is acceptable.
// email and name are the account's; either may be empty.
func CheckPassword(password, email, name string) string {
	n := utf8.RuneCountInString(password)
	if n < MinPasswordLen {
		return "must be at least 10 characters"
	}
	if n > MaxPasswordLen {
		return "must be at most 128 characters"
	}
	lower := strings.ToLower(password)
	distinct := map[rune]bool{}
	for _, r := range lower {
		distinct[r] = true
	}
	if len(distinct) < minDistinct {
		return "has too few different characters"
	}
	core := strings.TrimFunc(lower, func(r rune) bool { return !unicode.IsLetter(r) })
	if commonPasswords[lower] || commonPasswords[core] || isSequence(lower) {
		return "is too common; choose a passphrase of several unrelated words"
	}
	for _, word := range personalWords(email, name) {
		if strings.Contains(lower, word) {
			return "must not contain your email address or name"
		}
	}
	return ""
}

// isSequence reports whether s is a stretch of a keyboard or alphabet run.
func isSequence(s string) bool {
	for _, seq := range sequences {
		if strings.Contains(seq, s) || strings.Contains(reverse(seq), s) {
			return true
		}
	}
	return false
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// personalWords are the parts of the email and name a password must not
// contain: the email's local part and domain label, and each word of the
// name, lower case, when at least 4 characters long (shorter ones occur in
// ordinary words by chance).
func personalWords(email, name string) []string {
	var out []string
	add := func(w string) {
		w = strings.ToLower(strings.TrimSpace(w))
		if utf8.RuneCountInString(w) >= 4 {
			out = append(out, w)
		}
	}
	local, domain, _ := strings.Cut(email, "@")
	add(local)
	if label, _, ok := strings.Cut(domain, "."); ok {
		switch label {
		case "gmail", "yahoo", "outlook", "hotmail", "icloud", "example", "proton", "protonmail":
		default:
			add(label)
		}
	}
	for _, w := range strings.FieldsFunc(name, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		add(w)
	}
	return out
}
