package keys_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/store"
)

type env struct {
	svc   *keys.Service
	store *store.SQLite
	audit *audit.Log
	clock *testutil.Clock
	log   *testutil.SyncBuffer
	dir   string
}

// newEnv is a Service over a real SQLite store in a temp dir.
func newEnv(t testing.TB) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := testutil.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	buf := &testutil.SyncBuffer{}
	log := audit.New(st, slog.New(slog.NewJSONHandler(buf, nil)), c.Now)
	return &env{svc: keys.NewService(st, log, c.Now), store: st, audit: log, clock: c, log: buf, dir: dir}
}

// newKey returns an authorized_keys line and its signer.
func newKey(t *testing.T, comment string) (string, ssh.Signer) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return authLine(s.PublicKey(), comment), s
}

var (
	cli = keys.Actor{User: "root", Role: keys.RoleAdmin, Front: keys.FrontCLI}
	ctx = context.Background()
)

func actor(user string) keys.Actor {
	return keys.Actor{User: user, Front: "ssh", Addr: "192.0.2.1"}
}

func mustAdd(t *testing.T, e *env, name string, role keys.Role, n int) []keys.Key {
	t.Helper()
	var lines []string
	for range n {
		l, _ := newKey(t, name)
		lines = append(lines, l)
	}
	_, ks, err := e.svc.AddUser(ctx, cli, name, role, strings.Join(lines, "\n"))
	if err != nil {
		t.Fatalf("add %s: %v", name, err)
	}
	return ks
}

func TestLastAdminRules(t *testing.T) {
	e := newEnv(t)
	alice := mustAdd(t, e, "alice", keys.RoleAdmin, 2)
	mustAdd(t, e, "bob", keys.RoleOperator, 1)
	steps := []struct {
		name string
		do   func() error
		want error
	}{
		{"remove the last admin", func() error { return e.svc.RemoveUser(ctx, cli, "alice") }, keys.ErrLastAdmin},
		{"last admin removes herself", func() error { return e.svc.RemoveUser(ctx, actor("alice"), "alice") }, keys.ErrLastAdmin},
		{"disable the last admin", func() error { return e.svc.SetDisabled(ctx, cli, "alice", true) }, keys.ErrLastAdmin},
		{"remove one of two keys", func() error { return e.svc.RemoveKey(ctx, actor("alice"), "alice", alice[0].Fingerprint) }, nil},
		{"remove the last admin's last key", func() error { return e.svc.RemoveKey(ctx, actor("alice"), "alice", alice[1].Fingerprint) }, keys.ErrLastAdmin},
		{"operators may be disabled", func() error { return e.svc.SetDisabled(ctx, cli, "bob", true) }, nil},
		{"and enabled", func() error { return e.svc.SetDisabled(ctx, cli, "bob", false) }, nil},
		{"add a second admin", func() error { _, _, err := e.svc.AddUser(ctx, cli, "carol", keys.RoleAdmin, mustLine(t)); return err }, nil},
		{"now alice may be disabled", func() error { return e.svc.SetDisabled(ctx, actor("carol"), "alice", true) }, nil},
		{"a disabled admin's last key may go", func() error { return e.svc.RemoveKey(ctx, actor("carol"), "alice", alice[1].Fingerprint) }, nil},
		{"carol is now the last enabled admin", func() error { return e.svc.RemoveUser(ctx, actor("carol"), "carol") }, keys.ErrLastAdmin},
		{"disabling carol refused", func() error { return e.svc.SetDisabled(ctx, cli, "carol", true) }, keys.ErrLastAdmin},
		{"re-enable alice", func() error { return e.svc.SetDisabled(ctx, cli, "alice", false) }, nil},
		{"then carol may remove herself", func() error { return e.svc.RemoveUser(ctx, actor("carol"), "carol") }, nil},
		{"remove unknown user", func() error { return e.svc.RemoveUser(ctx, cli, "nobody") }, keys.ErrNotFound},
		{"remove unknown key", func() error { return e.svc.RemoveKey(ctx, cli, "bob", "SHA256:nope") }, keys.ErrNotFound},
	}
	for _, s := range steps {
		err := s.do()
		if s.want == nil && err != nil || s.want != nil && !errors.Is(err, s.want) {
			t.Fatalf("%s: got %v, want %v", s.name, err, s.want)
		}
	}
	users, _ := e.svc.Users(ctx)
	var names []string
	for _, u := range users {
		names = append(names, u.Name)
	}
	if got := strings.Join(names, ","); got != "alice,bob" {
		t.Errorf("users %s, want alice,bob", got)
	}
}

