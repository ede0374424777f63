package dotenv_test

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/proliferate/proliferate/internal/dotenv"
)

type kv struct{ Key, Value string }

func pairs(es []dotenv.Entry) []kv {
	out := []kv{}
	for _, e := range es {
		out = append(out, kv{e.Key, e.Value})
	}
	return out
}

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		want     []kv
		lines    []int    // lines of the entries, when checked
		problems []string // "line N: substring"
	}{
		{name: "empty", text: "", want: []kv{}},
		{name: "simple", text: "A=1\nB=two\n", want: []kv{{"A", "1"}, {"B", "two"}}, lines: []int{1, 2}},
		{name: "no trailing newline", text: "A=1", want: []kv{{"A", "1"}}},
		{name: "blank lines and comments", text: "\n# comment\n   # indented comment\n\t\nA=1\n\n", want: []kv{{"A", "1"}}, lines: []int{5}},
		{name: "crlf", text: "A=1\r\nB=\"x\"\r\n", want: []kv{{"A", "1"}, {"B", "x"}}},
		{name: "bom", text: "\uFEFFA=1", want: []kv{{"A", "1"}}},
		{name: "export prefix", text: "export A=1\nexport\tB=2\n  export   C=3", want: []kv{{"A", "1"}, {"B", "2"}, {"C", "3"}}},
		{name: "export as a key", text: "export=1", want: []kv{{"export", "1"}}},
		{name: "spaces around equals", text: "A = 1\nB\t=\t2", want: []kv{{"A", "1"}, {"B", "2"}}},
		{name: "unquoted trimmed", text: "A=   spaced value   \t", want: []kv{{"A", "spaced value"}}},
		{name: "inline comment after space", text: "A=value # comment\nB=value\t# tab comment", want: []kv{{"A", "value"}, {"B", "value"}}},
		{name: "hash without preceding space is data", text: "A=a#b\nB=#notacomment\nC=url#frag #c", want: []kv{{"A", "a#b"}, {"B", "#notacomment"}, {"C", "url#frag"}}},
		{name: "comment right after equals", text: "A= # only a comment", want: []kv{{"A", ""}}},
		{name: "empty value", text: "A=\nB=\"\"\nC=''", want: []kv{{"A", ""}, {"B", ""}, {"C", ""}}},
		{name: "equals in value", text: "A=b=c==", want: []kv{{"A", "b=c=="}}},
		{name: "single quotes literal", text: `A='a\nb "c" #d $X'`, want: []kv{{"A", `a\nb "c" #d $X`}}},
		{name: "double quote escapes", text: `A="l1\nl2\tt\r \"q\" \\ \x #h"`, want: []kv{{"A", "l1\nl2\tt\r \"q\" \\ \\x #h"}}},
		{name: "comment after quoted", text: "A=\"v\"   # c\nB='w' #c", want: []kv{{"A", "v"}, {"B", "w"}}},
		{name: "quoted keeps surrounding spaces", text: `A="  x  "`, want: []kv{{"A", "  x  "}}},
		{name: "multi-line double quoted", text: "A=\"first\nsecond\n\"\nB=2", want: []kv{{"A", "first\nsecond\n"}, {"B", "2"}}, lines: []int{1, 4}},
		{name: "multi-line single quoted", text: "X=1\nKEY='-----BEGIN KEY-----\nabc\n-----END KEY-----'\nY=2", want: []kv{{"X", "1"}, {"KEY", "-----BEGIN KEY-----\nabc\n-----END KEY-----"}, {"Y", "2"}}, lines: []int{1, 2, 5}},
		{name: "interpolation is literal", text: "A=${HOME}/x", want: []kv{{"A", "${HOME}/x"}}},
		{name: "unicode value", text: "A=héllo wörld ✓", want: []kv{{"A", "héllo wörld ✓"}}},
		{name: "underscore keys", text: "_A=1\na_b_9=2", want: []kv{{"_A", "1"}, {"a_b_9", "2"}}},

		{name: "invalid key digit", text: "9A=1\nB=2", want: []kv{{"B", "2"}}, problems: []string{"line 1: invalid key"}},
		{name: "invalid key dash", text: "A=1\nMY-KEY=2", want: []kv{{"A", "1"}}, problems: []string{"line 2: invalid key"}},
		{name: "empty key", text: "=value", want: []kv{}, problems: []string{"line 1: invalid key"}},
		{name: "too long key", text: strings.Repeat("K", 129) + "=1\n" + strings.Repeat("K", 128) + "=2", want: []kv{{strings.Repeat("K", 128), "2"}}, problems: []string{"line 1: invalid key"}},
		{name: "line without equals", text: "A=1\njust-a-token\nB=2", want: []kv{{"A", "1"}, {"B", "2"}}, problems: []string{"line 2: no '=' found"}},
		{name: "key then text", text: "A B=1", want: []kv{}, problems: []string{"line 1: no '=' found"}},
		{name: "bare export", text: "export\nexport FOO", want: []kv{}, problems: []string{"line 1: no '='", "line 2: no '='"}},
		{name: "duplicate key", text: "A=1\nB=2\nA=3", want: []kv{{"A", "1"}, {"B", "2"}}, problems: []string{"line 3: duplicate key A (first defined on line 1)"}},
		{name: "unterminated double quote resumes next line", text: "A=\"open\nB=2", want: []kv{{"B", "2"}}, problems: []string{"line 1: unterminated quoted value"}},
		{name: "unterminated single quote", text: "A='open", want: []kv{}, problems: []string{"line 1: unterminated"}},
		{name: "text after closing quote", text: "A=\"x\"y\nB=2", want: []kv{{"B", "2"}}, problems: []string{"line 1: unexpected text after the closing quote"}},
		{name: "invalid key with multi-line value", text: "1X=\"a\nb\"\nC=3", want: []kv{{"C", "3"}}, problems: []string{"line 1: invalid key"}, lines: []int{3}},
		{name: "trailing backslash unterminated", text: `A="abc\`, want: []kv{}, problems: []string{"line 1: unterminated"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries, problems := dotenv.Parse(tt.text)
			if got := pairs(entries); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("entries %q, want %q", got, tt.want)
			}
			if tt.lines != nil {
				var lines []int
				for _, e := range entries {
					lines = append(lines, e.Line)
				}
				if !reflect.DeepEqual(lines, tt.lines) {
					t.Errorf("lines %v, want %v", lines, tt.lines)
				}
			}
			if len(problems) != len(tt.problems) {
				t.Fatalf("problems %v, want %v", problems, tt.problems)
			}
			for i, p := range problems {
				if prefix, sub, _ := strings.Cut(tt.problems[i], ": "); !strings.HasPrefix(p.String(), prefix+": ") || !strings.Contains(p.Message, sub) {
					t.Errorf("problem %d = %q, want %q", i, p.String(), tt.problems[i])
				}
			}
		})
	}
}

// A broken line of a secrets file probably holds a secret: problems never
// quote it.
func TestProblemsNeverQuoteContent(t *testing.T) {
	const secret = "sk_live_ZZtopSecret"
	text := strings.Join([]string{
		secret,                      // no '='
		secret + "-x=1",             // invalid key
		"A=\"" + secret,             // unterminated
		"B='x'" + secret,            // text after quote
		"9" + secret + "=" + secret, // invalid key
	}, "\n")
	_, problems := dotenv.Parse(text)
	if len(problems) != 5 {
		t.Fatalf("problems: %v", problems)
	}
	for _, p := range problems {
		if strings.Contains(p.String(), "ZZtop") || p.Key != "" {
			t.Fatalf("problem quotes content: %+v", p)
		}
	}
}

func TestFormat(t *testing.T) {
	in := []dotenv.Entry{
		{Key: "PLAIN", Value: "abc-1.2_3/x:y@z+w,v=u%"},
		{Key: "EMPTY", Value: ""},
		{Key: "SPACES", Value: " a b "},
		{Key: "HASH", Value: "a #b"},
		{Key: "QUOTES", Value: `say "hi" it's`},
		{Key: "ESCAPES", Value: "l1\nl2\r\tq\\"},
		{Key: "export", Value: "x"},
	}
	text := dotenv.Format(in)
	want := "PLAIN=abc-1.2_3/x:y@z+w,v=u%\nEMPTY=\nSPACES=\" a b \"\nHASH=\"a #b\"\nQUOTES=\"say \\\"hi\\\" it's\"\nESCAPES=\"l1\\nl2\\r\\tq\\\\\"\nexport=x\n"
	if text != want {
		t.Fatalf("Format:\n%s\nwant:\n%s", text, want)
	}
	out, problems := dotenv.Parse(text)
	if len(problems) != 0 || !reflect.DeepEqual(pairs(out), pairs(in)) {
		t.Fatalf("round trip: %q %v", pairs(out), problems)
	}
}

