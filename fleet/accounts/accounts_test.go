package accounts_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/gittest"
	"sbx.dev/sbx/fleet/seal"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/store"
)

const (
	tokA = "ghp_AAAAaaaa1111222233334444555566667777"
	tokB = "ghp_BBBBbbbb1111222233334444555566668888"
)

var (
	alice = keys.Actor{User: "alice", Role: keys.RoleOperator, Front: "ssh", Addr: "127.0.0.1:1"}
	bob   = keys.Actor{User: "bob", Role: keys.RoleOperator, Front: "ssh", Addr: "127.0.0.1:2"}
	root  = keys.Actor{User: "root", Role: keys.RoleAdmin, Front: "ssh", Addr: "127.0.0.1:3"}
)

type env struct {
	svc   *accounts.Service
	db    *store.SQLite
	dir   string
	git   *gittest.Server
	sealr *seal.Sealer
}

// newEnv: a real SQLite store with users alice, bob (operators) and root
// (admin), a real sealer, and a real git server where tokA reaches acme/a
// and acme/shared, tokB reaches acme/b and acme/shared.
func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := store.Open(ctx, filepath.Join(dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, u := range []keys.User{
		{Name: "alice", Role: keys.RoleOperator}, {Name: "bob", Role: keys.RoleOperator}, {Name: "root", Role: keys.RoleAdmin},
	} {
		u.Created = time.Now()
		if _, err := db.CreateUser(ctx, u, nil, audit.Entry{Action: "user.add", Target: u.Name}); err != nil {
			t.Fatal(err)
		}
	}
	sealr, err := seal.Load(dir, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	srv := gittest.New(t, gittest.Options{Tokens: map[string][]string{
		tokA: {"acme/a", "acme/shared"},
		tokB: {"acme/b", "acme/shared"},
	}})
	for _, r := range []string{"a", "b", "shared", "nobody"} {
		srv.CreateRepo("acme", r, map[string]string{"README": r})
	}
	log := audit.New(db, slog.New(slog.DiscardHandler), nil)
	svc, err := accounts.New(db, sealr, log, accounts.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return &env{svc: svc, db: db, dir: dir, git: srv, sealr: sealr}
}

func repo(s string) accounts.Repo {
	r, err := accounts.ParseRepo(s)
	if err != nil {
		panic(err)
	}
	return r
}

func (e *env) audit(t *testing.T, action string) []audit.Entry {
	t.Helper()
	all, err := e.db.ListAudit(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Entry
	for _, a := range all {
		if a.Action == action {
			out = append(out, a)
		}
	}
	return out
}

func TestAddListRemoveDefault(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, err := e.svc.Add(ctx, alice, "alice", "work", tokA, repo("acme/a"))
	if err != nil {
		t.Fatal(err)
	}
	if !a.Default || a.Masked != "ghp_…7777" || a.Host != e.git.URL {
		t.Fatalf("added %+v", a)
	}
	// The probe reached the host with the token, as git would.
	var probed bool
	for _, r := range e.git.Requests() {
		probed = probed || (r.Path == "/acme/a.git/info/refs" && r.Query == "service=git-upload-pack" && r.User == "x-access-token" && r.Status == 200)
	}
	if !probed {
		t.Fatalf("no successful probe in %+v", e.git.Requests())
	}
	if _, err := e.svc.Add(ctx, alice, "alice", "home", tokB, repo("acme/b")); err != nil {
		t.Fatal(err)
	}
	list, err := e.svc.List(ctx, alice, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "work" || !list[0].Default || list[1].Name != "home" || list[1].Default {
		t.Fatalf("list = %+v", list)
	}
	if err := e.svc.SetDefault(ctx, alice, "alice", "home"); err != nil {
		t.Fatal(err)
	}
	list, _ = e.svc.List(ctx, alice, "alice")
	if list[0].Name != "home" || !list[0].Default || list[1].Default {
		t.Fatalf("after default: %+v", list)
	}
	if err := e.svc.Remove(ctx, alice, "alice", "home"); err != nil {
		t.Fatal(err)
	}
	list, _ = e.svc.List(ctx, alice, "alice")
	if len(list) != 1 || list[0].Name != "work" || list[0].Default {
		t.Fatalf("after rm: %+v", list)
	}
	for _, action := range []string{"account.add", "account.default", "account.rm"} {
		rows := e.audit(t, action)
		if len(rows) == 0 || rows[0].Result != audit.ResultOK || rows[0].Actor != "alice" {
			t.Fatalf("%s audit rows %+v", action, rows)
		}
		for _, r := range rows {
			if strings.Contains(r.Detail, tokA) || strings.Contains(r.Detail, tokB) {
				t.Fatalf("audit row holds a token: %+v", r)
			}
		}
	}
	if err := e.svc.Remove(ctx, alice, "alice", "home"); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("second rm: %v", err)
	}
	if err := e.svc.SetDefault(ctx, alice, "alice", "nope"); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("default of missing: %v", err)
	}
}

// TestTokenNotInDatabase: the token is sealed; neither the database nor its
// WAL holds it in clear, and the key file is outside the database.
func TestTokenNotInDatabase(t *testing.T) {
	e := newEnv(t)
	if _, err := e.svc.Add(context.Background(), alice, "alice", "work", tokA, repo("acme/a")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{store.FileName, store.FileName + "-wal"} {
		b, err := os.ReadFile(filepath.Join(e.dir, f))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(tokA)) || bytes.Contains(b, []byte(tokA[4:])) {
			t.Fatalf("%s holds the token in clear", f)
		}
	}
	_, tok, err := e.svc.Token(context.Background(), "alice", "work")
	if err != nil || tok != tokA {
		t.Fatalf("Token = %q, %v", tok, err)
	}
}

func TestAddRefusedSavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		token string
		repo  string
		want  error
	}{
		{"bad token", "ghp_wrongwrongwrongwrongwrong", "acme/a", accounts.ErrTokenRejected},
		{"repo not visible", tokA, "acme/b", accounts.ErrUnreachable},
		{"repo missing", tokA, "acme/missing", accounts.ErrUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.svc.Add(ctx, alice, "alice", "work", tc.token, repo(tc.repo))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Add: %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), tc.token) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error shows the token or spans lines: %q", err)
			}
			if list, _ := e.svc.List(ctx, alice, "alice"); len(list) != 0 {
				t.Fatalf("saved after a failed probe: %+v", list)
			}
		})
	}
	rows := e.audit(t, "account.add")
	if len(rows) != 3 || rows[0].Result == audit.ResultOK {
		t.Fatalf("failed adds audit: %+v", rows)
	}
}

