package config

import (
	"slices"
	"strings"
	"testing"
)

// net.private_upstreams is the operator's list of private upstreams; it is
// validated at load, and a git host or model upstream at a forbidden
// address it does not list is refused at load, naming the key.
func TestPrivateUpstreams(t *testing.T) {
	for _, c := range []struct {
		name  string
		yaml  string
		env   []string
		flags map[string]string
		want  []string // error parts; none: loads
	}{
		{name: "default: nothing private", want: nil},
		{name: "bad entry", flags: map[string]string{"net.private_upstreams": "10.0.0.0/8, git.corp.example"},
			want: []string{"net.private_upstreams", `"git.corp.example"`, "not a name"}},
		{name: "bad entry in yaml", yaml: "net:\n  private_upstreams: [127.0.0.1:0]\n", want: []string{"net.private_upstreams", `"127.0.0.1:0"`}},
		{name: "model upstream on loopback", flags: map[string]string{"model.upstream": "http://127.0.0.1:9999"},
			want: []string{"model.upstream", "127.0.0.1 is a loopback address", "net.private_upstreams"}},
		{name: "git host at the metadata address", env: []string{"SBX_GIT_HOST=http://169.254.169.254"},
			want: []string{"git.host", "cloud metadata"}},
		{name: "git host localhost, token masked", flags: map[string]string{"git.host": "http://ghp_hunter2@localhost:3000"},
			want: []string{"git.host", "localhost is a loopback name", Mask}},
		{name: "listed port only", flags: map[string]string{"model.upstream": "http://127.0.0.1:9999", "net.private_upstreams": "127.0.0.1:9998"},
			want: []string{"model.upstream", "loopback"}},
		{name: "listed", env: []string{"SBX_NET_PRIVATE_UPSTREAMS=127.0.0.1:9999,10.20.0.0/16"},
			flags: map[string]string{"model.upstream": "http://127.0.0.1:9999", "git.host": "https://10.20.3.4"}},
		{name: "a name is judged at dial", flags: map[string]string{"git.host": "https://git.corp.example"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Load(Sources{DataDir: writeYAML(t, c.yaml), Environ: c.env, Flags: c.flags})
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cfg.PrivateUpstreams(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the token", err)
			}
		})
	}
	// `sbx config` prints the list; the parsed form is canonical.
	cfg, err := Load(Sources{DataDir: writeYAML(t, "net:\n  private_upstreams: [\"127.0.0.1:8080\", \"::ffff:10.0.0.0/104\"]\n")})
	if err != nil {
		t.Fatal(err)
	}
	y, err := cfg.YAML()
	if err != nil || !strings.Contains(string(y), "net:\n  private_upstreams:\n    - 127.0.0.1:8080\n") {
		t.Errorf("sbx config prints:\n%s (%v)", y, err)
	}
	trusts, err := cfg.PrivateUpstreams()
	var got []string
	for _, tr := range trusts {
		got = append(got, tr.String())
	}
	if err != nil || !slices.Equal(got, []string{"127.0.0.1:8080", "10.0.0.0/8"}) {
		t.Errorf("PrivateUpstreams = %v, %v", got, err)
	}
}

// net.default_presets names egress presets, checked at load: an unknown
// one stops the gateway, naming the key and the known presets.
func TestDefaultPresetsKey(t *testing.T) {
	cfg, err := Load(Sources{DataDir: writeYAML(t, "net:\n  default_presets: [\"@npm\", github]\n")})
	if err != nil || !slices.Equal(cfg.Net.DefaultPresets, []string{"@npm", "github"}) {
		t.Fatalf("%v, %v", cfg.Net.DefaultPresets, err)
	}
	cfg, err = Load(Sources{DataDir: writeYAML(t, ""), Environ: []string{"SBX_NET_DEFAULT_PRESETS=@pypi,@go"}})
	if err != nil || !slices.Equal(cfg.Net.DefaultPresets, []string{"@pypi", "@go"}) {
		t.Fatalf("from the environment: %v, %v", cfg.Net.DefaultPresets, err)
	}
	_, err = Load(Sources{DataDir: writeYAML(t, ""), Flags: map[string]string{"net.default_presets": "@npm,@nope"}})
	if err == nil || !strings.Contains(err.Error(), "net.default_presets") || !strings.Contains(err.Error(), "unknown preset @nope (known: @apt") {
		t.Errorf("an unknown preset: %v", err)
	}
}
