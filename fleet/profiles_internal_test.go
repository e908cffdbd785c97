package fleet

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestCheckEnv: a profile's environment is KEY=VALUE with a plain name,
// nothing that looks secret-bearing, nothing sbx sets itself, values of
// one line; each refusal is ErrInvalid naming the variable.
func TestCheckEnv(t *testing.T) {
	for _, tc := range []struct {
		in     []string
		errHas string
	}{
		{in: []string{"NODE_ENV=test", "GOFLAGS=-mod=mod", "_X=", "A1=a=b c"}},
		{in: nil},
		{in: []string{"NODE_ENV"}, errHas: "want KEY=VALUE"},
		{in: []string{"node_env=x"}, errHas: `env name "node_env"`},
		{in: []string{"1X=x"}, errHas: "[A-Z_][A-Z0-9_]*"},
		{in: []string{"A-B=x"}, errHas: "[A-Z_][A-Z0-9_]*"},
		{in: []string{"=x"}, errHas: `env name ""`},
		{in: []string{"GITHUB_TOKEN=x"}, errHas: "GITHUB_TOKEN looks like it carries a secret"},
		{in: []string{"NPM_AUTH_TOKEN=x"}, errHas: "carries a secret"},
		{in: []string{"AWS_SECRET_ACCESS_KEY=x"}, errHas: "carries a secret"},
		{in: []string{"DB_PASSWORD=x"}, errHas: "carries a secret"},
		{in: []string{"OPENAI_API_KEY=x"}, errHas: "carries a secret"},
		{in: []string{"API_KEY=x"}, errHas: "carries a secret"},
		{in: []string{"STRIPE_APIKEY=x"}, errHas: "carries a secret"},
		{in: []string{"SESSION_ID=x"}, errHas: "carries a secret"},
		{in: []string{"PRIVATE_PEM=x"}, errHas: "carries a secret"},
		{in: []string{"HOME=/tmp"}, errHas: "HOME is set by sbx"},
		{in: []string{"PATH=/tmp"}, errHas: "PATH is set by sbx"},
		{in: []string{"HTTPS_PROXY=http://evil"}, errHas: "HTTPS_PROXY is set by sbx"},
		{in: []string{"CI=0"}, errHas: "CI is set by sbx"},
		{in: []string{"SBX_BOX=x"}, errHas: "starting SBX_"},
		{in: []string{"SBX_LANE=driver"}, errHas: "starting SBX_"},
		{in: []string{"ANTHROPIC_BASE_URL=http://x"}, errHas: "starting ANTHROPIC_"},
		{in: []string{"CLAUDE_CODE_SHELL_PREFIX=x"}, errHas: "starting CLAUDE_"},
		{in: []string{"LD_PRELOAD=/x.so"}, errHas: "starting LD_"},
		{in: []string{"GIT_SSH_COMMAND=x"}, errHas: "starting GIT_"},
		{in: []string{"NODE_OPTIONS=--require /x"}, errHas: "NODE_OPTIONS is set by sbx"},
		{in: []string{"A=1", "A=2"}, errHas: "A given twice"},
		{in: []string{"A=x\ny"}, errHas: "env A: value must be one line"},
		{in: []string{"A=x\ry"}, errHas: "one line"},
		{in: []string{"A=x\x00"}, errHas: "one line"},
		{in: []string{"A=\xff"}, errHas: "one line"},
		{in: []string{"A=" + strings.Repeat("v", maxEnvValue+1)}, errHas: "value is 1025 bytes"},
		{in: []string{strings.Repeat("N", maxEnvName+1) + "=x"}, errHas: "at most 64 characters"},
		{in: slices.Repeat([]string{"X=1"}, MaxProfileEnv+1), errHas: "33 variables (max 32)"},
	} {
		got, err := CheckEnv(tc.in)
		if tc.errHas == "" {
			if err != nil || len(got) != len(tc.in) {
				t.Errorf("CheckEnv(%q) = %q, %v", tc.in, got, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("CheckEnv(%.80q) = %v; want ErrInvalid with %q", tc.in, err, tc.errHas)
		}
	}
	var many []string
	for i := range 30 {
		many = append(many, "V"+strings.Repeat("X", i%10)+string(rune('A'+i%26))+strings.Repeat("Y", i/26)+"="+strings.Repeat("v", 500))
	}
	if _, err := CheckEnv(many); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "bytes in all") {
		t.Errorf("15 KiB of env: %v", err)
	}
}

// TestCheckInstall: install commands are lines of text, trimmed, empty
// ones dropped, bounded in count and size.
func TestCheckInstall(t *testing.T) {
	got, err := CheckInstall([]string{"  npm ci ", "", "make deps"})
	if err != nil || !slices.Equal(got, []string{"npm ci", "make deps"}) {
		t.Fatalf("CheckInstall: %q %v", got, err)
	}
	for _, tc := range []struct {
		in     []string
		errHas string
	}{
		{[]string{"ok", "a\nb"}, "install command 2: want one line"},
		{[]string{"a\x00"}, "install command 1"},
		{[]string{"\xff"}, "UTF-8"},
		{[]string{strings.Repeat("x", maxInstallCmd+1)}, "install command 1 is 4097 bytes"},
		{slices.Repeat([]string{"true"}, MaxInstallCmds+1), "17 install commands (max 16)"},
	} {
		if _, err := CheckInstall(tc.in); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("CheckInstall(%.60q) = %v; want %q", tc.in, err, tc.errHas)
		}
	}
}