func TestBadInputMakesNoRequest(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, account, token string
		repo                 accounts.Repo
	}{
		{"empty name", "", tokA, repo("acme/a")},
		{"upper name", "Work", tokA, repo("acme/a")},
		{"name with slash", "a/b", tokA, repo("acme/a")},
		{"name too long", strings.Repeat("a", 33), tokA, repo("acme/a")},
		{"empty token", "work", "", repo("acme/a")},
		{"short token", "work", "ghp_1", repo("acme/a")},
		{"token with space", "work", "ghp_aaaa bbbb", repo("acme/a")},
		{"token with newline", "work", "ghp_aaaabbbb\nX-Evil: 1", repo("acme/a")},
		{"token with colon", "work", "user:ghp_aaaabbbb", repo("acme/a")},
		{"bad repo", "work", tokA, accounts.Repo{Owner: "../x", Name: "y"}},
		// The zero Repo means "no probe" (the identity check alone); half
		// a repository is still bad input.
		{"owner only repo", "work", tokA, accounts.Repo{Owner: "acme"}},
		{"name only repo", "work", tokA, accounts.Repo{Name: "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.git.Requests())
			_, err := e.svc.Add(ctx, alice, "alice", tc.account, tc.token, tc.repo)
			if !errors.Is(err, keys.ErrInvalid) {
				t.Fatalf("Add: %v, want ErrInvalid", err)
			}
			if tc.token != "" && strings.Contains(err.Error(), tc.token) {
				t.Fatal("error echoes the token")
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			if len(e.git.Requests()) != before {
				t.Fatal("bad input reached the git host")
			}
		})
	}
	if _, err := e.svc.Add(ctx, alice, "alice", "work", tokA, repo("acme/a")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Add(ctx, alice, "alice", "work", tokB, repo("acme/b")); !errors.Is(err, keys.ErrExists) {
		t.Fatalf("duplicate name: %v", err)
	}
	if _, err := e.svc.Add(ctx, root, "ghost", "work", tokA, repo("acme/a")); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("unknown owner: %v", err)
	}
}

