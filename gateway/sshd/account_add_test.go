package sshd

import (
	"strings"
	"testing"
)

// TestRegressionAccountAddWithoutProbe: `echo "$TOKEN" | ssh … account add
// work` with no --probe failed with `probe repository: repository "/":
// want owner/name`. Through the real OpenSSH client, the token is now
// checked with the forge's API, shown masked with its login, scopes and
// expiry, and listed.
func TestRegressionAccountAddWithoutProbe(t *testing.T) {
	g := newGateway(t)
	r := g.run("alice", g.token+"\n", "account", "add", "work")
	masked := "…" + g.token[len(g.token)-4:]
	if r.code != 0 || strings.Contains(r.stdout+r.stderr, g.token) {
		t.Fatalf("account add: %+v", r)
	}
	for _, want := range []string{"added account work", masked, "login    alice-gh", "scopes   repo, workflow", "expires  ", "(in 29 days)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("account add output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "probe") {
		t.Errorf("no --probe, yet the output names one:\n%s", r.stdout)
	}
	if out := g.must("alice", "account", "ls"); !strings.Contains(out, "work") || !strings.Contains(out, masked) || strings.Contains(out, g.token) {
		t.Fatalf("account ls:\n%s", out)
	}

	// With --probe the repository check comes on top of the identity.
	r = g.run("alice", g.token+"\n", "account", "add", "home", "--probe", "acme/widget")
	if r.code != 0 || !strings.Contains(r.stdout, "login    alice-gh") || !strings.Contains(r.stdout, "probe    acme/widget is readable") {
		t.Fatalf("account add --probe: %+v", r)
	}

	// A token the forge refuses: one clear line, nothing saved.
	bad := "ghp_" + strings.Repeat("Z", 36)
	r = g.run("alice", bad+"\n", "account", "add", "bad")
	if r.code == 0 || !strings.Contains(r.stderr, "token rejected by the git host") || strings.Contains(r.stderr, bad) || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("account add with a refused token: %+v", r)
	}
	if out := g.must("alice", "account", "ls"); strings.Contains(out, "bad") {
		t.Fatalf("a refused token was saved:\n%s", out)
	}
}