// TestCleanProfile: each field is checked as its own flag is (image, setup,
// allow, sizes, max duration, agent), the error naming it.
func TestCleanProfile(t *testing.T) {
	f := &Fleet{policy: &livePolicy{p: Policy{MaxLifetime: 8 * time.Hour, MaxBoxMemoryMiB: 4096, MaxBoxVCPUs: 4}}}
	f.policy.p.Spec.Image = "agent"
	good := Profile{Name: "node-20", Image: "agent", Setup: "apt-get install -y jq\n", Install: []string{"npm ci"}, Env: []string{"NODE_ENV=test"},
		Allow: []string{"@NPM", "example.com"}, MemoryMiB: 2048, VCPUs: 2, MaxDuration: "90m", Agent: "script"}
	p, err := f.cleanProfile(good)
	if err != nil || p.MaxDuration != "1h30m0s" || !slices.Equal(p.Allow, []string{"@npm", "example.com"}) || p.Image != "agent" {
		t.Fatalf("cleanProfile: %+v %v", p, err)
	}
	if q, err := f.cleanProfile(p); err != nil || q.MaxDuration != p.MaxDuration {
		t.Errorf("clean twice: %+v %v", q, err)
	}
	for _, tc := range []struct {
		edit   func(*Profile)
		kind   error
		errHas string
	}{
		{func(p *Profile) { p.Name = "" }, ErrInvalid, `profile name ""`},
		{func(p *Profile) { p.Name = "Node" }, ErrInvalid, "profile name"},
		{func(p *Profile) { p.Name = "-x" }, ErrInvalid, "profile name"},
		{func(p *Profile) { p.Name = "a/b" }, ErrInvalid, "profile name"},
		{func(p *Profile) { p.Name = strings.Repeat("a", 65) }, ErrInvalid, "profile name"},
		{func(p *Profile) { p.Image = "ubuntu" }, ErrInvalid, `image "ubuntu": this gateway boots only the image "agent"`},
		{func(p *Profile) { p.Setup = "a\x00" }, ErrInvalid, "setup: setup script is not valid"},
		{func(p *Profile) { p.Allow = []string{"@nope"} }, ErrInvalid, "unknown preset @nope"},
		{func(p *Profile) { p.Allow = []string{"http://x"} }, ErrInvalid, "allow"},
		{func(p *Profile) { p.MemoryMiB = 32 }, ErrInvalid, "memory 32 MiB: a box needs at least"},
		{func(p *Profile) { p.MemoryMiB = 8192 }, ErrLimit, "box.max_memory_mib"},
		{func(p *Profile) { p.VCPUs = -1 }, ErrInvalid, "cpus -1"},
		{func(p *Profile) { p.VCPUs = 8 }, ErrLimit, "box.max_cpus"},
		{func(p *Profile) { p.MaxDuration = "soon" }, ErrInvalid, `max duration: duration "soon"`},
		{func(p *Profile) { p.MaxDuration = "10s" }, ErrInvalid, "at least 1m"},
		{func(p *Profile) { p.MaxDuration = "9h" }, ErrLimit, "box.max_lifetime"},
		{func(p *Profile) { p.Agent = "gpt" }, ErrInvalid, `agent: unknown agent profile "gpt"`},
		{func(p *Profile) { p.Env = []string{"GH_TOKEN=x"} }, ErrInvalid, "GH_TOKEN looks like it carries a secret"},
		{func(p *Profile) { p.Install = []string{"a\nb"} }, ErrInvalid, "install command 1"},
	} {
		p := good
		tc.edit(&p)
		if _, err := f.cleanProfile(p); !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%+v: %v; want %v with %q", p, err, tc.kind, tc.errHas)
		}
	}
}