func TestOtherUsersAccounts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.svc.Add(ctx, alice, "alice", "work", tokA, repo("acme/a")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Add(ctx, bob, "alice", "evil", tokB, repo("acme/b")); !errors.Is(err, keys.ErrForbidden) {
		t.Fatalf("bob adds to alice: %v", err)
	}
	if _, err := e.svc.List(ctx, bob, "alice"); !errors.Is(err, keys.ErrForbidden) {
		t.Fatalf("bob lists alice: %v", err)
	}
	if err := e.svc.Remove(ctx, bob, "alice", "work"); !errors.Is(err, keys.ErrForbidden) {
		t.Fatalf("bob removes alice's: %v", err)
	}
	if err := e.svc.SetDefault(ctx, bob, "alice", "work"); !errors.Is(err, keys.ErrForbidden) {
		t.Fatalf("bob sets alice's default: %v", err)
	}
	// A claimed admin role is not trusted: the store says bob is an operator.
	fakeAdmin := bob
	fakeAdmin.Role = keys.RoleAdmin
	if err := e.svc.Remove(ctx, fakeAdmin, "alice", "work"); !errors.Is(err, keys.ErrForbidden) {
		t.Fatalf("bob claiming admin: %v", err)
	}
	if rows := e.audit(t, "account.rm"); len(rows) != 2 || rows[0].Result != audit.ResultDenied {
		t.Fatalf("denied rm audit: %+v", rows)
	}
	if list, err := e.svc.List(ctx, root, "alice"); err != nil || len(list) != 1 {
		t.Fatalf("admin lists alice: %+v %v", list, err)
	}
	if list, _ := e.svc.List(ctx, bob, "bob"); len(list) != 0 {
		t.Fatalf("bob sees accounts: %+v", list)
	}
	if _, _, err := e.svc.ForRepo(ctx, "bob", repo("acme/a")); !errors.Is(err, accounts.ErrNoAccount) {
		t.Fatalf("bob's ForRepo used alice's account: %v", err)
	}
}