func FuzzParse(f *testing.F) {
	seeds := []string{
		"", "A=1", "export A=1\n", "A=\"x\\ny\"", "A='x\ny'", "# c\nA=b #c\n", "A=\"unterminated",
		"A=1\nA=2", "=x", "A B=1", "A=\"x\"y", "\uFEFFA=1\r\nB=2\r\n", "A=\\", "A=\"\\", "A= #", "export",
		"A=\"\\q\\\"\\\\\"", "K='a'\t# c", "X=\x00\xff",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		entries, problems := dotenv.Parse(text)
		lines := strings.Count(strings.ReplaceAll(text, "\r\n", "\n"), "\n") + 1
		seen := map[string]bool{}
		last := 0
		for _, e := range entries {
			if !dotenv.ValidKey(e.Key) || seen[e.Key] {
				t.Fatalf("entry with invalid or duplicate key %q", e.Key)
			}
			seen[e.Key] = true
			if e.Line <= last || e.Line > lines {
				t.Fatalf("entry line %d out of order or range (last %d, lines %d)", e.Line, last, lines)
			}
			last = e.Line
		}
		for _, p := range problems {
			if p.Line < 1 || p.Line > lines || !utf8.ValidString(p.Message) && utf8.ValidString(text) {
				t.Fatalf("bad problem %+v (lines %d)", p, lines)
			}
		}
		// Round trip: what Format writes, Parse reads back unchanged.
		formatted := dotenv.Format(entries)
		again, problems2 := dotenv.Parse(formatted)
		if len(problems2) != 0 {
			t.Fatalf("Format output has problems %v:\n%q", problems2, formatted)
		}
		if !reflect.DeepEqual(pairs(again), pairs(entries)) {
			t.Fatalf("round trip changed entries:\n%q\n%q", pairs(entries), pairs(again))
		}
		for i, e := range again {
			if e.Line != i+1 {
				t.Fatalf("Format must write one line per entry; entry %d on line %d", i, e.Line)
			}
		}
	})
}