func mustLine(t *testing.T) string {
	l, _ := newKey(t, "")
	return l
}

func TestAuthorization(t *testing.T) {
	e := newEnv(t)
	alice := mustAdd(t, e, "alice", keys.RoleAdmin, 1)
	bob := mustAdd(t, e, "bob", keys.RoleOperator, 2)
	mustAdd(t, e, "dave", keys.RoleOperator, 1)
	tests := []struct {
		name string
		do   func() error
		want error
	}{
		{"operator adds a user", func() error {
			_, _, err := e.svc.AddUser(ctx, actor("bob"), "eve", keys.RoleAdmin, mustLine(t))
			return err
		}, keys.ErrForbidden},
		{"operator claiming admin role is looked up", func() error {
			a := actor("bob")
			a.Role = keys.RoleAdmin
			_, _, err := e.svc.AddUser(ctx, a, "eve", keys.RoleAdmin, mustLine(t))
			return err
		}, keys.ErrForbidden},
		{"operator removes a user", func() error { return e.svc.RemoveUser(ctx, actor("bob"), "dave") }, keys.ErrForbidden},
		{"operator disables a user", func() error { return e.svc.SetDisabled(ctx, actor("bob"), "alice", true) }, keys.ErrForbidden},
		{"operator adds keys to another", func() error { _, err := e.svc.AddKeys(ctx, actor("bob"), "alice", mustLine(t)); return err }, keys.ErrForbidden},
		{"operator removes another's key", func() error { return e.svc.RemoveKey(ctx, actor("bob"), "alice", alice[0].Fingerprint) }, keys.ErrForbidden},
		{"operator creates another's api key", func() error {
			_, _, err := e.svc.CreateAPIKey(ctx, actor("bob"), "alice", "x", nil, 0)
			return err
		}, keys.ErrForbidden},
		{"operator adds own key", func() error { _, err := e.svc.AddKeys(ctx, actor("bob"), "bob", mustLine(t)); return err }, nil},
		{"operator removes own key", func() error { return e.svc.RemoveKey(ctx, actor("bob"), "bob", bob[0].Fingerprint) }, nil},
		{"operator creates own api key", func() error {
			_, _, err := e.svc.CreateAPIKey(ctx, actor("bob"), "bob", "laptop", []string{"read"}, 0)
			return err
		}, nil},
		{"admin manages another's keys", func() error { return e.svc.RemoveKey(ctx, actor("alice"), "bob", bob[1].Fingerprint) }, nil},
		{"unknown actor", func() error { _, err := e.svc.AddKeys(ctx, actor("ghost"), "ghost", mustLine(t)); return err }, keys.ErrForbidden},
		{"anonymous actor", func() error { _, err := e.svc.AddKeys(ctx, actor(""), "", mustLine(t)); return err }, keys.ErrForbidden},
		{"admin disables dave", func() error { return e.svc.SetDisabled(ctx, actor("alice"), "dave", true) }, nil},
		{"disabled actor acts on self", func() error { _, err := e.svc.AddKeys(ctx, actor("dave"), "dave", mustLine(t)); return err }, keys.ErrDisabled},
	}
	for _, tt := range tests {
		err := tt.do()
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := e.svc.User(ctx, "eve"); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("eve exists after refused adds: %v", err)
	}
	// Every refusal left a denied audit row.
	rows, err := e.audit.List(ctx, audit.Filter{User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	denied := 0
	for _, r := range rows {
		if r.Result == audit.ResultDenied {
			denied++
		}
	}
	if denied != 7 {
		t.Errorf("%d denied rows for bob, want 7: %+v", denied, rows)
	}
}

func TestDuplicatesAndBadInputWriteNothing(t *testing.T) {
	e := newEnv(t)
	line, _ := newKey(t, "a")
	if _, _, err := e.svc.AddUser(ctx, cli, "alice", keys.RoleAdmin, line); err != nil {
		t.Fatal(err)
	}
	other := mustLine(t)
	tests := []struct {
		name, user string
		role       keys.Role
		keys       string
		want       error
		msg        string
	}{
		{"duplicate user", "alice", keys.RoleOperator, other, keys.ErrExists, `user "alice": already exists`},
		{"key of another user", "bob", keys.RoleOperator, other + "\n" + line, keys.ErrExists, "is already registered"},
		{"bad name", "Bob", keys.RoleOperator, other, keys.ErrInvalid, `user name "Bob"`},
		{"name too long", strings.Repeat("a", 33), keys.RoleOperator, other, keys.ErrInvalid, "user name"},
		{"name with slash", "a/b", keys.RoleOperator, other, keys.ErrInvalid, "user name"},
		{"bad role", "bob", keys.Role("root"), other, keys.ErrInvalid, `role "root"`},
		{"no key", "bob", keys.RoleOperator, "\n# none\n", keys.ErrInvalid, "no public key given"},
		{"malformed key", "bob", keys.RoleOperator, other + "\nssh-ed25519 AAAAgarbage", keys.ErrInvalid, "line 2:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := e.svc.AddUser(ctx, cli, tt.user, tt.role, tt.keys)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want %v containing %q", err, tt.want, tt.msg)
			}
		})
	}
	users, _ := e.svc.Users(ctx)
	if len(users) != 1 {
		t.Errorf("%d users, want only alice", len(users))
	}
	// The key of the refused user was not stored either.
	pk, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(other))
	if _, err := e.svc.UserByPublicKey(ctx, pk); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("key of a refused user resolves: %v", err)
	}
	// Same for AddKeys: a duplicate in the batch keeps the others out too.
	fresh := mustLine(t)
	if _, err := e.svc.AddKeys(ctx, cli, "alice", fresh+"\n"+line); !errors.Is(err, keys.ErrExists) {
		t.Fatalf("AddKeys with an existing key: %v", err)
	}
	if ks, _ := e.svc.Keys(ctx, cli, "alice"); len(ks) != 1 {
		t.Errorf("alice has %d keys after a refused batch, want 1", len(ks))
	}
}

