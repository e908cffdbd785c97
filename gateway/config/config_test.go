package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeYAML(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPrecedence(t *testing.T) {
	dir := writeYAML(t, "ssh:\n  listen: 127.0.0.1:1001\n  idle_timeout: 5m\nhttp:\n  listen: 127.0.0.1:2001\nlog:\n  level: debug\n")
	cfg, err := Load(Sources{
		DataDir: dir,
		Environ: []string{"SBX_SSH_LISTEN=127.0.0.1:1002", "SBX_HTTP_LISTEN=127.0.0.1:2002", "PATH=/bin"},
		Flags:   map[string]string{"ssh.listen": "127.0.0.1:1003"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, got, want string }{
		{"ssh.listen (flag)", cfg.SSH.Listen, "127.0.0.1:1003"},
		{"http.listen (env)", cfg.HTTP.Listen, "127.0.0.1:2002"},
		{"log.level (yaml)", cfg.Log.Level, "debug"},
		{"log.format (default)", cfg.Log.Format, "auto"},
		{"ssh.idle_timeout (yaml)", cfg.SSH.IdleTimeout.D().String(), (5 * time.Minute).String()},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.key, c.got, c.want)
		}
	}
}

func TestDataDirFromEnv(t *testing.T) {
	dir := writeYAML(t, "log:\n  format: json\n")
	cfg, err := Load(Sources{Environ: []string{"SBX_DATA=" + dir}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != dir || cfg.Log.Format != "json" {
		t.Fatalf("data dir %q format %q", cfg.DataDir, cfg.Log.Format)
	}
}

func TestErrorsNameKeyAndValue(t *testing.T) {
	cases := []struct {
		name, yaml string
		env        []string
		flags      map[string]string
		want       []string
	}{
		{name: "unknown yaml key", yaml: "ssh:\n  lisen: x\n", want: []string{"lisen"}},
		{name: "unknown top key", yaml: "vmm: {}\n", want: []string{"vmm"}},
		{name: "bad yaml duration", yaml: "auth:\n  throttle_window: soon\n", want: []string{"soon"}},
		{name: "bad env int", env: []string{"SBX_HTTP_RATE_PER_MINUTE=lots"}, want: []string{"SBX_HTTP_RATE_PER_MINUTE", "lots"}},
		{name: "unknown flag key", flags: map[string]string{"ssh.nope": "1"}, want: []string{"ssh.nope"}},
		{name: "bad listen", flags: map[string]string{"ssh.listen": "nohost"}, want: []string{"ssh.listen", "nohost"}},
		{name: "bad port", flags: map[string]string{"http.listen": "127.0.0.1:99999"}, want: []string{"http.listen", "99999"}},
		{name: "bad format", flags: map[string]string{"log.format": "xml"}, want: []string{"log.format", "xml"}},
		{name: "zero sessions", flags: map[string]string{"ssh.max_sessions_per_user": "0"}, want: []string{"ssh.max_sessions_per_user", `"0"`}},
		{name: "tls half", flags: map[string]string{"http.tls_cert": "/nonexistent.pem"}, want: []string{"http.tls_cert", "/nonexistent.pem"}},
		{name: "bad proxy", flags: map[string]string{"http.trusted_proxies": "10.0.0.0/8,bogus"}, want: []string{"http.trusted_proxies", "bogus"}},
		{name: "small body", flags: map[string]string{"http.body_limit": "10"}, want: []string{"http.body_limit", `"10"`}},
		{name: "bad backend", flags: map[string]string{"vm.backend": "firecracker"}, want: []string{"vm.backend", "firecracker", "kubernetes"}},
		{name: "kubernetes without image", flags: map[string]string{"vm.backend": "kubernetes"}, want: []string{"vm.kubernetes.image", `""`}},
		{name: "bad namespace", flags: map[string]string{"vm.backend": "kubernetes", "vm.kubernetes.image": "x", "vm.kubernetes.namespace": "Boxes_1"}, want: []string{"vm.kubernetes.namespace", "Boxes_1"}},
		{name: "bad runtime class", env: []string{"SBX_VM_BACKEND=kubernetes", "SBX_VM_KUBERNETES_IMAGE=x", "SBX_VM_KUBERNETES_RUNTIME_CLASS=Kata QEMU"}, want: []string{"vm.kubernetes.runtime_class", "Kata QEMU"}},
		{name: "bad storage class", yaml: "vm:\n  backend: kubernetes\n  kubernetes:\n    image: x\n    storage_class: -fast\n", want: []string{"vm.kubernetes.storage_class", "-fast"}},
		{name: "missing kubeconfig", flags: map[string]string{"vm.backend": "kubernetes", "vm.kubernetes.image": "x", "vm.kubernetes.kubeconfig": "/nonexistent/kubeconfig"}, want: []string{"vm.kubernetes.kubeconfig", "/nonexistent/kubeconfig"}},
		{name: "unknown kubernetes key", yaml: "vm:\n  kubernetes:\n    namspace: x\n", want: []string{"namspace"}},
		{name: "bad dsn scheme", flags: map[string]string{"store.dsn": "mysql://u@h/db"}, want: []string{"store.dsn", "mysql://u@h/db"}},
		{name: "bad dsn no host", env: []string{"SBX_STORE_DSN=postgres:///sbx"}, want: []string{"store.dsn", "postgres:///sbx"}},
		{name: "unknown kex", flags: map[string]string{"ssh.kex": "curve25519-sha256,sntrup761x25519-sha512@openssh.com"}, want: []string{"ssh.kex", `"sntrup761x25519-sha512@openssh.com"`}},
		{name: "unknown cipher", env: []string{"SBX_SSH_CIPHERS=aes256-gcm@openssh.com, aes256-cbc"}, want: []string{"ssh.ciphers", `"aes256-cbc"`}},
		{name: "unknown mac", yaml: "ssh:\n  macs: [hmac-sha2-256-etm@openssh.com, hmac-md5]\n", want: []string{"ssh.macs", `"hmac-md5"`}},
		{name: "empty kex", yaml: "ssh:\n  kex: []\n", want: []string{"ssh.kex", "no key exchange listed"}},
		{name: "empty macs flag", flags: map[string]string{"ssh.macs": " , "}, want: []string{"ssh.macs", "no MAC listed"}},
		{name: "bad digest hour", env: []string{"SBX_NOTIFY_DIGEST_HOUR=24"}, want: []string{"notify.digest_hour", "24", "0 to 23"}},
		{name: "bad expiring lead", flags: map[string]string{"notify.expiring_lead": "0s"}, want: []string{"notify.expiring_lead", "must be positive"}},
		{name: "bad git kind", flags: map[string]string{"git.kind": "gitlab"}, want: []string{"git.kind", "gitlab", "gitea"}},
		{name: "empty git kind", yaml: "git:\n  kind: \"\"\n", want: []string{"git.kind", `""`}},
		{name: "kex listed twice", flags: map[string]string{"ssh.kex": "curve25519-sha256,curve25519-sha256"}, want: []string{"ssh.kex", `"curve25519-sha256": listed twice`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeYAML(t, c.yaml)
			_, err := Load(Sources{DataDir: dir, Environ: c.env, Flags: c.flags})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestGitKind(t *testing.T) {
	for in, want := range map[string]string{"": "github", "gitea": "gitea", "forgejo": "forgejo", "GitHub": "GitHub"} {
		var flags map[string]string
		if in != "" {
			flags = map[string]string{"git.kind": in}
		}
		cfg, err := Load(Sources{DataDir: t.TempDir(), Flags: flags})
		if err != nil || cfg.Git.Kind != want {
			t.Errorf("git.kind %q: got %q, %v; want %q", in, cfg.Git.Kind, err, want)
		}
	}
}

func TestOtherEnvIgnored(t *testing.T) {
	if _, err := Load(Sources{DataDir: t.TempDir(), Environ: []string{"SBX_CACHE=/tmp/x"}}); err != nil {
		t.Fatal(err)
	}
}

func TestTrustedProxies(t *testing.T) {
	cfg := Default()
	cfg.HTTP.TrustedProxies = []string{"10.1.2.3", "192.168.0.0/16", "::1"}
	ps, err := cfg.TrustedProxyPrefixes()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || ps[0].String() != "10.1.2.3/32" || ps[2].String() != "::1/128" {
		t.Fatalf("prefixes %v", ps)
	}
}

// TestSSHAlgorithms: the SSH transport lists default to the modern set,
// `sbx config` prints them, and an operator with old clients can list
// others in any source.
func TestSSHAlgorithms(t *testing.T) {
	def, err := Load(Sources{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	out, err := def.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"kex:\n    - mlkem768x25519-sha256\n", "ciphers:\n    - chacha20-poly1305@openssh.com\n", "macs:\n    - hmac-sha2-256-etm@openssh.com\n"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("printed config lacks %q:\n%s", w, out)
		}
	}

	// A YAML list replaces the default (not appended to it); env and flags
	// take comma-separated lists.
	dir := writeYAML(t, "ssh:\n  kex: [curve25519-sha256, diffie-hellman-group14-sha1]\n")
	set, err := Load(Sources{DataDir: dir,
		Environ: []string{"SBX_SSH_CIPHERS=aes128-ctr, aes256-gcm@openssh.com"},
		Flags:   map[string]string{"ssh.macs": "hmac-sha2-256-etm@openssh.com,hmac-sha1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key       string
		got, want []string
	}{
		{"ssh.kex (default)", def.SSH.KeyExchanges, []string{"mlkem768x25519-sha256", "curve25519-sha256", "curve25519-sha256@libssh.org"}},
		{"ssh.ciphers (default)", def.SSH.Ciphers, []string{"chacha20-poly1305@openssh.com", "aes256-gcm@openssh.com", "aes128-gcm@openssh.com"}},
		{"ssh.macs (default)", def.SSH.MACs, []string{"hmac-sha2-256-etm@openssh.com", "hmac-sha2-512-etm@openssh.com"}},
		{"ssh.kex (yaml)", set.SSH.KeyExchanges, []string{"curve25519-sha256", "diffie-hellman-group14-sha1"}},
		{"ssh.ciphers (env)", set.SSH.Ciphers, []string{"aes128-ctr", "aes256-gcm@openssh.com"}},
		{"ssh.macs (flag)", set.SSH.MACs, []string{"hmac-sha2-256-etm@openssh.com", "hmac-sha1"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s = %q, want %q", c.key, c.got, c.want)
		}
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	cfg := Default()
	cfg.AdminKeys = "ssh-ed25519 AAAA test"
	out, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"listen: 127.0.0.1:2222", "handshake_timeout: 10s", "throttle_window: 10m0s"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("YAML lacks %q:\n%s", w, out)
		}
	}
	dir := writeYAML(t, string(out))
	back, err := Load(Sources{DataDir: dir})
	if err != nil {
		t.Fatalf("printed config does not load back: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back.SSH, cfg.SSH) || back.AdminKeys != cfg.AdminKeys {
		t.Fatalf("round trip changed config: %+v", back)
	}
}

func TestMaskSecrets(t *testing.T) {
	cfg := Default()
	f := field{key: "x.secret", secret: true,
		set: func(c *Config, v string) error { c.AdminKeys = v; return nil },
		get: func(c *Config) string { return c.AdminKeys }}
	cfg.AdminKeys = "hunter2"
	out, err := cfg.yamlWith([]field{f})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "hunter2") || !strings.Contains(string(out), Mask) {
		t.Fatalf("secret not masked:\n%s", out)
	}
}

func TestKubernetesAndDSN(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := writeYAML(t, "vm:\n  backend: kubernetes\n  kubernetes:\n    kubeconfig: "+kc+"\n    runtime_class: kata-qemu\n    image: sbx.local/box:dev\n")
	cfg, err := Load(Sources{DataDir: dir, Environ: []string{"SBX_STORE_DSN=postgres://sbx:hunter2@db.example:5432/sbx?sslmode=disable",
		"SBX_VM_KUBERNETES_STORAGE_CLASS=fast-ssd"}})
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.VM.Kubernetes
	if cfg.VM.Backend != "kubernetes" || k.Kubeconfig != kc || k.Namespace != "sbx-boxes" || k.RuntimeClass != "kata-qemu" ||
		k.StorageClass != "fast-ssd" || k.Image != "sbx.local/box:dev" {
		t.Fatalf("kubernetes config %+v", k)
	}
	out, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "hunter2") || !strings.Contains(string(out), "postgres://sbx:"+Mask+"@db.example:5432/sbx?sslmode=disable") {
		t.Fatalf("DSN not masked (or masked past its password):\n%s", out)
	}
}

func TestBadDSNErrorHidesPassword(t *testing.T) {
	_, err := Load(Sources{DataDir: t.TempDir(), Flags: map[string]string{"store.dsn": "mysql://u:topsecret@h/db"}})
	if err == nil || strings.Contains(err.Error(), "topsecret") || !strings.Contains(err.Error(), "store.dsn") {
		t.Fatalf("error %v", err)
	}
}

func TestMaskDSN(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"postgres://u:p@h/db", "postgres://u:" + Mask + "@h/db"},
		{"postgres://u@h/db?sslmode=disable", "postgres://u@h/db?sslmode=disable"},
		{"postgresql://u:p%40ss@h:1/db", "postgresql://u:" + Mask + "@h:1/db"},
		{"host=h password=p user=u", "host=h password=" + Mask + " user=u"},
	} {
		if got := MaskDSN(c.in); got != c.want {
			t.Errorf("MaskDSN(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func FuzzLoadYAML(f *testing.F) {
	f.Add("ssh:\n  listen: 127.0.0.1:1\n")
	f.Add("http:\n  trusted_proxies: [10.0.0.0/8]\n")
	f.Add("auth: {throttle_window: 1s}")
	f.Fuzz(func(t *testing.T, text string) {
		cfg := Default()
		if err := decodeYAML([]byte(text), &cfg); err != nil {
			return
		}
		_ = cfg.Validate()
	})
}

// TestPrintedConfigMasksSecrets: `sbx config` shows no secret from the real
// key table: the model API key, and a token or password in any base URL.
func TestPrintedConfigMasksSecrets(t *testing.T) {
	cases := []struct {
		name, env, secret, keep string
	}{
		{"model api key", "SBX_MODEL_API_KEY=sk-ant-api03-hunter2", "hunter2", "api_key: '" + Mask + "'"},
		{"password in model.upstream", "SBX_MODEL_UPSTREAM=https://proxy:hunter2@llm.example.com/v1", "hunter2", "upstream: https://" + Mask + "@llm.example.com/v1"},
		{"user in model.upstream", "SBX_MODEL_UPSTREAM=https://proxy:hunter2@llm.example.com", "proxy", "llm.example.com"},
		{"token in git.host", "SBX_GIT_HOST=https://ghp_hunter2@ghe.example.com", "hunter2", "host: https://" + Mask + "@ghe.example.com"},
		{"password in web.public_url", "SBX_WEB_PUBLIC_URL=https://a:hunter2@sbx.example.com", "hunter2", "public_url: https://" + Mask + "@sbx.example.com"},
		{"plain url untouched", "SBX_GIT_HOST=https://ghe.example.com:8443/base", "\x00", "host: https://ghe.example.com:8443/base"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Load(Sources{DataDir: t.TempDir(), Environ: []string{c.env}})
			if err != nil {
				t.Fatal(err)
			}
			out, err := cfg.YAML()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), c.secret) || !strings.Contains(string(out), c.keep) {
				t.Fatalf("printed config leaks %q or lacks %q:\n%s", c.secret, c.keep, out)
			}
			// Printing masks a copy: the effective value is untouched.
			if _, v, _ := strings.Cut(c.env, "="); cfg.Model.APIKey != v && cfg.Model.Upstream != v && cfg.Git.Host != v && cfg.Web.PublicURL != v {
				t.Fatalf("effective config lost %q", v)
			}
		})
	}
}

// TestSecretLookingKeysAreSecret keeps a new key named like a credential
// from being printed in clear by `sbx config`.
func TestSecretLookingKeysAreSecret(t *testing.T) {
	credential := regexp.MustCompile(`(^|[._])(api_key|token|secret|password|seal_key|dsn)$`)
	for _, f := range table {
		if credential.MatchString(f.key) && !f.secret && f.mask == nil {
			t.Errorf("config key %s looks like a credential but is printed in clear", f.key)
		}
	}
}
