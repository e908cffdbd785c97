package netpolicy

import (
	"fmt"
	"slices"
	"strings"
)

// Egress presets: named allow-lists maintained in sbx, so that a box can
// reach a package registry without its operator knowing the registry's
// host names. An allow-list entry "@NAME" stands for the preset's entries;
// a box's stored list keeps the name (so it follows this table when sbx is
// upgraded), and the grant the box network is given expands it (Expand):
// the address policy still applies to every name behind it, a registry
// resolving into a forbidden range is refused like any other name.
//
// The host names are the ones each tool really uses (its documentation, or
// what firewall allow-lists of its users name), in ParseEntry's syntax.

// PresetPrefix starts a preset reference in an allow-list.
const PresetPrefix = "@"

// Preset is one named allow-list.
type Preset struct {
	Name    string   `json:"name"` // without PresetPrefix: "npm"
	Title   string   `json:"title"`
	Entries []string `json:"entries"` // canonical ParseEntry entries
}

// presets is the table, sorted by name. Never changed at run time: Presets
// and LookupPreset hand out copies.
var presets = []Preset{
	{Name: "apt", Title: "Debian and Ubuntu packages (apt)", Entries: []string{
		"deb.debian.org", "security.debian.org",
		"archive.ubuntu.com", "*.archive.ubuntu.com", "security.ubuntu.com", "ports.ubuntu.com",
	}},
	{Name: "crates", Title: "Rust crates (cargo: crates.io, its sparse index and downloads)", Entries: []string{
		"crates.io", "index.crates.io", "static.crates.io",
	}},
	{Name: "github", Title: "GitHub (clone over HTTPS, API, archives, raw files, release assets)", Entries: []string{
		"github.com", "api.github.com", "codeload.github.com",
		"objects.githubusercontent.com", "raw.githubusercontent.com", "release-assets.githubusercontent.com",
	}},
	// proxy.golang.org answers some module zips with a redirect to Google
	// Cloud Storage, hence storage.googleapis.com.
	{Name: "go", Title: "Go modules (the module proxy, the checksum database)", Entries: []string{
		"proxy.golang.org", "sum.golang.org", "storage.googleapis.com",
	}},
	{Name: "maven", Title: "Maven Central (Maven, Gradle, sbt)", Entries: []string{
		"repo.maven.apache.org", "repo1.maven.org",
	}},
	// registry.yarnpkg.com is Yarn 1's registry (npm's, by another name);
	// repo.yarnpkg.com serves Yarn 2+ releases to corepack.
	{Name: "npm", Title: "npm registry (npm, pnpm, Yarn)", Entries: []string{
		"registry.npmjs.org", "registry.yarnpkg.com", "repo.yarnpkg.com",
	}},
	{Name: "pypi", Title: "Python Package Index (pip, uv, Poetry)", Entries: []string{
		"pypi.org", "files.pythonhosted.org",
	}},
	// Bundler reads the compact index from index.rubygems.org.
	{Name: "rubygems", Title: "RubyGems (gem, Bundler)", Entries: []string{
		"rubygems.org", "index.rubygems.org",
	}},
}

// maxPresetName bounds a preset name.
const maxPresetName = 32

// Presets returns every preset, by name.
func Presets() []Preset {
	out := make([]Preset, len(presets))
	for i, p := range presets {
		out[i] = Preset{Name: p.Name, Title: p.Title, Entries: slices.Clone(p.Entries)}
	}
	return out
}

// PresetNames lists the presets as they are referred to: "@apt", "@crates", ….
func PresetNames() []string {
	out := make([]string, len(presets))
	for i, p := range presets {
		out[i] = PresetPrefix + p.Name
	}
	return out
}

// LookupPreset returns the preset of a name ("npm" or "@npm").
func LookupPreset(name string) (Preset, bool) {
	return lookup(strings.TrimPrefix(name, PresetPrefix))
}

// lookup returns the preset of exactly name (no prefix).
func lookup(name string) (Preset, bool) {
	for _, p := range presets {
		if p.Name == name {
			return Preset{Name: p.Name, Title: p.Title, Entries: slices.Clone(p.Entries)}, true
		}
	}
	return Preset{}, false
}

// IsPresetRef reports whether an allow-list entry is meant as a preset
// reference (it starts with "@" once trimmed), known or not.
func IsPresetRef(s string) bool {
	return strings.HasPrefix(strings.TrimSpace(s), PresetPrefix)
}

// ParsePresetRef reads a preset reference, "@npm" (case and surrounding
// space do not matter), and returns its canonical form "@npm". With
// bareOK, "npm" is read too (where nothing else could be meant: a list of
// defaults). An unknown name is an error naming the known ones.
func ParsePresetRef(s string, bareOK bool) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	name, had := strings.CutPrefix(s, PresetPrefix)
	switch {
	case !had && !bareOK:
		return "", fmt.Errorf("%q is not a preset: a preset is named with %s, e.g. @npm", s, PresetPrefix)
	case name == "" || len(name) > maxPresetName:
		return "", fmt.Errorf("want a preset name after %s (%s)", PresetPrefix, strings.Join(PresetNames(), ", "))
	}
	if _, ok := lookup(name); !ok {
		return "", fmt.Errorf("unknown preset %s%s (known: %s)", PresetPrefix, quoteName(name), strings.Join(PresetNames(), ", "))
	}
	return PresetPrefix + name, nil
}

// quoteName shows a name typed by someone: as is when it is plain, else
// quoted (so control characters cannot reach a terminal as themselves).
func quoteName(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

// ParsePresetRefs reads a list of preset references (ParsePresetRef), in
// canonical form, each once, in the order given.
func ParsePresetRefs(list []string, bareOK bool) ([]string, error) {
	out := []string{}
	for _, s := range list {
		ref, err := ParsePresetRef(s, bareOK)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	return out, nil
}

// Expand turns an allow-list into the entries the box network matches: a
// preset reference becomes its preset's entries, every other entry its
// canonical form, each once, in order. What neither parses nor names a
// known preset is left out (it would match nothing anyway): the list that
// comes out holds only entries ParseEntry reads, never a reference.
func Expand(list []string) []string {
	out := make([]string, 0, len(list))
	seen := map[string]bool{}
	add := func(e string) {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	for _, s := range list {
		if IsPresetRef(s) {
			ref, err := ParsePresetRef(s, false)
			if err != nil {
				continue
			}
			p, _ := LookupPreset(ref)
			for _, e := range p.Entries {
				add(e)
			}
			continue
		}
		if e, err := ParseEntry(s); err == nil {
			add(e.String())
		}
	}
	return out
}