// TestWithProfile: a request's own fields win over the profile's (agent,
// memory, vCPUs) or add to them (allow, setup after the profile's).
func TestWithProfile(t *testing.T) {
	p := Profile{Agent: "script", MemoryMiB: 2048, VCPUs: 2, Allow: []string{"@npm"}, Setup: "echo profile\n"}
	got := withProfile(p, DelegateRequest{Task: "t"})
	if got.Agent != "script" || got.MemoryMiB != 2048 || got.VCPUs != 2 || !slices.Equal(got.Allow, []string{"@npm"}) || got.Setup != "echo profile\n" {
		t.Errorf("profile only: %+v", got)
	}
	got = withProfile(p, DelegateRequest{Task: "t", Agent: "claude", MemoryMiB: 1024, VCPUs: 1, Allow: []string{"example.com"}, Setup: "echo mine"})
	if got.Agent != "claude" || got.MemoryMiB != 1024 || got.VCPUs != 1 || !slices.Equal(got.Allow, []string{"@npm", "example.com"}) || got.Setup != "echo profile\necho mine" {
		t.Errorf("request wins: %+v", got)
	}
	if !slices.Equal(p.Allow, []string{"@npm"}) {
		t.Errorf("the profile's allow-list changed: %q", p.Allow)
	}
}

// FuzzProfile: whatever a stored body or a front's input holds, cleaning
// it is an ErrInvalid/ErrLimit or a profile whose every variable passes
// the name and value rules, and cleaning that again changes nothing.
func FuzzProfile(f *testing.F) {
	f.Add(`{"name":"node","env":["NODE_ENV=test"],"install":["npm ci"],"allow":["@npm"],"max_duration":"2h"}`, "A=b")
	f.Add(`{"name":"x","env":["HOME=/"]}`, "LD_PRELOAD=x")
	f.Add(`{"name":"x","memory_mib":-5,"agent":"claude"}`, "A=\n")
	f.Add(`{}`, "GITHUB_TOKEN=1")
	fl := &Fleet{policy: &livePolicy{p: Policy{MaxLifetime: 24 * time.Hour}}}
	f.Fuzz(func(t *testing.T, body, kv string) {
		var p Profile
		if json.Unmarshal([]byte(body), &p) != nil {
			p = Profile{Name: "x"}
		}
		p.Env = append(p.Env, kv)
		c, err := fl.cleanProfile(p)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrLimit) {
				t.Fatalf("cleanProfile: %v is neither ErrInvalid nor ErrLimit", err)
			}
			return
		}
		for _, e := range c.Env {
			k, v, ok := strings.Cut(e, "=")
			if !ok || checkEnvName(k) != nil || strings.ContainsAny(v, "\x00\r\n") || !utf8.ValidString(v) ||
				strings.HasPrefix(k, "SBX_") || strings.HasPrefix(k, "LD_") || k == "HOME" || strings.Contains(k, "TOKEN") {
				t.Fatalf("accepted env %q", e)
			}
		}
		for _, cmd := range c.Install {
			if cmd == "" || strings.ContainsAny(cmd, "\x00\n") {
				t.Fatalf("accepted install command %q", cmd)
			}
		}
		again, err := fl.cleanProfile(c)
		if err != nil {
			t.Fatalf("a clean profile is refused: %v (%+v)", err, c)
		}
		a, _ := json.Marshal(again)
		b, _ := json.Marshal(c)
		if string(a) != string(b) {
			t.Fatalf("cleaning twice changed it:\n%s\n%s", b, a)
		}
	})
}
