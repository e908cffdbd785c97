package mcp

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/gittest"
	"sbx.dev/sbx/fleet/seal"
	"sbx.dev/sbx/gateway/throttle"
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

// fleetFront is the MCP front over the real core: SQLite, QEMU boxes from
// the agent image, a git server over smart HTTP holding acme/widget, and
// alice's GitHub account for it.
type fleetFront struct {
	*front
	fleet  *fleet.Fleet
	secret string // the git token: known to the redactor
	logs   *testutil.SyncBuffer
}

func newFleetFront(t testing.TB, o Options) *fleetFront {
	t.Helper()
	ctx := context.Background()
	data := testutil.DataDirWithImages(t, "../..")
	logs := &testutil.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st, err := store.Open(ctx, filepath.Join(data, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := &clock{t: time.Now()}
	al := audit.New(st, logger, clk.Now)
	ks := keys.NewService(st, al, clk.Now)
	admin := keys.Actor{User: "root", Role: keys.RoleAdmin, Front: keys.FrontCLI}
	for _, u := range []struct {
		name string
		role keys.Role
	}{{"root", keys.RoleAdmin}, {"alice", keys.RoleOperator}, {"bob", keys.RoleOperator}} {
		if _, _, err := ks.AddUser(ctx, admin, u.name, u.role, testKey(t)); err != nil {
			t.Fatal(err)
		}
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	secret := "ghp_" + hex.EncodeToString(b)[:36]
	git := gittest.New(t, gittest.Options{Token: secret})
	git.CreateRepo("acme", "widget", map[string]string{"README.md": "widget\n"})
	sealer, err := seal.Load(data, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	acc, err := accounts.New(st, sealer, al, accounts.Config{Host: git.URL, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(ctx, func(context.Context) ([]string, error) { return []string{secret}, nil }, redact.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be, err := qemu.New(ctx, qemu.Config{DataDir: data, Init: testutil.GuestBinary(t), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	vms, err := vm.New(ctx, vm.Config{Backend: be, MaxBoxes: 4, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	fl, err := fleet.New(ctx, fleet.Config{Store: st, VM: vms, Accounts: acc, Audit: al, Redactor: red, DataDir: data,
		Policy: fleet.Policy{Spec: vm.Spec{Image: "agent", MemoryMiB: 512}, TickEvery: time.Hour}, Now: clk.Now, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fl.Close()
		for _, b := range vms.List() {
			_ = vms.Destroy(context.Background(), b.Name)
		}
		vms.Close()
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	alice := keys.Actor{User: "alice", Role: keys.RoleOperator, Front: "test"}
	if _, err := fl.AddAccount(ctx, alice, "work", secret, "acme/widget"); err != nil {
		t.Fatal(err)
	}
	o.Fleet, o.Identity, o.Audit, o.Now = fl, ks, al, clk.Now
	if o.Logger == nil {
		o.Logger = logger
	}
	if o.Throttle == nil {
		o.Throttle = throttle.NewAuth(20, 10*time.Minute, clk.Now)
	}
	f := &front{keys: ks, audit: al, clock: clk, admin: admin}
	f.url = serve(t, New(o))
	return &fleetFront{front: f, fleet: fl, secret: secret, logs: logs}
}

func testKey(t testing.TB) string {
	t.Helper()
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
