package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	vcs := func(rev, when, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "-trimpath", Value: "true"}, {Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: when}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "abf986b1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7"
	cases := []struct {
		name          string
		bi            *debug.BuildInfo
		ok            bool
		short, string string
	}{
		{name: "no build info", ok: false, short: "dev", string: "dev"},
		{name: "go run, no vcs", ok: true, bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			short: "dev", string: "dev (go1.26.8)"},
		{name: "checkout build", ok: true, bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: vcs(rev, "2026-12-02T05:00:00Z", "false")},
			short: "dev+abf986b1a2b3", string: "dev+abf986b1a2b3 (abf986b1a2b3, 2026-12-02T05:00:00Z, go1.26.8)"},
		{name: "dirty checkout", ok: true, bi: &debug.BuildInfo{GoVersion: "go1.26.8", Settings: vcs(rev, "2026-12-02T05:00:00Z", "true")},
			short: "dev+abf986b1a2b3+dirty", string: "dev+abf986b1a2b3+dirty (abf986b1a2b3+dirty, 2026-12-02T05:00:00Z, go1.26.8)"},
		{name: "pseudo-version stamped by go build", ok: true, bi: &debug.BuildInfo{GoVersion: "go1.26.8",
			Main: debug.Module{Version: "v0.0.0-20261202050000-abf986b1a2b3+dirty"}, Settings: vcs(rev, "2026-12-02T05:00:00Z", "true")},
			short: "v0.0.0-20261202050000-abf986b1a2b3+dirty", string: "v0.0.0-20261202050000-abf986b1a2b3+dirty (abf986b1a2b3+dirty, 2026-12-02T05:00:00Z, go1.26.8)"},
		{name: "release", ok: true, bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.0"}},
			short: "v1.2.0", string: "v1.2.0 (go1.26.8)"},
		{name: "short revision", ok: true, bi: &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}},
			short: "dev+abc", string: "dev+abc (abc)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info := From(c.bi, c.ok)
			if got := info.Short(); got != c.short {
				t.Errorf("Short() = %q, want %q", got, c.short)
			}
			if got := info.String(); got != c.string {
				t.Errorf("String() = %q, want %q", got, c.string)
			}
		})
	}
}

// TestStamped: the Taskfile's -X stamp fills the revision of a build the
// go command did not stamp (GOFLAGS=-buildvcs=false, no .git), "unknown"
// when git could not say either; the go command's own record wins.
func TestStamped(t *testing.T) {
	const rev = "abf986b1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7"
	unstamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	recorded := &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}}}
	for _, c := range []struct {
		name                    string
		bi                      *debug.BuildInfo
		revision, time, changed string
		short, string           string
	}{
		{"no stamp", unstamped, "", "", "", "dev", "dev (go1.26.8)"},
		{"stamped from git", unstamped, rev, "2026-12-02T05:00:00Z", "false", "dev+abf986b1a2b3", "dev+abf986b1a2b3 (abf986b1a2b3, 2026-12-02T05:00:00Z, go1.26.8)"},
		{"stamped from a dirty tree", unstamped, rev, "2026-12-02T05:00:00Z", "true", "dev+abf986b1a2b3+dirty", "dev+abf986b1a2b3+dirty (abf986b1a2b3+dirty, 2026-12-02T05:00:00Z, go1.26.8)"},
		{"git could not say", unstamped, Unknown, "", "false", "dev", "dev (revision unknown, go1.26.8)"},
		{"the go command's record wins", recorded, rev, "2026-12-02T05:00:00Z", "true", "dev+0123456789ab", "dev+0123456789ab (0123456789ab, go1.26.8)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			info := From(c.bi, true).Stamped(c.revision, c.time, c.changed)
			if got := info.Short(); got != c.short {
				t.Errorf("Short() = %q, want %q", got, c.short)
			}
			if got := info.String(); got != c.string {
				t.Errorf("String() = %q, want %q", got, c.string)
			}
		})
	}
}

// TestGet: the running binary (a test binary) has build information and
// Get answers the same every time.
func TestGet(t *testing.T) {
	a, b := Get(), Get()
	if a != b || a.Version == "" || a.Go == "" {
		t.Fatalf("Get() = %+v then %+v", a, b)
	}
}
