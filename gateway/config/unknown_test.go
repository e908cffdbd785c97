package config

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestUnknownEnvDoesNotStop: an unknown SBX_ variable is ignored by Load
// (the caller warns) and listed by UnknownEnvs with the name it may mean;
// the variables sbx's own tools and tests set are not listed.
func TestUnknownEnvDoesNotStop(t *testing.T) {
	environ := []string{"SBX_SSH_LISTN=127.0.0.1:1", "SBX_HTTP_LISTEN=127.0.0.1:2002", "SBX_TEST_CLUSTER=0",
		"SBX_CACHE=/tmp/x", "SBX_POSTGRES_DSN=postgres://x", "SBX_CLUSTER_DIR=/tmp/c", "SBX_NONSENSE_VARIABLE=1",
		"SBX_EMPTY_TYPO=", "PATH=/bin", "SBX_SSH_LISTN=again"}
	cfg, err := Load(Sources{DataDir: t.TempDir(), Environ: environ})
	if err != nil {
		t.Fatalf("Load with unknown variables: %v", err)
	}
	if cfg.HTTP.Listen != "127.0.0.1:2002" || cfg.SSH.Listen != Default().SSH.Listen {
		t.Errorf("listen ssh %q http %q: known variables must apply, unknown ones must not", cfg.SSH.Listen, cfg.HTTP.Listen)
	}
	got := UnknownEnvs(environ)
	want := []UnknownEnv{{Name: "SBX_NONSENSE_VARIABLE"}, {Name: "SBX_SSH_LISTN", Suggestion: "SBX_SSH_LISTEN"}}
	if !slices.Equal(got, want) {
		t.Errorf("UnknownEnvs = %+v, want %+v", got, want)
	}
	for _, name := range otherEnv {
		if u := UnknownEnvs([]string{name + "=1"}); len(u) != 0 {
			t.Errorf("%s is read by sbx's tools but listed as unknown", name)
		}
	}
}

func TestSuggest(t *testing.T) {
	cases := []struct{ name, want string }{
		{"SBX_SSH_LISTN", "SBX_SSH_LISTEN"},           // a letter dropped
		{"SBX_HTTP_LSITEN", "SBX_HTTP_LISTEN"},        // two swapped
		{"SBX_VM_MEMORY_MB", "SBX_VM_MEMORY_MIB"},     // a letter dropped
		{"SBX_LOG_LEVL", "SBX_LOG_LEVEL"},             // a letter dropped
		{"sbx_log_level", "SBX_LOG_LEVEL"},            // case alone
		{"SBX_DAT", "SBX_DATA"},                       // short names too
		{"SBX_TEST_CLUSTR", "SBX_TEST_CLUSTER"},       // the tools' own
		{"SBX_FLEET_WARMPOOL", "SBX_FLEET_WARM_POOL"}, // an underscore dropped
		{"SBX_ADMIN_KEY", "SBX_ADMIN_KEYS"},
		{"SBX_X", ""},                 // nothing that short
		{"SBX_NONSENSE_VARIABLE", ""}, // nothing close
		{"SBX_SSH", ""},               // a prefix is not a typo
		{"SBX_MODEL_KEY", ""},         // 4 edits from SBX_MODEL_API_KEY: too far
		{"SBX_SSH_LISTEN", "SBX_SSH_LISTEN"},
	}
	known := envNames()
	for _, c := range cases {
		if got := Suggest(c.name, known); got != c.want {
			t.Errorf("Suggest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"abc", "abc", 0},
		{"abc", "abd", 1}, {"abc", "acb", 1}, {"abc", "ab", 1}, {"kitten", "sitting", 3},
		{"ca", "abc", 3}, // optimal string alignment: no edit of a swapped pair
		{"héllo", "hello", 1},
	}
	for _, c := range cases {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// FuzzSuggest: any name gets "" or a known name, an exact known name gets
// itself, and the distance is a metric's first properties (zero on equal
// strings, symmetric, at most the longer length).
func FuzzSuggest(f *testing.F) {
	for _, s := range []string{"SBX_SSH_LISTN", "SBX_", "", "sbx_data", "SBX_\xff\xfe", "SBX_ÄÖÜ_LISTEN"} {
		f.Add(s, "SBX_DATA")
	}
	known := envNames()
	f.Fuzz(func(t *testing.T, name, other string) {
		got := Suggest(name, known)
		if got != "" && !slices.Contains(known, got) {
			t.Fatalf("Suggest(%q) = %q, not a known name", name, got)
		}
		if slices.Contains(known, name) && got != name {
			t.Fatalf("Suggest(%q) = %q, want the name itself", name, got)
		}
		if got != "" && editDistance(strings.ToUpper(name), strings.ToUpper(got)) > 3 {
			t.Fatalf("Suggest(%q) = %q: more than 3 edits away", name, got)
		}
		d := editDistance(name, other)
		if d != editDistance(other, name) {
			t.Fatalf("editDistance(%q, %q) is not symmetric", name, other)
		}
		if d > max(utf8.RuneCountInString(name), utf8.RuneCountInString(other)) {
			t.Fatalf("editDistance(%q, %q) = %d, more than the longer length", name, other, d)
		}
		if (d == 0) != (name == other) && utf8.ValidString(name) && utf8.ValidString(other) {
			t.Fatalf("editDistance(%q, %q) = %d", name, other, d)
		}
	})
}
