package sshd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/internal/sshalgo"
	"sbx.dev/sbx/internal/testutil"
)

// auditFinding is one warn or fail ssh-audit reports about an algorithm.
type auditFinding struct {
	kind   string // kex, key, enc, mac, …: ssh-audit's section
	name   string
	level  string // warn or fail
	reason string
}

func (f auditFinding) String() string {
	return fmt.Sprintf("(%s) %s: [%s] %s", f.kind, f.name, f.level, f.reason)
}

// auditReport is what ssh-audit says about one server.
type auditReport struct {
	// offered are the algorithms the server offers, by ssh-audit's section
	// (from its JSON).
	offered map[string][]string
	// findings are every warn and fail, from its text report and, where
	// ssh-audit has them (3.x), the notes and CVEs of its JSON.
	findings []auditFinding
	exit     int
	text     string // the whole text report, for failure messages
}

// sshAudit runs Debian's ssh-audit against addr: once for JSON (what is
// offered; notes and CVEs in ssh-audit 3.x) and once for the batch text
// report, the only output that gives the reasons in every version (2.5.0's
// JSON has none).
func sshAudit(t *testing.T, addr string) auditReport {
	t.Helper()
	bin, err := exec.LookPath("ssh-audit")
	if err != nil {
		t.Fatal("ssh-audit is not installed: run `go tool -modfile=tools/go.mod task deps-test` (it installs the Debian package ssh-audit)")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	audit := func(args ...string) ([]byte, int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, append(args, "-t", "10", "-p", port, host)...).Output()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			return out, exit.ExitCode()
		case err != nil:
			t.Fatalf("ssh-audit %v: %v", args, err)
		}
		return out, 0
	}
	var rep auditReport
	js, _ := audit("-j")
	rep.offered, rep.findings = parseAuditJSON(t, js)
	text, code := audit("-b", "-n")
	rep.exit, rep.text = code, string(text)
	for _, f := range parseAuditText(rep.text) {
		if !slices.Contains(rep.findings, f) {
			rep.findings = append(rep.findings, f)
		}
	}
	return rep
}

// parseAuditJSON reads the offered algorithms of ssh-audit's -j output: a
// list of names (2.5.0's enc and mac) or of {"algorithm", "notes"} (kex and
// key, and everything in 3.x, whose notes carry warn and fail).
func parseAuditJSON(t *testing.T, data []byte) (map[string][]string, []auditFinding) {
	t.Helper()
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("ssh-audit -j: %v\n%s", err, data)
	}
	offered := map[string][]string{}
	var findings []auditFinding
	for _, kind := range []string{"kex", "key", "enc", "mac"} {
		var items []json.RawMessage
		if err := json.Unmarshal(doc[kind], &items); err != nil {
			t.Fatalf("ssh-audit -j: %s: %v\n%s", kind, err, data)
		}
		for _, raw := range items {
			var name string
			if json.Unmarshal(raw, &name) != nil {
				var a struct {
					Algorithm string              `json:"algorithm"`
					Notes     map[string][]string `json:"notes"`
				}
				if err := json.Unmarshal(raw, &a); err != nil {
					t.Fatalf("ssh-audit -j: %s entry %s: %v", kind, raw, err)
				}
				name = a.Algorithm
				for _, level := range []string{"fail", "warn"} {
					for _, why := range a.Notes[level] {
						findings = append(findings, auditFinding{kind, name, level, why})
					}
				}
			}
			offered[kind] = append(offered[kind], name)
		}
	}
	var cves []struct {
		Name        string  `json:"name"`
		CVSSv2      float64 `json:"cvssv2"`
		Description string  `json:"description"`
	}
	if raw, ok := doc["cves"]; ok {
		if err := json.Unmarshal(raw, &cves); err != nil {
			t.Fatalf("ssh-audit -j: cves: %v", err)
		}
	}
	for _, c := range cves {
		findings = append(findings, auditFinding{"cve", c.Name, "fail", c.Description})
	}
	return offered, findings
}

var (
	// auditLine is "(kex) NAME -- [warn] REASON"; RSA host keys and DH
	// group exchange carry a size in parentheses after the name.
	auditLine = regexp.MustCompile(`^\((\w+)\) (\S+)(?: \([^)]*\))? +-- \[(\w+)\] (.*)$`)
	// auditMore is a further note on the line's algorithm: "  `- [warn] REASON".
	auditMore = regexp.MustCompile("^ +`- \\[(\\w+)\\] (.*)$")
)

// parseAuditText reads the warn and fail notes of ssh-audit's -b -n report.
func parseAuditText(text string) []auditFinding {
	var out []auditFinding
	var last auditFinding
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " ")
		if m := auditLine.FindStringSubmatch(line); m != nil {
			last = auditFinding{m[1], m[2], m[3], m[4]}
		} else if m := auditMore.FindStringSubmatch(line); m != nil && last.name != "" {
			last.level, last.reason = m[1], m[2]
		} else {
			last = auditFinding{}
			continue
		}
		if last.level == "warn" || last.level == "fail" {
			out = append(out, last)
		}
	}
	return out
}

