package sshd

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

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

// gateway is the SSH front over the real core: SQLite, QEMU boxes from the
// agent image, a git server over smart HTTP; users alice and bob
// (operators) and root (admin), each with an OpenSSH key file.
type gateway struct {
	t      testing.TB
	addr   string
	port   string
	fleet  *fleet.Fleet
	vms    *vm.Manager
	token  string
	git    *gittest.Server
	keys   map[string]string // user → private key file
	actors map[string]keys.Actor
	logs   *testutil.SyncBuffer
	dir    string
	audit  *audit.Log
}

func newGateway(t testing.TB) *gateway {
	t.Helper()
	return newGatewayWith(t, nil)
}

// newGatewayWith is newGateway with a hook that adjusts the front's options.
func newGatewayWith(t testing.TB, adjust func(*Options)) *gateway {
	t.Helper()
	for _, tool := range []string{"ssh", "scp", "sftp"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs the OpenSSH client (%s)", tool)
		}
	}
	ctx := context.Background()
	data := testutil.DataDirWithImages(t, "../..")
	g := &gateway{t: t, keys: map[string]string{}, actors: map[string]keys.Actor{}, logs: &testutil.SyncBuffer{}, dir: t.TempDir()}
	logger := slog.New(slog.NewTextHandler(g.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st, err := store.Open(ctx, filepath.Join(data, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	al := audit.New(st, logger, nil)
	ks := keys.NewService(st, al, nil)
	cli := keys.Actor{User: "test", Role: keys.RoleAdmin, Front: keys.FrontCLI}
	for _, u := range []struct {
		name string
		role keys.Role
	}{{"root", keys.RoleAdmin}, {"alice", keys.RoleOperator}, {"bob", keys.RoleOperator}} {
		signer, file := g.keyFile(u.name)
		if _, _, err := ks.AddUser(ctx, cli, u.name, u.role, authorized(signer)); err != nil {
			t.Fatal(err)
		}
		g.keys[u.name] = file
		g.actors[u.name] = keys.Actor{User: u.name, Role: u.role, Front: "test"}
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	g.token = "ghp_" + hex.EncodeToString(b)[:36]
	g.git = gittest.New(t, gittest.Options{Token: g.token})
	g.git.CreateRepo("acme", "widget", map[string]string{"README.md": "widget\n"})
	sealer, err := seal.Load(data, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	acc, err := accounts.New(st, sealer, al, accounts.Config{Host: g.git.URL})
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(ctx, func(context.Context) ([]string, error) { return []string{g.token}, nil }, redact.Options{})
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
		Policy: fleet.Policy{Spec: vm.Spec{Image: "agent", MemoryMiB: 512}, TickEvery: time.Hour}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	g.fleet, g.vms, g.audit = fl, vms, al
	o := Options{
		HostKey: newSigner(t), Identity: ks, Audit: al, Fleet: fl, Logger: logger,
		Throttle: throttle.NewAuth(1000, time.Minute, nil), IdleTimeout: time.Minute,
	}
	if adjust != nil {
		adjust(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	g.addr = ln.Addr().String()
	_, g.port, _ = net.SplitHostPort(g.addr)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		fl.Close()
		for _, b := range vms.List() {
			_ = vms.Destroy(context.Background(), b.Name)
		}
		vms.Close()
		if t.Failed() {
			t.Logf("gateway log (tail):\n%s", tail(g.logs.String(), 8000))
		}
	})
	return g
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// keyFile makes a key pair and writes the private half as an OpenSSH key
// file for the real client.
func (g *gateway) keyFile(name string) (gossh.Signer, string) {
	g.t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		g.t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		g.t.Fatal(err)
	}
	file := filepath.Join(g.dir, name+".key")
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		g.t.Fatal(err)
	}
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		g.t.Fatal(err)
	}
	return signer, file
}

// sshOpts are the OpenSSH client options for user.
func (g *gateway) sshOpts(user string) []string {
	return []string{"-i", g.keys[user], "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"}
}

// sshCmd runs the real OpenSSH client as user with client options opts
// and the remote command.
func (g *gateway) sshCmd(ctx context.Context, user string, opts []string, remote ...string) *exec.Cmd {
	a := append(append(g.sshOpts(user), "-p", g.port), opts...)
	a = append(a, "127.0.0.1")
	return exec.CommandContext(ctx, "ssh", append(a, remote...)...)
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs a remote command as user with stdin; a first argument "-tt"
// is the client's (force a PTY).
func (g *gateway) run(user, stdin string, remote ...string) result {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var opts []string
	if len(remote) > 0 && remote[0] == "-tt" {
		opts, remote = remote[:1], remote[1:]
	}
	cmd := g.sshCmd(ctx, user, opts, remote...)
	var o, e bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &o, &e
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		g.t.Fatalf("ssh %v: %v", remote, err)
	}
	return result{o.String(), e.String(), code}
}

// must runs a remote command that must succeed.
func (g *gateway) must(user string, remote ...string) string {
	g.t.Helper()
	r := g.run(user, "", remote...)
	if r.code != 0 {
		g.t.Fatalf("%s: ssh %s: exit %d\nstdout: %s\nstderr: %s", user, strings.Join(remote, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// newBox delegates a quick script task as user and waits until its turn
// is over.
func (g *gateway) newBox(user, task string) string {
	g.t.Helper()
	// One shell word, newlines and all: the server splits like a shell.
	name := strings.TrimSpace(g.must(user, "new", "--agent", "script", `"`+task+`"`))
	if name == "" {
		g.t.Fatal("new printed no box name")
	}
	g.waitState(user, name, fleet.Done, fleet.Waiting)
	return name
}

func (g *gateway) waitState(user, name string, want ...fleet.State) fleet.Box {
	g.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := g.fleet.Get(context.Background(), g.actors[user], name)
		if err != nil {
			g.t.Fatalf("box %s: %v", name, err)
		}
		for _, s := range want {
			if b.State == s {
				return b
			}
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("box %s stayed %s (want %v): %s", name, b.State, want, b.Reason.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
