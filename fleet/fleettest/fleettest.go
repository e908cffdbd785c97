// Package fleettest builds a real fleet for tests, wired as gateway/core.go
// wires it: SQLite in a data dir that borrows the cached kernel and agent
// image, QEMU machines booting the real guest binary, real keys, audit,
// sealed accounts and MCP servers, a redactor, and a git server over smart
// HTTP holding acme/widget. The core's own tests and the fronts' tests
// (SSH, web, MCP) all start from it.
package fleettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/fleet/gittest"
	"sbx.dev/sbx/fleet/seal"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/store"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/qemu"
)

// Options are what one test's fleet differs in; the zero value is the usual
// fleet.
type Options struct {
	// Policy is the core's policy. The image defaults to "agent" with
	// 512 MiB; TickEvery is always an hour: tests call Tick.
	Policy fleet.Policy
	// MaxBoxes caps the machines running at once (0: 4).
	MaxBoxes int
	// Users are added with fresh keys (nil: root the admin, alice and bob
	// operators).
	Users []User
	// Now is the clock of audit, keys, accounts and the core (nil: the
	// wall clock).
	Now func() time.Time
	// NoAccount leaves alice without her GitHub account "work" for
	// acme/widget.
	NoAccount bool
	// NoMachines runs the core on NoMachines (no QEMU, no image): for
	// what needs no box. Env.VM is nil.
	NoMachines bool
	// Configure, when set, adjusts the core's Config before it starts.
	Configure func(*fleet.Config)
}

// User is one user the fleet starts with.
type User struct {
	Name string
	Role keys.Role
}

// Env is the fleet and the parts it was built from.
type Env struct {
	t testing.TB
	// Fleet is the running core; Start replaces it.
	Fleet *fleet.Fleet
	// Config is what Start builds the core from: a test may change it
	// between a Close and a Start.
	Config fleet.Config
	Data   string
	Store  *store.SQLite
	VM     *vm.Manager
	Keys   *keys.Service
	Audit  *audit.Log
	Sealer *seal.Sealer
	// Git serves acme/widget to Token.
	Git *gittest.Server
	// Token is alice's GitHub token; the redactor knows it.
	Token  string
	Logs   *testutil.SyncBuffer
	Logger *slog.Logger
	// KeyFiles are the users' OpenSSH private key files, Signers their
	// keys, Actors the users as the front "test".
	KeyFiles map[string]string
	Signers  map[string]gossh.Signer
	Actors   map[string]keys.Actor
}

