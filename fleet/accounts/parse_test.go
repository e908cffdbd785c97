package accounts

import (
	"errors"
	"strings"
	"testing"

	"sbx.dev/sbx/keys"
)

func TestParseRepo(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" means refused
	}{
		{"acme/widget", "acme/widget"},
		{"acme/widget.git", "acme/widget"},
		{"Acme-Co/my.repo_1", "Acme-Co/my.repo_1"},
		{"a/b", "a/b"},
		{"", ""},
		{"acme", ""},
		{"acme/", ""},
		{"/widget", ""},
		{"acme/widget/extra", ""},
		{"-acme/widget", ""},
		{"ac me/widget", ""},
		{"acme/wid get", ""},
		{"acme/..", ""},
		{"acme/.", ""},
		{"../widget", ""},
		{"acme/.git", ""},
		{"acme/widget.git.git", ""},
		{"acme/widget?x=1", ""},
		{"acme/widget#x", ""},
		{"acme/wid\nget", ""},
		{"acme/" + strings.Repeat("x", 101), ""},
		{strings.Repeat("a", 40) + "/w", ""},
		{"acme/widget;rm", ""},
		{"acme/wïdget", ""},
	} {
		r, err := ParseRepo(tc.in)
		if tc.want == "" {
			if err == nil || !errors.Is(err, keys.ErrInvalid) {
				t.Errorf("ParseRepo(%q) = %v, %v; want ErrInvalid", tc.in, r, err)
			}
			continue
		}
		if err != nil || r.String() != tc.want {
			t.Errorf("ParseRepo(%q) = %v, %v; want %s", tc.in, r, err, tc.want)
		}
	}
}

func TestParseHost(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"https://github.com", "https://github.com"},
		{"https://github.com/", "https://github.com"},
		{"https://ghe.example.com/git/", "https://ghe.example.com/git"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://[::1]:8080", "http://[::1]:8080"},
		{"http://localhost:3000", "http://localhost:3000"},
		{"http://github.com", ""},
		{"http://10.0.0.1", ""},
		{"http://127.0.0.1.evil.com", ""},
		{"ftp://github.com", ""},
		{"file:///etc", ""},
		{"github.com", ""},
		{"https://", ""},
		{"https://user:pw@github.com", ""},
		{"https://github.com?x=1", ""},
		{"https://github.com/#frag", ""},
		{"javascript:alert(1)", ""},
		{"", ""},
	} {
		u, err := ParseHost(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("ParseHost(%q) = %v; want refusal", tc.in, u)
			}
			continue
		}
		if err != nil || u.String() != tc.want {
			t.Errorf("ParseHost(%q) = %v, %v; want %s", tc.in, u, err, tc.want)
		}
	}
}

func TestMask(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ghp_0123456789abcdefABCD", "ghp_…ABCD"},
		{"github_pat_11ABCDEFG0123456789_xyzWXYZ", "github_pat_…WXYZ"},
		{"gho_0123456789abcdefWXYZ", "gho_…WXYZ"},
		{"plainlongtoken0123456789", "…6789"},
		{"ghp_short", "ghp_…"},
		{"shorttoken", "…"},
	} {
		if got := Mask(tc.in); got != tc.want {
			t.Errorf("Mask(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestResolveRepo(t *testing.T) {
	svc, err := New(nil, nil, nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Host() != DefaultHost {
		t.Fatalf("default host %s", svc.Host())
	}
	for _, tc := range []struct{ in, want string }{
		{"acme/widget", "acme/widget"},
		{"https://github.com/acme/widget", "acme/widget"},
		{"https://github.com/acme/widget.git", "acme/widget"},
		{"https://github.com/acme/widget/", "acme/widget"},
		{"https://gitlab.com/acme/widget", ""},
		{"http://github.com/acme/widget", ""},
		{"https://x:y@github.com/acme/widget", ""},
		{"https://github.com/acme/widget/tree/main", ""},
		{"https://github.com.evil.com/acme/widget", ""},
		{"git@github.com:acme/widget.git", ""},
	} {
		r, err := svc.ResolveRepo(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("ResolveRepo(%q) = %v; want refusal", tc.in, r)
			}
			continue
		}
		if err != nil || r.String() != tc.want {
			t.Errorf("ResolveRepo(%q) = %v, %v; want %s", tc.in, r, err, tc.want)
		}
	}
	if got := svc.CloneURL(Repo{"acme", "widget"}); got != "https://github.com/acme/widget.git" {
		t.Fatalf("CloneURL = %s", got)
	}
}

// FuzzParseRepo: never panics, and whatever it accepts is safe to put in a
// URL path and a file name: no '/', "..", control characters or spaces
// inside a part, and it round-trips.
func FuzzParseRepo(f *testing.F) {
	for _, s := range []string{"acme/widget", "a/b.git", "../x", "a/..", "a/b/c", "", "x/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRepo(s)
		if err != nil {
			return
		}
		for _, part := range []string{r.Owner, r.Name} {
			if part == "" || part == "." || part == ".." || strings.ContainsAny(part, "/\\ \t\n\r\x00?#%:@") {
				t.Fatalf("ParseRepo(%q) accepted unsafe part %q", s, part)
			}
		}
		again, err := ParseRepo(r.String())
		if err != nil || again != r {
			t.Fatalf("round trip of %q: %v %v", s, again, err)
		}
	})
}

// FuzzParseHost: whatever is accepted is https, or http to loopback, and
// carries no credentials.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"https://github.com", "http://127.0.0.1:1", "http://evil", "https://u:p@h", "http://[::1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseHost(s)
		if err != nil {
			return
		}
		if u.User != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname()))) {
			t.Fatalf("ParseHost(%q) accepted %v", s, u)
		}
	})
}
