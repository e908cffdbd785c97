package sshd

import (
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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

// TestAccountLsShowsIdentity: `account ls` shows whose each token is and
// when it expires, as `account add` checked with the forge's API and the
// store kept; a token within a week of its expiry, or past it, is flagged
// in the table, in --json and with what to do on stderr. The gateway's
// clock moves; the forge's answer (expiry in 30 days) does not.
func TestAccountLsShowsIdentity(t *testing.T) {
	var ahead atomic.Int64
	g := newGatewayWith(t, func(o *Options) {
		o.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	})
	if r := g.run("alice", g.token+"\n", "account", "add", "work"); r.code != 0 {
		t.Fatalf("account add: %+v", r)
	}
	type row struct {
		Name        string   `json:"name"`
		Login       string   `json:"login"`
		Scopes      []string `json:"scopes"`
		Expires     string   `json:"expires"`
		Expired     bool     `json:"expired"`
		ExpiresSoon bool     `json:"expires_soon"`
	}
	ls := func() (table, stderr string, rows []row) {
		t.Helper()
		r := g.run("alice", "", "account", "ls")
		if r.code != 0 {
			t.Fatalf("account ls: %+v", r)
		}
		if err := json.Unmarshal([]byte(g.must("alice", "account", "ls", "--json")), &rows); err != nil || len(rows) != 1 {
			t.Fatalf("account ls --json: %v %+v", err, rows)
		}
		return r.stdout, r.stderr, rows
	}
	for _, tc := range []struct {
		name          string
		ahead         time.Duration
		text          string
		soon, expired bool
	}{
		{"fresh", 0, "(in 29 days)", false, false},
		{"a few days left", 26 * 24 * time.Hour, "(in 3 days: expires soon)", true, false},
		{"expired", 31 * 24 * time.Hour, "(expired)", false, true},
	} {
		ahead.Store(int64(tc.ahead))
		table, stderr, rows := ls()
		lines := strings.Split(strings.TrimSpace(table), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "LOGIN") || !strings.Contains(lines[0], "EXPIRES") ||
			!strings.Contains(lines[1], "alice-gh") || !strings.Contains(lines[1], tc.text) || strings.Contains(table, g.token) {
			t.Errorf("%s: account ls:\n%s", tc.name, table)
		}
		flagged := tc.soon || tc.expired
		if hint := strings.Contains(stderr, "account work: token expiry") && strings.Contains(stderr, "account add work"); hint != flagged {
			t.Errorf("%s: stderr %q, want a replace hint: %v", tc.name, stderr, flagged)
		}
		r := rows[0]
		if r.Name != "work" || r.Login != "alice-gh" || !slices.Equal(r.Scopes, []string{"repo", "workflow"}) ||
			r.ExpiresSoon != tc.soon || r.Expired != tc.expired {
			t.Errorf("%s: account ls --json: %+v", tc.name, r)
		}
		if exp, err := time.Parse(time.RFC3339, r.Expires); err != nil || time.Until(exp) < 29*24*time.Hour {
			t.Errorf("%s: expires %q (%v), want the forge's, 30 days from the add", tc.name, r.Expires, err)
		}
	}
}