func TestUserByPublicKey(t *testing.T) {
	e := newEnv(t)
	mustAdd(t, e, "alice", keys.RoleAdmin, 1)
	line, signer := newKey(t, "bob")
	if _, _, err := e.svc.AddUser(ctx, cli, "bob", keys.RoleOperator, line); err != nil {
		t.Fatal(err)
	}
	u, err := e.svc.UserByPublicKey(ctx, signer.PublicKey())
	if err != nil || u.Name != "bob" || u.Role != keys.RoleOperator {
		t.Fatalf("got %+v, %v", u, err)
	}
	_, stranger := newKey(t, "")
	if _, err := e.svc.UserByPublicKey(ctx, stranger.PublicKey()); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("unknown key: %v", err)
	}
	if err := e.svc.SetDisabled(ctx, cli, "bob", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.UserByPublicKey(ctx, signer.PublicKey()); !errors.Is(err, keys.ErrDisabled) {
		t.Errorf("disabled user: %v", err)
	}
	if err := e.svc.RemoveUser(ctx, cli, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.UserByPublicKey(ctx, signer.PublicKey()); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("removed user's key: %v", err)
	}
}

var tokenRE = regexp.MustCompile(`^sbx_[0-9A-Za-z]{8}_[0-9A-Za-z]{32,}$`)

