package fleet_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/gittest"
	"sbx.dev/sbx/fleet/seal"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/store"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/qemu"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveGuestBinary()
	os.Exit(code)
}

// clock is an injectable clock that tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is one gateway's core over real parts: SQLite, the QEMU backend
// booting the Debian agent image, a git server over smart HTTP.
type env struct {
	t      testing.TB
	data   string
	store  *store.SQLite
	vm     *vm.Manager
	fleet  *fleet.Fleet
	git    *gittest.Server
	token  string
	clock  *clock
	logs   *testutil.SyncBuffer
	cfg    fleet.Config
	alice  keys.Actor
	bob    keys.Actor
	admin  keys.Actor
	policy fleet.Policy
}

func authorizedKey(t testing.TB) string {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(ssh.MarshalAuthorizedKey(pk))
}

func randomToken() string {
	b := make([]byte, 18)
	rand.Read(b)
	return "ghp_" + hex.EncodeToString(b)[:36]
}

func newEnv(t testing.TB, policy fleet.Policy) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, data: testutil.DataDirWithImages(t, ".."), clock: &clock{t: time.Now()}, logs: &testutil.SyncBuffer{}, policy: policy}
	logger := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var err error
	e.store, err = store.Open(ctx, filepath.Join(e.data, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	al := audit.New(e.store, logger, e.clock.Now)
	ks := keys.NewService(e.store, al, e.clock.Now)
	cli := keys.Actor{User: "test", Role: keys.RoleAdmin, Front: keys.FrontCLI}
	for _, u := range []struct {
		name string
		role keys.Role
	}{{"root", keys.RoleAdmin}, {"alice", keys.RoleOperator}, {"bob", keys.RoleOperator}} {
		if _, _, err := ks.AddUser(ctx, cli, u.name, u.role, authorizedKey(t)); err != nil {
			t.Fatal(err)
		}
	}
	e.alice = keys.Actor{User: "alice", Role: keys.RoleOperator, Front: "test"}
	e.bob = keys.Actor{User: "bob", Role: keys.RoleOperator, Front: "test"}
	e.admin = keys.Actor{User: "root", Role: keys.RoleAdmin, Front: "test"}

	e.token = randomToken()
	e.git = gittest.New(t, gittest.Options{Token: e.token})
	e.git.CreateRepo("acme", "widget", map[string]string{"README.md": "widget\n"})
	sealer, err := seal.Load(e.data, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	acc, err := accounts.New(e.store, sealer, al, accounts.Config{Host: e.git.URL, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(ctx, func(context.Context) ([]string, error) { return []string{e.token}, nil }, redact.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be, err := qemu.New(ctx, qemu.Config{DataDir: e.data, Init: testutil.GuestBinary(t), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	e.vm, err = vm.New(ctx, vm.Config{Backend: be, MaxBoxes: 6, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if policy.Spec.Image == "" {
		policy.Spec.Image = "agent"
	}
	if policy.Spec.MemoryMiB == 0 {
		policy.Spec.MemoryMiB = 512
	}
	policy.TickEvery = time.Hour // tests call Tick
	e.cfg = fleet.Config{Store: e.store, VM: e.vm, Accounts: acc, Audit: al, Redactor: red, DataDir: e.data,
		Policy: policy, Now: e.clock.Now, Logger: logger}
	e.start()
	t.Cleanup(func() {
		if e.fleet != nil {
			e.fleet.Close()
		}
		for _, b := range e.vm.List() {
			e.vm.Destroy(context.Background(), b.Name)
		}
		e.vm.Close()
		if t.Failed() {
			t.Logf("gateway log:\n%s", e.logs.String())
		}
	})
	if _, err := e.fleet.AddAccount(ctx, e.alice, "work", e.token, "acme/widget"); err != nil {
		t.Fatal(err)
	}
	return e
}

// start (re)starts the core over the same store and machines.
func (e *env) start() {
	f, err := fleet.New(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.fleet = f
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

// waitState waits until the box is in one of states.
func (e *env) waitState(name string, states ...fleet.State) fleet.Box {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var b fleet.Box
	var err error
	for time.Now().Before(deadline) {
		b, err = e.fleet.Get(context.Background(), e.alice, name)
		if err == nil {
			for _, s := range states {
				if b.State == s {
					return b
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("box %s: want state %v, have %s (%v); log:\n%s", name, states, b.State, err, e.log(name))
	return b
}

// log reads a box's whole log as alice sees it.
func (e *env) log(name string) string {
	s, err := e.fleet.Logs(context.Background(), e.alice, name, 0, false)
	if err != nil {
		return fmt.Sprintf("(logs: %v)", err)
	}
	defer s.Close()
	b, err := io.ReadAll(s)
	if err != nil && !errors.Is(err, io.EOF) {
		return string(b) + fmt.Sprintf("(read: %v)", err)
	}
	return string(b)
}

// waitLog waits until the box's log contains want.
func (e *env) waitLog(name, want string) string {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var l string
	for time.Now().Before(deadline) {
		if l = e.log(name); strings.Contains(l, want) {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("box %s: log never said %q:\n%s", name, want, l)
	return l
}
