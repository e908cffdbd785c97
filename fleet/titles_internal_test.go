package fleet

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/redact"
)

func TestDefaultTitle(t *testing.T) {
	long := "refactor the parser so that every error names its line and column and then update the docs"
	for _, c := range []struct{ task, want string }{
		{"fix the flaky test", "fix the flaky test"},
		{"  \n\n  fix   the\tflaky test  \nand more", "fix the flaky test"},
		{"bell\a and\x1b[31m red", "bell and[31m red"},
		{"bidi \u202eevil\u202c text", "bidi evil text"},
		{long, "refactor the parser so that every error names its line and…"},
		{strings.Repeat("x", 100), strings.Repeat("x", 59) + "…"},
		{strings.Repeat("é", 59) + " word", strings.Repeat("é", 59) + "…"},
		{"", ""},
		{"\n \n", ""},
	} {
		got := DefaultTitle(c.task)
		if got != c.want {
			t.Errorf("DefaultTitle(%q) = %q, want %q", c.task, got, c.want)
		}
		if n := utf8.RuneCountInString(got); n > defaultTitleLen {
			t.Errorf("DefaultTitle(%q) is %d characters", c.task, n)
		}
	}
}

func TestCheckTitle(t *testing.T) {
	for in, want := range map[string]string{
		"parser: flaky test":             "parser: flaky test",
		"  spaced  ":                     "spaced",
		"ünïcödé ✓":                      "ünïcödé ✓",
		strings.Repeat("y", MaxTitleLen): strings.Repeat("y", MaxTitleLen),
	} {
		if got, err := checkTitle(in); err != nil || got != want {
			t.Errorf("checkTitle(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "  ", "two\nlines", "cr\rhere", "tab\there", "nul\x00", "esc\x1b[2J", "bidi\u202e",
		strings.Repeat("z", MaxTitleLen+1), "bad utf8 \xff"} {
		if got, err := checkTitle(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("checkTitle(%q) = %q, %v; want ErrInvalid", bad, got, err)
		}
	}
}

// FuzzCheckTitle: an accepted title is one printable line of at most
// MaxTitleLen characters; a derived one passes the same check.
func FuzzCheckTitle(f *testing.F) {
	for _, s := range []string{"fix it", "a\nb", "\u202e", strings.Repeat("w ", 50)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, err := checkTitle(s); err == nil {
			if got == "" || utf8.RuneCountInString(got) > MaxTitleLen || strings.ContainsAny(got, "\n\r\t\x00") || !utf8.ValidString(got) {
				t.Fatalf("checkTitle(%q) accepted %q", s, got)
			}
			for _, r := range got {
				if !unicode.IsPrint(r) && r != ' ' {
					t.Fatalf("checkTitle(%q) accepted the unprintable %U", s, r)
				}
			}
		}
		if d := DefaultTitle(s); d != "" {
			if _, err := checkTitle(d); err != nil {
				t.Fatalf("DefaultTitle(%q) = %q fails checkTitle: %v", s, d, err)
			}
		}
	})
}

func TestMatchBox(t *testing.T) {
	red, err := redact.New(t.Context(), nil, redact.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := Box{Name: "fix-the-flaky-3f2a1c", Title: red.String("Parser: flaky test"), Task: red.String("fix the flaky test\nsecond line mentions zebra"),
		Repos: []Repo{{Name: "acme/widget"}}, Owner: "alice", Agent: "script"}
	for q, want := range map[string]bool{
		"":          true,
		"3f2a1c":    true,
		"PARSER":    true,
		"flaky":     true,
		"acme/wid":  true,
		"  widget ": true,
		"zebra":     false, // not on the task's first line
		"alice":     false, // the owner is no search field
		"script":    false,
		"nothing":   false,
	} {
		if got := MatchBox(b, q); got != want {
			t.Errorf("MatchBox(%q) = %v, want %v", q, got, want)
		}
	}
	if got := FilterBoxes([]Box{b, {Name: "other-1"}}, "other"); len(got) != 1 || got[0].Name != "other-1" {
		t.Errorf("FilterBoxes: %+v", got)
	}
}

// resolverFor is accounts.Service.ResolveRepo's rule for host (the real
// service's, through a Service built on it).
func resolverFor(t testing.TB, host string) func(string) (accounts.Repo, error) {
	t.Helper()
	svc, err := accounts.New(nil, nil, nil, accounts.Config{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	return svc.ResolveRepo
}

func TestMentionedRepos(t *testing.T) {
	resolve := resolverFor(t, "https://github.com")
	for _, c := range []struct {
		task  string
		given []string
		want  []string
	}{
		{"port acme/widget to the new API", nil, []string{"acme/widget"}},
		{"look at https://github.com/acme/docs and `acme/cli`, then (acme/web).", nil, []string{"acme/docs", "acme/cli", "acme/web"}},
		{"fix acme/widget; also ACME/Widget and acme/widget.git", nil, []string{"acme/widget"}},
		{"fix acme/widget with acme/docs", []string{"acme/widget"}, []string{"acme/docs"}},
		{"fix acme/widget", []string{"https://github.com/ACME/widget"}, []string{}},
		{"and/or read/write client/server TCP/IP I/O w/o n/a 24/7 1/2 12/25", nil, []string{}},
		{"edit src/main.go and docs/README.md and src/parser and cmd/sbx and a/b/c and ./x/y and /etc/passwd", nil, []string{}},
		{"https://gitlab.com/acme/widget https://github.com/acme/widget/pull/3 http://github.com/acme/x https://user@github.com/acme/y", nil, []string{}},
		{"v1.2/v1.3 and feature/login and origin/main", nil, []string{}},
		{"-acme/x and acme/.. and acme/ and /acme", nil, []string{}},
	} {
		got := mentionedRepos(c.task, resolve, c.given)
		if !slices.Equal(got, c.want) {
			t.Errorf("mentionedRepos(%q, %v) = %q, want %q", c.task, c.given, got, c.want)
		}
	}
	var many []string
	for i := range 15 {
		many = append(many, "acme/repo-"+string(rune('a'+i)))
	}
	if got := mentionedRepos(strings.Join(many, " "), resolve, nil); len(got) != MaxMentionedRepos || got[0] != "acme/repo-a" {
		t.Errorf("15 repos named: %q, want the first %d", got, MaxMentionedRepos)
	}
	// A self-hosted git host: its URLs, not github.com's.
	own := resolverFor(t, "https://git.example.com/base")
	if got := mentionedRepos("see https://git.example.com/base/acme/widget and https://github.com/acme/other", own, nil); !slices.Equal(got, []string{"acme/widget"}) {
		t.Errorf("on a self-hosted host: %q", got)
	}
}

// FuzzMentionedRepos: whatever the task, every repository offered is one
// the resolver accepts, as owner/name, once, not one already given, and
// there are at most MaxMentionedRepos.
func FuzzMentionedRepos(f *testing.F) {
	for _, s := range []string{"fix acme/widget", "and/or src/main.go", "https://github.com/acme/docs.", "a/b/c acme/x acme/X"} {
		f.Add(s, "acme/widget")
	}
	resolve := resolverFor(f, "https://github.com")
	f.Fuzz(func(t *testing.T, task, given string) {
		got := mentionedRepos(task, resolve, []string{given})
		if len(got) > MaxMentionedRepos {
			t.Fatalf("%d repos offered", len(got))
		}
		seen := map[string]bool{}
		if g, err := resolve(strings.TrimSpace(given)); err == nil {
			seen[strings.ToLower(g.String())] = true
		}
		for _, r := range got {
			p, err := accounts.ParseRepo(r)
			if err != nil || p.String() != r || !strings.Contains(task, "/") {
				t.Fatalf("offered %q from %q: %v", r, task, err)
			}
			if seen[strings.ToLower(r)] {
				t.Fatalf("offered %q twice or though given (%q)", r, given)
			}
			seen[strings.ToLower(r)] = true
			if _, err := url.Parse("https://github.com/" + r); err != nil {
				t.Fatalf("offered %q: %v", r, err)
			}
		}
	})
}