// New builds and starts the fleet; cleanups stop it and destroy every
// machine, and print the gateway's log when the test failed.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	ctx := context.Background()
	_, here, _, _ := runtime.Caller(0)
	data := ""
	if o.NoMachines {
		data = t.TempDir()
	} else {
		data = testutil.DataDirWithImages(t, filepath.Join(filepath.Dir(here), "..", ".."))
	}
	e := &Env{t: t, Data: data,
		Logs: &testutil.SyncBuffer{}, KeyFiles: map[string]string{}, Signers: map[string]gossh.Signer{}, Actors: map[string]keys.Actor{}}
	e.Logger = slog.New(slog.NewTextHandler(e.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log (tail):\n%s", Tail(e.Logs.String(), 16000))
		}
	})
	var err error
	if e.Store, err = store.Open(ctx, filepath.Join(e.Data, store.FileName)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Store.Close() })
	e.Audit = audit.New(e.Store, e.Logger, o.Now)
	e.Keys = keys.NewService(e.Store, e.Audit, o.Now)
	cli := keys.Actor{User: "test", Role: keys.RoleAdmin, Front: keys.FrontCLI}
	users := o.Users
	if users == nil {
		users = []User{{"root", keys.RoleAdmin}, {"alice", keys.RoleOperator}, {"bob", keys.RoleOperator}}
	}
	for _, u := range users {
		file, signer := testutil.OpenSSHKey(t)
		if _, _, err := e.Keys.AddUser(ctx, cli, u.Name, u.Role, string(gossh.MarshalAuthorizedKey(signer.PublicKey()))); err != nil {
			t.Fatal(err)
		}
		e.KeyFiles[u.Name], e.Signers[u.Name] = file, signer
		e.Actors[u.Name] = keys.Actor{User: u.Name, Role: u.Role, Front: "test"}
	}

	e.Token = randomToken()
	// The API answers for the token as GitHub does for a classic one.
	e.Git = gittest.New(t, gittest.Options{Token: e.Token, Identities: map[string]gittest.Identity{
		e.Token: {Login: "alice-gh", Scopes: []string{"repo", "workflow"}, Expires: time.Now().Add(30 * 24 * time.Hour)},
	}})
	e.Git.CreateRepo("acme", "widget", map[string]string{"README.md": "widget\n"})
	if e.Sealer, err = seal.Load(e.Data, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	acc, err := accounts.New(e.Store, e.Sealer, e.Audit, accounts.Config{Host: e.Git.URL, Now: o.Now})
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(ctx, func(context.Context) ([]string, error) { return []string{e.Token}, nil }, redact.Options{Logger: e.Logger})
	if err != nil {
		t.Fatal(err)
	}
	var machines fleet.Machines = NoMachines{}
	if !o.NoMachines {
		be, err := qemu.New(ctx, qemu.Config{DataDir: e.Data, Init: testutil.GuestBinary(t), Logger: e.Logger})
		if err != nil {
			t.Fatal(err)
		}
		if o.MaxBoxes == 0 {
			o.MaxBoxes = 4
		}
		if e.VM, err = vm.New(ctx, vm.Config{Backend: be, MaxBoxes: o.MaxBoxes, Logger: e.Logger}); err != nil {
			t.Fatal(err)
		}
		machines = e.VM
	}
	t.Cleanup(func() {
		if e.Fleet != nil {
			e.Fleet.Close()
		}
		if e.VM == nil {
			return
		}
		for _, b := range e.VM.List() {
			_ = e.VM.Destroy(context.Background(), b.Name)
		}
		e.VM.Close()
	})
	p := o.Policy
	if p.Spec.Image == "" {
		p.Spec.Image = "agent"
	}
	if p.Spec.MemoryMiB == 0 {
		p.Spec.MemoryMiB = 512
	}
	p.TickEvery = time.Hour
	// The git server's API is GitHub's (Enterprise path): the pull request
	// commands reach it as a gateway with git.kind github reaches its host.
	base, err := url.Parse(e.Git.URL)
	if err != nil {
		t.Fatal(err)
	}
	gh, err := forge.NewGitHub(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Config = fleet.Config{Store: e.Store, VM: machines, Accounts: acc, Audit: e.Audit, Redactor: red, DataDir: e.Data,
		MCP: e.Store, Notify: e.Store, Presets: e.Store, Mirrors: e.Store, Profiles: e.Store, Sealer: e.Sealer, Forge: gh, Policy: p, Now: o.Now, Logger: e.Logger}
	if o.Configure != nil {
		o.Configure(&e.Config)
	}
	e.Start()
	if !o.NoAccount {
		alice := keys.Actor{User: "alice", Role: keys.RoleOperator, Front: "test"}
		if _, err := e.Fleet.AddAccount(ctx, alice, "work", e.Token, "acme/widget"); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// Start (re)starts the core from Config over the same store and machines.
func (e *Env) Start() {
	e.t.Helper()
	f, err := fleet.New(context.Background(), e.Config)
	if err != nil {
		e.t.Fatal(err)
	}
	e.Fleet = f
}

// WaitState waits up to two minutes until caller sees the box in one of
// states.
func (e *Env) WaitState(caller keys.Actor, name string, states ...fleet.State) fleet.Box {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var b fleet.Box
	var err error
	for time.Now().Before(deadline) {
		b, err = e.Fleet.Get(context.Background(), caller, name)
		if err == nil {
			for _, s := range states {
				if b.State == s {
					return b
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("box %s: want state %v, have %s (%v) %s; log:\n%s", name, states, b.State, err, b.Reason, e.Log(caller, name))
	return b
}

// Log reads a box's whole log as caller sees it.
func (e *Env) Log(caller keys.Actor, name string) string {
	s, err := e.Fleet.Logs(context.Background(), caller, name, 0, false)
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

// WaitLog waits up to two minutes until caller sees want in the box's log.
func (e *Env) WaitLog(caller keys.Actor, name, want string) string {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var l string
	for time.Now().Before(deadline) {
		if l = e.Log(caller, name); strings.Contains(l, want) {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("box %s: log never said %q:\n%s", name, want, l)
	return l
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func randomToken() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return "ghp_" + hex.EncodeToString(b)[:36]
}
