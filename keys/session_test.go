package keys_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

func TestLoginLinks(t *testing.T) {
	e := newEnv(t)
	mustAdd(t, e, "alice", keys.RoleOperator, 1)
	mustAdd(t, e, "bob", keys.RoleOperator, 1)

	// Own link only; admins may make one for anyone.
	if _, _, err := e.svc.CreateLoginLink(ctx, actor("alice"), "bob"); !errors.Is(err, keys.ErrForbidden) {
		t.Fatalf("alice's link for bob: %v", err)
	}
	token, exp, err := e.svc.CreateLoginLink(ctx, actor("alice"), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !keys.ValidLoginToken(token) || !strings.HasPrefix(token, keys.LoginPrefix) || !exp.Equal(e.clock.Now().Add(keys.LoginTTL)) {
		t.Fatalf("link %q expires %v", token, exp)
	}
	if got := keys.LoginURL("https://sbx.example.com/", token); got != "https://sbx.example.com/login/"+token {
		t.Errorf("LoginURL: %s", got)
	}
	u, s, err := e.svc.Login(ctx, token, "192.0.2.9", "Chromium\x00\n<b>")
	if err != nil || u.Name != "alice" || s.User != "alice" || s.Addr != "192.0.2.9" || strings.ContainsAny(s.Agent, "\x00\n") {
		t.Fatalf("login: %+v %+v %v", u, s, err)
	}
	if _, _, err := e.svc.Login(ctx, token, "192.0.2.9", ""); !errors.Is(err, keys.ErrBadLogin) {
		t.Fatalf("second use: %v", err)
	}
	// Bound to its user: the session resolves to alice and no one else.
	if got, _, err := e.svc.SessionUser(ctx, s.ID); err != nil || got.Name != "alice" {
		t.Fatalf("session user: %v %v", got, err)
	}

	// Expiry.
	late, _, _ := e.svc.CreateLoginLink(ctx, cli, "bob")
	e.clock.Add(keys.LoginTTL)
	if _, _, err := e.svc.Login(ctx, late, "", ""); !errors.Is(err, keys.ErrBadLogin) {
		t.Fatalf("expired link: %v", err)
	}
	// A disabled user's link does nothing.
	dis, _, _ := e.svc.CreateLoginLink(ctx, cli, "bob")
	if err := e.svc.SetDisabled(ctx, cli, "bob", true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.Login(ctx, dis, "", ""); !errors.Is(err, keys.ErrBadLogin) {
		t.Fatalf("disabled user's link: %v", err)
	}
	if _, _, err := e.svc.CreateLoginLink(ctx, cli, "bob"); !errors.Is(err, keys.ErrDisabled) {
		t.Fatalf("link for a disabled user: %v", err)
	}
	// Every attempt is an audit row.
	rows, err := e.audit.List(ctx, audit.Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rows {
		if r.Action == "login" {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("login audit rows: %d, want 4 (one success, three refusals)", n)
	}
}

// TestRegressionLoginLinkRace: one link raced by many browsers opens one
// session (the spend is a single conditional UPDATE).
func TestRegressionLoginLinkRace(t *testing.T) {
	e := newEnv(t)
	mustAdd(t, e, "alice", keys.RoleOperator, 1)
	token, _, err := e.svc.CreateLoginLink(ctx, cli, "alice")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 16 {
		wg.Go(func() {
			if _, _, err := e.svc.Login(ctx, token, "", ""); err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ok != 1 {
		t.Fatalf("%d sessions from one link, want 1", ok)
	}
}

func TestWebSessionsRevoke(t *testing.T) {
	e := newEnv(t)
	mustAdd(t, e, "alice", keys.RoleOperator, 1)
	mustAdd(t, e, "bob", keys.RoleOperator, 1)
	login := func(user string) keys.WebSession {
		tok, _, err := e.svc.CreateLoginLink(ctx, cli, user)
		if err != nil {
			t.Fatal(err)
		}
		_, s, err := e.svc.Login(ctx, tok, "", "")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a1, a2, b1 := login("alice"), login("alice"), login("bob")
	list, err := e.svc.WebSessions(ctx, actor("alice"), "alice")
	if err != nil || len(list) != 2 {
		t.Fatalf("alice's sessions: %v %v", list, err)
	}
	if _, err := e.svc.WebSessions(ctx, actor("alice"), "bob"); !errors.Is(err, keys.ErrForbidden) {
		t.Fatalf("alice lists bob's sessions: %v", err)
	}
	// Another user's session id answers like a missing one.
	if err := e.svc.RevokeWebSession(ctx, actor("alice"), "alice", b1.ID); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("alice revokes bob's session: %v", err)
	}
	if err := e.svc.RevokeWebSession(ctx, actor("alice"), "alice", a1.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.SessionUser(ctx, a1.ID); !errors.Is(err, keys.ErrNoSession) {
		t.Fatalf("revoked session: %v", err)
	}
	if _, _, err := e.svc.SessionUser(ctx, a2.ID); err != nil {
		t.Fatalf("the other session died too: %v", err)
	}
	// Removing the user ends their sessions.
	if err := e.svc.RemoveUser(ctx, cli, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.SessionUser(ctx, b1.ID); !errors.Is(err, keys.ErrNoSession) {
		t.Fatalf("removed user's session: %v", err)
	}
	for _, bad := range []string{"", "x", strings.Repeat("A", 200), "../../etc"} {
		if _, _, err := e.svc.SessionUser(ctx, bad); !errors.Is(err, keys.ErrNoSession) {
			t.Errorf("session %q: %v", bad, err)
		}
	}
}

func FuzzValidLoginToken(f *testing.F) {
	f.Add("sbxl_" + strings.Repeat("a", 43))
	f.Add("sbxl_")
	f.Add("sbx_" + strings.Repeat("a", 44))
	f.Fuzz(func(t *testing.T, s string) {
		if keys.ValidLoginToken(s) && (len(s) != len(keys.LoginPrefix)+43 || strings.ContainsAny(s[len(keys.LoginPrefix):], "_/?#%. ")) {
			t.Fatalf("ValidLoginToken(%q) = true", s)
		}
	})
}
