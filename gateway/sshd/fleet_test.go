package sshd

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/fleet/gittest"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveGuestBinary()
	os.Exit(code)
}

// gateway is the SSH front over the real core (fleettest): SQLite, QEMU
// boxes from the agent image, a git server over smart HTTP; users alice
// and bob (operators) and root (admin), each with an OpenSSH key file.
type gateway struct {
	t      testing.TB
	h      *fleettest.Env
	addr   string
	port   string
	fleet  *fleet.Fleet
	vms    *vm.Manager
	token  string
	git    *gittest.Server
	keys   map[string]string // user → private key file
	actors map[string]keys.Actor
	logs   *testutil.SyncBuffer
	audit  *audit.Log
}

func newGateway(t testing.TB) *gateway {
	t.Helper()
	return newGatewayWith(t, nil)
}

// newGatewayWith is newGateway with a hook that adjusts the front's options.
func newGatewayWith(t testing.TB, adjust func(*Options)) *gateway {
	t.Helper()
	return newGatewayFrom(t, fleettest.Options{NoAccount: true}, adjust)
}

// newGatewayFrom is the SSH front over a core built with fo, its options
// adjusted by adjust (nil: as they are).
func newGatewayFrom(t testing.TB, fo fleettest.Options, adjust func(*Options)) *gateway {
	t.Helper()
	for _, tool := range []string{"ssh", "scp", "sftp"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs the OpenSSH client (%s)", tool)
		}
	}
	h := fleettest.New(t, fo)
	g := &gateway{t: t, h: h, fleet: h.Fleet, vms: h.VM, token: h.Token, git: h.Git, keys: h.KeyFiles, actors: h.Actors,
		logs: h.Logs, audit: h.Audit}
	o := Options{
		HostKey: newSigner(t), Identity: h.Keys, Audit: h.Audit, Fleet: h.Fleet, Logger: h.Logger,
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
	})
	return g
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
	return g.h.WaitState(g.actors[user], name, want...)
}