func TestAPIKeyLifecycle(t *testing.T) {
	e := newEnv(t)
	mustAdd(t, e, "alice", keys.RoleAdmin, 1)
	mustAdd(t, e, "bob", keys.RoleOperator, 1)
	token, k, err := e.svc.CreateAPIKey(ctx, actor("bob"), "bob", "claude desktop", []string{"tokens", "read"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !tokenRE.MatchString(token) || !strings.Contains(token, k.ID) {
		t.Fatalf("token %q (id %s) has the wrong shape", token, k.ID)
	}
	if !k.Expires.Equal(e.clock.Now().Add(time.Hour)) {
		t.Errorf("expires %v", k.Expires)
	}

	// Use.
	u, got, err := e.svc.UserByAPIKey(ctx, token)
	if err != nil || u.Name != "bob" || got.ID != k.ID || strings.Join(got.Scopes, " ") != "read tokens" {
		t.Fatalf("UserByAPIKey: %+v %+v %v", u, got, err)
	}
	list, _ := e.svc.APIKeys(ctx, actor("bob"), "bob")
	if len(list) != 1 || !list[0].LastUsed.Equal(e.clock.Now()) {
		t.Fatalf("last_used not recorded: %+v", list)
	}
	// A use within the minute is not written again.
	e.clock.Add(30 * time.Second)
	e.svc.UserByAPIKey(ctx, token)
	list, _ = e.svc.APIKeys(ctx, actor("bob"), "bob")
	if !list[0].LastUsed.Equal(e.clock.Now().Add(-30 * time.Second)) {
		t.Errorf("last_used rewritten within a minute: %v", list[0].LastUsed)
	}

	// The secret is nowhere in the database files.
	secret := token[len("sbx_")+9:]
	for _, f := range []string{"sbx.db", "sbx.db-wal"} {
		b, _ := os.ReadFile(filepath.Join(e.dir, f))
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("token secret stored in %s", f)
		}
	}

	// Wrong secret, malformed tokens.
	bad := []string{
		token[:len(token)-1] + flip(token[len(token)-1]),
		"sbx_" + k.ID + "_short",
		"",
		"Bearer " + token,
		strings.Replace(token, "sbx_", "sbX_", 1),
		"sbx_AAAAAAAA_" + strings.Repeat("a", 40),
	}
	for _, b := range bad {
		if _, _, err := e.svc.UserByAPIKey(ctx, b); !errors.Is(err, keys.ErrBadToken) {
			t.Errorf("token %q: got %v, want ErrBadToken", b, err)
		}
	}

	// Disabled owner.
	e.svc.SetDisabled(ctx, cli, "bob", true)
	if _, _, err := e.svc.UserByAPIKey(ctx, token); !errors.Is(err, keys.ErrDisabled) {
		t.Errorf("disabled owner: %v", err)
	}
	e.svc.SetDisabled(ctx, cli, "bob", false)

	// Expiry through the injected clock.
	e.clock.Add(time.Hour)
	if _, _, err := e.svc.UserByAPIKey(ctx, token); !errors.Is(err, keys.ErrBadToken) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired: %v", err)
	}

	// Revocation.
	token2, k2, err := e.svc.CreateAPIKey(ctx, actor("alice"), "bob", "ci", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.UserByAPIKey(ctx, token2); err != nil {
		t.Fatalf("fresh key without ttl: %v", err)
	}
	if err := e.svc.RevokeAPIKey(ctx, actor("alice"), "alice", k2.ID); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("revoke under the wrong user: %v", err)
	}
	if err := e.svc.RevokeAPIKey(ctx, actor("bob"), "bob", k2.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.UserByAPIKey(ctx, token2); !errors.Is(err, keys.ErrBadToken) || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("revoked: %v", err)
	}
	list, _ = e.svc.APIKeys(ctx, actor("bob"), "bob")
	if len(list) != 2 || list[1].Revoked.IsZero() || list[0].Expires.IsZero() {
		t.Errorf("list after revoke: %+v", list)
	}

	// Bad names and scopes.
	for _, c := range []struct {
		name   string
		scopes []string
	}{{"", nil}, {strings.Repeat("x", 65), nil}, {"a\nb", nil}, {"ok", []string{"Bad Scope"}}, {"ok", []string{""}}} {
		if _, _, err := e.svc.CreateAPIKey(ctx, cli, "bob", c.name, c.scopes, 0); !errors.Is(err, keys.ErrInvalid) {
			t.Errorf("CreateAPIKey(%q, %q): %v, want ErrInvalid", c.name, c.scopes, err)
		}
	}

	// Removing the user removes the keys.
	e.svc.RemoveUser(ctx, cli, "bob")
	if _, _, err := e.svc.UserByAPIKey(ctx, token2); !errors.Is(err, keys.ErrBadToken) {
		t.Errorf("key of a removed user: %v", err)
	}
}