// auditAccepted returns the only findings the gateway's defaults may draw,
// each for an algorithm that cannot go, with why. Anything else ssh-audit
// flags fails the test.
func auditAccepted() map[auditFinding]string {
	return map[auditFinding]string{
		// Debian 12's ssh-audit 2.5.0 predates the post-quantum hybrid (OpenSSH
		// 9.9, its default since 10.0) and calls it unknown; newer ssh-audit
		// rates it good. It is the strongest key exchange on offer: removing it
		// to please an old database would weaken every client that has it.
		{"kex", gossh.KeyExchangeMLKEM768X25519, "warn", "unknown algorithm"}: "post-quantum kex newer than ssh-audit 2.5.0",
		// Not an algorithm: the strict key exchange marker, the counter-measure
		// to Terrapin (CVE-2023-48795), which x/crypto always sends. ssh-audit
		// 2.5.0 predates it; newer ssh-audit lists it as that counter-measure.
		{"kex", "kex-strict-s-v00@openssh.com", "warn", "unknown algorithm"}: "Terrapin counter-measure newer than ssh-audit 2.5.0",
		// Newer ssh-audit (3.4) warns on every key exchange that is not
		// post-quantum. x/crypto implements no sntrup761x25519, and OpenSSH
		// before 9.9 (Debian 12 ships 9.2, Ubuntu 24.04 9.6) has no
		// mlkem768x25519: without curve25519 those clients could not connect
		// at all. x/crypto offers the @libssh.org name whenever
		// curve25519-sha256 is offered (Config.SetDefaults), so that one goes
		// with it.
		{"kex", gossh.KeyExchangeCurve25519, "warn", "does not provide protection against post-quantum attacks"}:    "the only kex OpenSSH < 9.9 shares with x/crypto",
		{"kex", "curve25519-sha256@libssh.org", "warn", "does not provide protection against post-quantum attacks"}: "added by x/crypto with curve25519-sha256",
	}
}

// TestRegressionSSHAuditWeakAlgorithms runs the usual outside audit of an
// SSH server, ssh-audit, against the real SSH front. The front offered
// x/crypto's defaults: hmac-sha1-96 (removed from OpenSSH as unsafe),
// hmac-sha1, diffie-hellman-group14-sha1, encrypt-and-MAC SHA-2 MACs and
// NIST-curve ECDH. It must offer exactly the modern set (sshalgo) and draw
// no warn or fail beyond auditAccepted. The same audit of a front offering
// x/crypto's defaults, as before the fix, shows that it sees each of those.
func TestRegressionSSHAuditWeakAlgorithms(t *testing.T) {
	cases := []struct {
		name   string
		adjust func(*Server)
		// flagged are algorithms the audit must flag (warn or fail) that
		// are not accepted; nil means none may be.
		flagged []string
	}{
		{name: "defaults"},
		{name: "x/crypto defaults, as before the fix",
			adjust: func(s *Server) { s.KeyExchanges, s.Ciphers, s.MACs = nil, nil, nil },
			flagged: []string{"diffie-hellman-group14-sha1", "ecdh-sha2-nistp256", "ecdh-sha2-nistp384", "ecdh-sha2-nistp521",
				"hmac-sha1-96", "hmac-sha1", "hmac-sha2-256", "hmac-sha2-512"}},
	}
	accepted := auditAccepted()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := startWith(t, 20, c.adjust)
			rep := sshAudit(t, f.addr)
			var bad []string
			flagged := map[string]bool{}
			for _, fi := range rep.findings {
				if _, ok := accepted[fi]; !ok {
					bad = append(bad, fi.String())
					flagged[fi.name] = true
				}
			}
			if c.flagged != nil {
				for _, name := range c.flagged {
					if !flagged[name] {
						t.Errorf("ssh-audit did not flag %s; its report:\n%s", name, rep.text)
					}
				}
				if rep.exit < 2 {
					t.Errorf("ssh-audit exit %d on weak algorithms, want 2 (warn) or 3 (fail)", rep.exit)
				}
				return
			}
			if len(bad) > 0 {
				t.Errorf("ssh-audit flags %d algorithm(s) on the SSH front:\n  %s\nits report:\n%s", len(bad), strings.Join(bad, "\n  "), rep.text)
			}
			for kind, want := range map[string][]string{
				"kex": append(sshalgo.Default(sshalgo.KeyExchange), "kex-strict-s-v00@openssh.com"),
				"enc": sshalgo.Default(sshalgo.Cipher),
				"mac": sshalgo.Default(sshalgo.MAC),
				"key": {gossh.KeyAlgoED25519},
			} {
				if got := rep.offered[kind]; !slices.Equal(got, want) {
					t.Errorf("ssh-audit sees %s %q offered, want %q", kind, got, want)
				}
			}
			// ssh-audit's exit code agrees: 0 with no finding, 2 (warn) with
			// only accepted warns; 3 (fail) or 1 (no connection) never.
			want := 0
			if len(rep.findings) > 0 {
				want = 2
			}
			if rep.exit != want {
				t.Errorf("ssh-audit exit %d, want %d (findings %v); its report:\n%s", rep.exit, want, rep.findings, rep.text)
			}
			for _, fi := range rep.findings {
				t.Logf("accepted: %s (%s)", fi, accepted[fi])
			}
		})
	}
}

