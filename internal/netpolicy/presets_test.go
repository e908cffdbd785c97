package netpolicy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestPresetTable: every preset's entries are canonical allow-list entries
// naming hosts (no address literal a preset could smuggle past the
// address policy), each once; names are unique, sorted and plain.
func TestPresetTable(t *testing.T) {
	want := []string{"apt", "crates", "github", "go", "maven", "npm", "pypi", "rubygems"}
	var names []string
	for _, p := range Presets() {
		names = append(names, p.Name)
		if p.Title == "" || len(p.Entries) == 0 {
			t.Errorf("preset %s: no title or no entries", p.Name)
		}
		if _, err := ParsePresetRef("@"+p.Name, false); err != nil {
			t.Errorf("preset %s: its own reference: %v", p.Name, err)
		}
		seen := map[string]bool{}
		for _, s := range p.Entries {
			e, err := ParseEntry(s)
			switch {
			case err != nil:
				t.Errorf("preset %s: entry %q: %v", p.Name, s, err)
			case e.String() != s:
				t.Errorf("preset %s: entry %q is not canonical (%q)", p.Name, s, e.String())
			case isAddr(e.Host):
				t.Errorf("preset %s: entry %q is an address", p.Name, s)
			case seen[s]:
				t.Errorf("preset %s: entry %q twice", p.Name, s)
			}
			seen[s] = true
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("presets %v, want %v", names, want)
	}
	// Callers get copies: changing one changes nothing here.
	p, _ := LookupPreset("npm")
	p.Entries[0] = "evil.example"
	Presets()[0].Entries[0] = "evil.example"
	if q, _ := LookupPreset("@npm"); q.Entries[0] != "registry.npmjs.org" {
		t.Errorf("the table changed through a copy: %v", q.Entries)
	}
	if q, _ := LookupPreset("apt"); q.Entries[0] != "deb.debian.org" {
		t.Errorf("the table changed through a copy: %v", q.Entries)
	}
}

func TestParsePresetRef(t *testing.T) {
	for _, tc := range []struct {
		in     string
		bareOK bool
		want   string // "" for an error
		errHas string
	}{
		{"@npm", false, "@npm", ""},
		{"  @NPM ", false, "@npm", ""},
		{"@PyPI", false, "@pypi", ""},
		{"npm", true, "@npm", ""},
		{"npm", false, "", "e.g. @npm"},
		{"@", false, "", "want a preset name"},
		{"@" + strings.Repeat("a", 40), false, "", "want a preset name"},
		{"@nope", false, "", "unknown preset @nope (known: @apt, @crates, @github, @go, @maven, @npm, @pypi, @rubygems)"},
		{"@np\x1bm", false, "", `"np\x1bm"`},
		{"@@npm", false, "", "unknown preset"},
		{"@npm.org", false, "", "unknown preset"},
		{"@*.npm", false, "", "unknown preset"},
		{"@npm:443", false, "", "unknown preset"},
	} {
		got, err := ParsePresetRef(tc.in, tc.bareOK)
		if tc.want != "" {
			if err != nil || got != tc.want {
				t.Errorf("ParsePresetRef(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("ParsePresetRef(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.errHas)
		}
	}
	got, err := ParsePresetRefs([]string{"npm", "@github", "@NPM"}, true)
	if err != nil || !slices.Equal(got, []string{"@npm", "@github"}) {
		t.Errorf("ParsePresetRefs = %v, %v", got, err)
	}
	if _, err := ParsePresetRefs([]string{"@npm", "@nope"}, true); err == nil {
		t.Error("ParsePresetRefs with an unknown name: no error")
	}
}

func TestExpand(t *testing.T) {
	for _, tc := range []struct {
		in, want []string
	}{
		{nil, []string{}},
		{[]string{"@pypi"}, []string{"pypi.org", "files.pythonhosted.org"}},
		{[]string{"example.com", "@pypi", "PyPI.org"}, []string{"example.com", "pypi.org", "files.pythonhosted.org"}},
		{[]string{"@pypi", "@PYPI", "@crates"}, []string{"pypi.org", "files.pythonhosted.org", "crates.io", "index.crates.io", "static.crates.io"}},
		// Neither an entry nor a known preset: nothing (fail closed).
		{[]string{"@nope", "not a host", "@", "10.0.0.1"}, []string{"10.0.0.1"}},
		{[]string{"*.Example.com:8443", "@go"}, []string{"*.example.com:8443", "proxy.golang.org", "sum.golang.org", "storage.googleapis.com"}},
	} {
		if got := Expand(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// A preset opens its hosts and nothing beside them.
	list := Expand([]string{"@pypi"})
	for host, want := range map[string]bool{"pypi.org": true, "files.pythonhosted.org": true, "evil.pypi.org": false, "pypi.org.evil.com": false} {
		if _, open := Admit(list, host, 443); open != want {
			t.Errorf("@pypi admits %s: %v, want %v", host, open, want)
		}
	}
	if _, open := Admit([]string{"@pypi"}, "pypi.org", 443); open {
		t.Error("an unexpanded reference admits a host: the box network must match expanded lists only")
	}
}

// FuzzPresetExpand: whatever an allow-list holds, its expansion holds only
// canonical entries (never a reference), every valid entry of the list, and
// every entry of each known preset it names; nothing else.
func FuzzPresetExpand(f *testing.F) {
	for _, s := range []string{"@npm", "@PyPI example.com", "@nope", "@", "@@go", "*.x.org:8443 @github", "@npm\x00", "10.0.0.1 @apt", " @crates "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in := strings.Split(s, " ")
		out := Expand(in)
		allowed := map[string]bool{}
		for _, x := range in {
			if IsPresetRef(x) {
				ref, err := ParsePresetRef(x, false)
				if err != nil {
					continue
				}
				if _, ok := LookupPreset(ref); !ok {
					t.Fatalf("ParsePresetRef(%q) = %q, which is no preset", x, ref)
				}
				p, _ := LookupPreset(ref)
				for _, e := range p.Entries {
					allowed[e] = true
					if !slices.Contains(out, e) {
						t.Fatalf("Expand(%q) = %q: misses %q of %s", in, out, e, ref)
					}
				}
				continue
			}
			if e, err := ParseEntry(x); err == nil {
				allowed[e.String()] = true
				if !slices.Contains(out, e.String()) {
					t.Fatalf("Expand(%q) = %q: misses %q", in, out, e.String())
				}
			}
		}
		seen := map[string]bool{}
		for _, e := range out {
			p, err := ParseEntry(e)
			if err != nil || p.String() != e || strings.HasPrefix(e, PresetPrefix) {
				t.Fatalf("Expand(%q) holds %q, not a canonical entry", in, e)
			}
			if !allowed[e] || seen[e] {
				t.Fatalf("Expand(%q) holds %q, which the list did not name (or twice)", in, e)
			}
			seen[e] = true
		}
		// A reference that parses is canonical and names a preset.
		for _, x := range in {
			if ref, err := ParsePresetRef(x, true); err == nil {
				if again, err := ParsePresetRef(ref, false); err != nil || again != ref {
					t.Fatalf("ParsePresetRef(%q) = %q, which reads back as %q, %v", x, ref, again, err)
				}
			}
		}
	})
}

// TestPresetBehindAddressPolicy: a preset's names are names like any
// other; what they resolve to is judged by Refused, so a registry that
// resolves into a forbidden range (as they do on these test machines, into
// 203.0.113.0/24) stays refused.
func TestPresetBehindAddressPolicy(t *testing.T) {
	if _, open := Admit(Expand([]string{"@npm"}), "registry.npmjs.org", 443); !open {
		t.Fatal("@npm does not admit registry.npmjs.org")
	}
	for _, a := range []string{"203.0.113.7", "10.1.2.3", "127.0.0.1", "169.254.169.254"} {
		if Refused(netip.AddrPortFrom(netip.MustParseAddr(a), 443), nil) == "" {
			t.Errorf("%s behind a preset's name: allowed", a)
		}
	}
}