func TestForRepo(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.svc.Add(ctx, alice, "alice", "work", tokA, repo("acme/a")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Add(ctx, alice, "alice", "home", tokB, repo("acme/b")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		repo, want, token string
	}{
		{"acme/a", "work", tokA},
		{"acme/b", "home", tokB},      // default cannot, the other can
		{"acme/shared", "work", tokA}, // both can: the default wins
	} {
		a, tok, err := e.svc.ForRepo(ctx, "alice", repo(tc.repo))
		if err != nil || a.Name != tc.want || tok != tc.token {
			t.Fatalf("ForRepo(%s) = %s, %v; want %s", tc.repo, a.Name, err, tc.want)
		}
	}
	if err := e.svc.SetDefault(ctx, alice, "alice", "home"); err != nil {
		t.Fatal(err)
	}
	if a, _, _ := e.svc.ForRepo(ctx, "alice", repo("acme/shared")); a.Name != "home" {
		t.Fatalf("after default change, shared picks %s", a.Name)
	}
	_, _, err := e.svc.ForRepo(ctx, "alice", repo("acme/nobody"))
	if !errors.Is(err, accounts.ErrNoAccount) || !strings.Contains(err.Error(), "work: ") || !strings.Contains(err.Error(), "home: ") {
		t.Fatalf("unreachable: %v", err)
	}
	if strings.Contains(err.Error(), tokA) || strings.Contains(err.Error(), tokB) {
		t.Fatal("error shows a token")
	}
}

// TestTokenNeverSentToAnotherHost: accounts added for one host are neither
// used nor probed when the gateway is configured for another.
func TestTokenNeverSentToAnotherHost(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.svc.Add(ctx, alice, "alice", "work", tokA, repo("acme/a")); err != nil {
		t.Fatal(err)
	}
	other := gittest.New(t, gittest.Options{Token: tokA})
	other.CreateRepo("acme", "a", map[string]string{"f": "x"})
	svc2, err := accounts.New(e.db, e.sealr, nil, accounts.Config{Host: other.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc2.ForRepo(ctx, "alice", repo("acme/a")); !errors.Is(err, accounts.ErrNoAccount) {
		t.Fatalf("ForRepo on another host: %v", err)
	}
	if _, _, err := svc2.Token(ctx, "alice", "work"); err == nil {
		t.Fatal("Token handed out an account of another host")
	}
	if n := len(other.Requests()); n != 0 {
		t.Fatalf("the other host got %d requests", n)
	}
}

// TestRedirectNotFollowed: a host that redirects must not get the token
// forwarded to the redirect target.
func TestRedirectNotFollowed(t *testing.T) {
	var leaked bool
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked = true
		}
	}))
	defer target.Close()
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusFound)
	}))
	defer redir.Close()
	svc, err := accounts.New(nil, nil, nil, accounts.Config{Host: redir.URL})
	if err != nil {
		t.Fatal(err)
	}
	err = svc.Probe(context.Background(), repo("acme/a"), tokA)
	if err == nil || !strings.Contains(err.Error(), "redirected") {
		t.Fatalf("Probe: %v", err)
	}
	if leaked {
		t.Fatal("token followed the redirect")
	}
}

// TestNotAGitHost: a 200 that is not a ref advertisement is not a pass.
func TestNotAGitHost(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html>welcome</html>"))
	}))
	defer web.Close()
	svc, _ := accounts.New(nil, nil, nil, accounts.Config{Host: web.URL})
	if err := svc.Probe(context.Background(), repo("acme/a"), tokA); err == nil || !strings.Contains(err.Error(), "smart-HTTP") {
		t.Fatalf("Probe: %v", err)
	}
}

// TestSwappedCiphertextDoesNotOpen is the regression test for binding a
// sealed token to its row: a database writer copying bob's sealed token
// into alice's row gets nothing.
func TestSwappedCiphertextDoesNotOpen(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.svc.Add(ctx, alice, "alice", "work", tokA, repo("acme/a")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Add(ctx, bob, "bob", "work", tokB, repo("acme/b")); err != nil {
		t.Fatal(err)
	}
	e.db.Close()
	path := filepath.Join(e.dir, store.FileName)
	raw, err := sqlOpen(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`UPDATE github_accounts SET token = (SELECT token FROM github_accounts g JOIN users u ON u.id = g.user_id WHERE u.name = 'bob')
		WHERE user_id = (SELECT id FROM users WHERE name = 'alice')`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	svc, _ := accounts.New(db, e.sealr, nil, accounts.Config{Host: e.git.URL})
	if _, tok, err := svc.Token(ctx, "alice", "work"); !errors.Is(err, seal.ErrOpen) || tok != "" {
		t.Fatalf("swapped token opened: %q %v", tok, err)
	}
	if _, _, err := svc.ForRepo(ctx, "alice", repo("acme/b")); !errors.Is(err, accounts.ErrNoAccount) {
		t.Fatalf("ForRepo with swapped token: %v", err)
	}
}
