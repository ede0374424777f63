package orgs

import (
	"crypto/rand"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Slugs are 3–48 characters of lowercase letters, digits and dashes, starting
// and ending with a letter or digit, without two dashes in a row.
var slugRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

const (
	SlugMin = 3
	SlugMax = 48
	NameMax = 100
	LogoMax = 2048
	// DomainsMax is how many allowed domains an organization may list.
	DomainsMax = 20
)

// SlugProblem says what is wrong with a slug ("" when valid).
func SlugProblem(s string) string {
	switch {
	case len(s) < SlugMin || len(s) > SlugMax:
		return "must be 3 to 48 characters"
	case !slugRE.MatchString(s):
		return "must be lowercase letters, digits and single dashes, starting and ending with a letter or digit"
	}
	return ""
}

// Slugify derives a slug from a name: ASCII letters and digits kept
// (lowercased), everything else a single dash; too short names are padded
// with "org". The caller appends a random suffix on collision.
func Slugify(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	s := b.String()
	if len(s) > SlugMax-suffixLen {
		s = strings.TrimRight(s[:SlugMax-suffixLen], "-")
	}
	if len(s) < SlugMin {
		s = strings.Trim("org-"+s, "-")
	}
	return s
}

const suffixLen = 7 // "-" + 6 characters

// withSuffix appends a random suffix (base36) to a slug.
func withSuffix(slug string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, suffixLen-1)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return slug + "-" + string(b)
}

// NameProblem validates an organization name (already trimmed).
func NameProblem(n string) string {
	switch {
	case n == "":
		return "is required"
	case utf8.RuneCountInString(n) > NameMax:
		return "must be at most 100 characters"
	case strings.ContainsFunc(n, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "must not contain control characters"
	}
	return ""
}

// LogoProblem validates a logo URL ("" clears the logo).
func LogoProblem(l string) string {
	if l == "" {
		return ""
	}
	if len(l) > LogoMax {
		return "must be at most 2048 characters"
	}
	u, err := url.Parse(l)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return "must be an http(s) URL"
	}
	return ""
}

var labelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
var tldRE = regexp.MustCompile(`^[a-z]{2,63}$`)

// NormalizeDomain lowercases and checks an email domain (acme.com,
// eng.acme.co.uk): at least two labels of letters, digits and inner dashes,
// an alphabetic top-level label, at most 253 characters.
func NormalizeDomain(d string) (string, string) {
	d = strings.ToLower(strings.TrimSpace(d))
	if d == "" {
		return "", "must not be empty"
	}
	if len(d) > 253 {
		return "", "must be at most 253 characters"
	}
	labels := strings.Split(d, ".")
	if len(labels) < 2 || !tldRE.MatchString(labels[len(labels)-1]) {
		return "", "must be a domain name such as example.com"
	}
	for _, l := range labels {
		if !labelRE.MatchString(l) {
			return "", "must be a domain name such as example.com"
		}
	}
	if slices.Contains(publicEmailDomains, d) {
		return "", "is a public email provider; anybody can have an address there"
	}
	return d, ""
}

// publicEmailDomains can never be an organization's allowed domain: everybody
// can get an address there, so listing one would suggest the organization to
// strangers.
var publicEmailDomains = []string{
	"gmail.com", "googlemail.com", "outlook.com", "hotmail.com", "live.com", "msn.com",
	"yahoo.com", "ymail.com", "icloud.com", "me.com", "mac.com", "aol.com", "proton.me",
	"protonmail.com", "pm.me", "gmx.com", "gmx.net", "gmx.de", "web.de", "mail.com",
	"yandex.com", "yandex.ru", "mail.ru", "zoho.com", "fastmail.com", "hey.com", "qq.com",
	"163.com", "126.com", "tutanota.com",
}

// EmailDomain is the lowercased domain of an address ("" when none).
func EmailDomain(email string) string {
	i := strings.LastIndexByte(email, '@')
	if i < 0 || i == len(email)-1 {
		return ""
	}
	return strings.ToLower(email[i+1:])
}