// openSSHKey writes a new ed25519 key for the OpenSSH client and registers
// it to the fixture's admin (through `key add`, as a user would).
func openSSHKey(t *testing.T, f *fixture) string {
	t.Helper()
	file, signer := testutil.OpenSSHKey(t)
	c, err := f.dial(gossh.PublicKeys(f.admin))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, stderr, err := run(t, c, "key add "+strings.TrimSpace(authorized(signer))); err != nil {
		t.Fatalf("key add: %v: %s", err, stderr)
	}
	return file
}

// TestRegressionSSHWeakAlgorithmsRefused: the real OpenSSH client, asking
// only for a weak algorithm, is refused in the handshake; asking for any
// of the modern ones, or for nothing in particular, it gets in. An operator
// who adds aes128-ctr for an old client still gets only ETM MACs with it.
func TestRegressionSSHWeakAlgorithmsRefused(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Fatal("the OpenSSH client is not installed: run `go tool -modfile=tools/go.mod task deps-test`")
	}
	modern := startWith(t, 20, nil)
	withCTR := startWith(t, 20, func(s *Server) { s.Ciphers = append(sshalgo.Default(sshalgo.Cipher), gossh.CipherAES128CTR) })
	cases := []struct {
		name   string
		f      *fixture
		opts   []string
		refuse string // "" connects; else what OpenSSH says
	}{
		{"default client", modern, nil, ""},
		{"curve25519-sha256", modern, []string{"-o", "KexAlgorithms=curve25519-sha256"}, ""},
		{"curve25519-sha256@libssh.org", modern, []string{"-o", "KexAlgorithms=curve25519-sha256@libssh.org"}, ""},
		{"chacha20-poly1305", modern, []string{"-c", "chacha20-poly1305@openssh.com"}, ""},
		{"aes256-gcm", modern, []string{"-c", "aes256-gcm@openssh.com"}, ""},
		{"aes128-gcm", modern, []string{"-c", "aes128-gcm@openssh.com"}, ""},
		{"diffie-hellman-group14-sha1", modern, []string{"-o", "KexAlgorithms=diffie-hellman-group14-sha1"}, "no matching key exchange method found"},
		{"diffie-hellman-group14-sha256", modern, []string{"-o", "KexAlgorithms=diffie-hellman-group14-sha256"}, "no matching key exchange method found"},
		{"ecdh-sha2-nistp256", modern, []string{"-o", "KexAlgorithms=ecdh-sha2-nistp256"}, "no matching key exchange method found"},
		{"ecdh-sha2-nistp521", modern, []string{"-o", "KexAlgorithms=ecdh-sha2-nistp521"}, "no matching key exchange method found"},
		{"aes128-ctr with hmac-sha1", modern, []string{"-c", "aes128-ctr", "-o", "MACs=hmac-sha1"}, "no matching cipher found"},
		{"aes256-ctr", modern, []string{"-c", "aes256-ctr"}, "no matching cipher found"},
		{"operator's aes128-ctr with hmac-sha1", withCTR, []string{"-c", "aes128-ctr", "-o", "MACs=hmac-sha1"}, "no matching MAC found"},
		{"operator's aes128-ctr with hmac-sha1-96", withCTR, []string{"-c", "aes128-ctr", "-o", "MACs=hmac-sha1-96"}, "no matching MAC found"},
		{"operator's aes128-ctr with hmac-sha2-256", withCTR, []string{"-c", "aes128-ctr", "-o", "MACs=hmac-sha2-256"}, "no matching MAC found"},
		{"operator's aes128-ctr with an ETM MAC", withCTR, []string{"-c", "aes128-ctr", "-o", "MACs=hmac-sha2-256-etm@openssh.com"}, ""},
	}
	keys := map[*fixture]string{modern: openSSHKey(t, modern), withCTR: openSSHKey(t, withCTR)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, port, err := net.SplitHostPort(c.f.addr)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append([]string{"-F", "/dev/null", "-i", keys[c.f], "-o", "IdentitiesOnly=yes",
				"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
				"-p", port}, c.opts...) // LogLevel INFO: it says why a handshake failed
			cmd := exec.CommandContext(ctx, "ssh", append(args, "127.0.0.1", "whoami")...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			if c.refuse == "" {
				if err != nil || !strings.HasPrefix(stdout.String(), "admin (") {
					t.Fatalf("ssh %v: %v: stdout %q stderr %q", c.opts, err, stdout.String(), stderr.String())
				}
				return
			}
			if err == nil || !strings.Contains(stderr.String(), c.refuse) {
				t.Fatalf("ssh %v: err %v stdout %q stderr %q; want refused with %q", c.opts, err, stdout.String(), stderr.String(), c.refuse)
			}
		})
	}
}