func flip(c byte) string {
	if c == 'a' {
		return "b"
	}
	return "a"
}

func TestParseToken(t *testing.T) {
	tests := []struct {
		token, id string
	}{
		{"sbx_abcDEF12_" + strings.Repeat("x", 32), "abcDEF12"},
		{"sbx_abcDEF12_" + strings.Repeat("x", 31), ""},
		{"sbx_abcDEF1_" + strings.Repeat("x", 40), ""},
		{"sbx_abcDEF123_" + strings.Repeat("x", 40), ""},
		{"sbx_abcDEF1!_" + strings.Repeat("x", 40), ""},
		{"sbx_abcDEF12_" + strings.Repeat("x", 39) + "-", ""},
		{"sbx_abcDEF12_" + strings.Repeat("x", 200), ""},
		{"xbs_abcDEF12_" + strings.Repeat("x", 40), ""},
		{"sbx_abcDEF12" + strings.Repeat("x", 40), ""},
		{"", ""},
	}
	for _, tt := range tests {
		id, err := keys.ParseToken(tt.token)
		if id != tt.id || (err == nil) != (tt.id != "") {
			t.Errorf("ParseToken(%q) = %q, %v; want %q", tt.token, id, err, tt.id)
		}
		if err != nil && (!errors.Is(err, keys.ErrBadToken) || strings.Contains(err.Error(), tt.token[min(4, len(tt.token)):])) && tt.token != "" && len(tt.token) > 4 {
			t.Errorf("ParseToken(%q) error %q echoes the token or is not ErrBadToken", tt.token, err)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add("sbx_abcDEF12_" + strings.Repeat("x", 32))
	f.Add("sbx__")
	f.Add("sbx_abcDEF12_")
	f.Fuzz(func(t *testing.T, token string) {
		id, err := keys.ParseToken(token)
		if err != nil {
			if !errors.Is(err, keys.ErrBadToken) || id != "" {
				t.Fatalf("ParseToken(%q) = %q, %v", token, id, err)
			}
			return
		}
		if !tokenRE.MatchString(token) || len(token) > 128 || token[4:12] != id {
			t.Fatalf("accepted %q with id %q", token, id)
		}
	})
}

func TestAuditRowsAndLogLines(t *testing.T) {
	e := newEnv(t)
	mustAdd(t, e, "alice", keys.RoleAdmin, 1)
	e.clock.Add(time.Minute)
	since := e.clock.Now()
	line := mustLine(t)
	if _, _, err := e.svc.AddUser(ctx, keys.Actor{User: "alice", Front: "http", Addr: "198.51.100.4"}, "bob", keys.RoleOperator, line); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Minute)
	e.svc.RemoveUser(ctx, actor("alice"), "alice") // denied: last admin
	rows, err := e.audit.List(ctx, audit.Filter{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows since %v, want 2: %+v", len(rows), since, rows)
	}
	if r := rows[0]; r.Action != "user.rm" || r.Result != audit.ResultDenied || r.Actor != "alice" || r.Target != "alice" ||
		!strings.Contains(r.Detail, "no enabled admin") {
		t.Errorf("newest row %+v", r)
	}
	if r := rows[1]; r.Action != "user.add" || r.Result != audit.ResultOK || r.Front != "http" || r.Addr != "198.51.100.4" ||
		r.Target != "bob" || !strings.Contains(r.Detail, "role=operator") || !r.Time.Equal(since) {
		t.Errorf("older row %+v", r)
	}
	if all, _ := e.audit.List(ctx, audit.Filter{}); len(all) != 3 {
		t.Errorf("%d rows in all, want 3", len(all))
	}
	if one, _ := e.audit.List(ctx, audit.Filter{Limit: 1}); len(one) != 1 || one[0].Action != "user.rm" {
		t.Errorf("limit 1: %+v", one)
	}
	if root, _ := e.audit.List(ctx, audit.Filter{User: "root"}); len(root) != 1 || root[0].Target != "alice" {
		t.Errorf("filter by user: %+v", root)
	}
	logs := e.log.String()
	for _, want := range []string{`"msg":"[audit]"`, `"action":"user.add"`, `"addr":"198.51.100.4"`, `"result":"denied"`, `"front":"http"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
}

func BenchmarkUserByPublicKey(b *testing.B) {
	e := newEnv(b)
	_, signer := newKeyB(b)
	if _, _, err := e.svc.AddUser(ctx, cli, "alice", keys.RoleAdmin, authLine(signer.PublicKey(), "")); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := e.svc.UserByPublicKey(ctx, signer.PublicKey()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUserByAPIKey(b *testing.B) {
	e := newEnv(b)
	_, signer := newKeyB(b)
	e.svc.AddUser(ctx, cli, "alice", keys.RoleAdmin, authLine(signer.PublicKey(), ""))
	token, _, err := e.svc.CreateAPIKey(ctx, cli, "alice", "bench", nil, 0)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := e.svc.UserByAPIKey(ctx, token); err != nil {
			b.Fatal(err)
		}
	}
}

func newKeyB(b *testing.B) (string, ssh.Signer) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		b.Fatal(err)
	}
	return authLine(s.PublicKey(), ""), s
}

// TestKeyRemovalAuditNamesWholeFingerprint: the key.rm row quotes the whole
// SHA256 fingerprint (it used to be cut at 40 of 50 characters, so the row
// did not say which key went), while odd input stays shortened.
func TestKeyRemovalAuditNamesWholeFingerprint(t *testing.T) {
	e := newEnv(t)
	ks := mustAdd(t, e, "alice", keys.RoleAdmin, 2)
	if err := e.svc.RemoveKey(ctx, actor("alice"), "alice", ks[0].Fingerprint); err != nil {
		t.Fatal(err)
	}
	junk := "SHA256:" + strings.Repeat("x", 200)
	if err := e.svc.RemoveKey(ctx, actor("alice"), "alice", junk); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("remove unknown key: %v", err)
	}
	rows, err := e.audit.List(ctx, audit.Filter{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	var details []string
	for _, r := range rows {
		if r.Action == "key.rm" {
			details = append(details, r.Detail)
		}
	}
	if len(details) != 2 {
		t.Fatalf("key.rm rows %q, want 2", details)
	}
	if !strings.HasPrefix(details[0], "key="+junk[:40]+"... ") {
		t.Errorf("unknown key's row %q: want the input shortened", details[0])
	}
	if want := "key=" + ks[0].Fingerprint; details[1] != want {
		t.Errorf("removed key's row %q, want %q", details[1], want)
	}
}

// TestRegressionKeyListAuthorizedInCore: who may list whose SSH keys is the
// keys service's rule (it was checked only in the SSH front, so another
// front listing keys would have had to copy it): users their own, admins
// anyone's, nobody once disabled.
func TestRegressionKeyListAuthorizedInCore(t *testing.T) {
	e := newEnv(t)
	mustAdd(t, e, "alice", keys.RoleAdmin, 1)
	mustAdd(t, e, "bob", keys.RoleOperator, 2)
	mustAdd(t, e, "carol", keys.RoleOperator, 1)
	if err := e.svc.SetDisabled(ctx, cli, "carol", true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		actor   keys.Actor
		user    string
		want    int
		wantErr error
	}{
		{actor("bob"), "bob", 2, nil},
		{actor("alice"), "bob", 2, nil},
		{cli, "bob", 2, nil},
		{actor("bob"), "alice", 0, keys.ErrForbidden},
		{actor("carol"), "carol", 0, keys.ErrDisabled},
		{actor("mallory"), "bob", 0, keys.ErrForbidden},
		{keys.Actor{Front: "ssh"}, "bob", 0, keys.ErrForbidden},
	} {
		ks, err := e.svc.Keys(ctx, tc.actor, tc.user)
		if !errors.Is(err, tc.wantErr) || len(ks) != tc.want {
			t.Errorf("%s lists %s's keys: %d, %v; want %d, %v", tc.actor.User, tc.user, len(ks), err, tc.want, tc.wantErr)
		}
	}
}
