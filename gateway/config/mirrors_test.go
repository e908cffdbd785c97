package config

import (
	"slices"
	"strings"
	"testing"
)

// net.mirrors declares the site's internal package mirrors, each checked
// at load: a bad one stops the gateway, naming the key and why.
func TestMirrorsKey(t *testing.T) {
	cfg, err := Load(Sources{DataDir: writeYAML(t, "net:\n  mirrors: [\"npm-corp npm.corp.example:4873 10.20.0.0/16 10.30.0.0/16\"]\n")})
	if err != nil || !slices.Equal(cfg.Net.Mirrors, []string{"npm-corp npm.corp.example:4873 10.20.0.0/16 10.30.0.0/16"}) {
		t.Fatalf("%v, %v", cfg.Net.Mirrors, err)
	}
	cfg, err = Load(Sources{DataDir: writeYAML(t, ""), Environ: []string{"SBX_NET_MIRRORS=a 10.1.2.3:8080,b pypi.corp.example 10.2.0.0/16"}})
	if err != nil || !slices.Equal(cfg.Net.Mirrors, []string{"a 10.1.2.3:8080", "b pypi.corp.example 10.2.0.0/16"}) {
		t.Fatalf("from the environment: %v, %v", cfg.Net.Mirrors, err)
	}
	for flag, want := range map[string]string{
		"corp npm.corp.example":           "name the range",
		"npm npm.corp.example 10.0.0.0/8": "preset",
		"corp npm.corp.example 0.0.0.0/0": "too broad",
		"corp":                            "want NAME HOST",
	} {
		_, err = Load(Sources{DataDir: writeYAML(t, ""), Flags: map[string]string{"net.mirrors": flag}})
		if err == nil || !strings.Contains(err.Error(), "net.mirrors") || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want net.mirrors and %q", flag, err, want)
		}
	}
}
