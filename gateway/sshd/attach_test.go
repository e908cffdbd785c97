package sshd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	gossh "golang.org/x/crypto/ssh"
)

// term is the real OpenSSH client running on a local PTY, as a person
// would run `ssh -t … attach BOX`.
type term struct {
	t    *testing.T
	cmd  *exec.Cmd
	ptmx *os.File
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func startTerm(t *testing.T, cmd *exec.Cmd, rows, cols uint16) *term {
	t.Helper()
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	tm := &term{t: t, cmd: cmd, ptmx: ptmx, done: make(chan struct{})}
	go func() {
		defer close(tm.done)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		ptmx.Close()
	})
	return tm
}

func (tm *term) send(s string) {
	tm.t.Helper()
	if _, err := tm.ptmx.WriteString(s); err != nil {
		tm.t.Fatal(err)
	}
}

// expect waits until the output (from mark on) matches re and returns the
// mark after the match.
func (tm *term) expect(mark int, re string) int {
	tm.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(time.Minute)
	for {
		tm.mu.Lock()
		s := tm.out.String()
		tm.mu.Unlock()
		if loc := rx.FindStringIndex(s[min(mark, len(s)):]); loc != nil {
			return mark + loc[1]
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("no %q in the terminal after %d:\n%q", re, mark, s[min(mark, len(s)):])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (tm *term) wait() int {
	tm.t.Helper()
	err := tm.cmd.Wait()
	<-tm.done
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		tm.t.Fatal(err)
	}
	return 0
}

// TestAttach: a real shell on a raw PTY through the real OpenSSH client:
// stty size before and after a resize, Ctrl-C interrupting sleep 100, the
// shell's exit status, waking a sleeping box.
func TestAttach(t *testing.T) {
	g := newGateway(t)
	name := g.newBox("alice", "!say attach")
	g.must("alice", "sleep", name)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tm := startTerm(t, g.sshCmd(ctx, "alice", []string{"-tt"}, "attach", name), 24, 80)
	m := tm.expect(0, "Waking box "+name)
	tm.send("PS1='$ '; stty size\r")
	m = tm.expect(m, `[\r\n]24 80\r?\n`)
	if err := pty.Setsize(tm.ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the window change travels with no reply
	tm.send("stty size\r")
	m = tm.expect(m, `[\r\n]40 120\r?\n`)
	tm.send("sleep 100\r")
	time.Sleep(time.Second)
	start := time.Now()
	tm.send("\x03")
	tm.send("echo rc=$?\r")
	m = tm.expect(m, `rc=130`)
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("Ctrl-C took %v to end sleep 100", d)
	}
	tm.send("exit 3\r")
	if code := tm.wait(); code != 3 {
		t.Fatalf("attach exit status %d, want 3", code)
	}
	_ = m

	// One command; its status is the session's.
	if r := g.run("alice", "", "-tt", "attach", name, "--", "sh", "-c", "'exit 5'"); r.code != 5 {
		t.Fatalf("attach -- sh -c 'exit 5': %+v", r)
	}
	t.Run("RegressionRawNewlines", func(t *testing.T) { testRawNewlines(t, g, name) })
	t.Run("ExecSignal", func(t *testing.T) { testExecSignal(t, g, name) })
}

// testRawNewlines: the library's emulated PTY rewrites "\n" to "\r\n" on
// everything a session writes; attach must pass the box's PTY output byte
// for byte.
func testRawNewlines(t *testing.T, g *gateway, name string) {
	c := g.dialX(t, "alice")
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := sess.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Output("attach " + name + " -- sh -c 'stty -onlcr; printf \"a\\nb\\n\"'")
	if err != nil {
		t.Fatalf("attach: %v %q", err, out)
	}
	if string(out) != "a\nb\n" {
		t.Fatalf("attach output %q, want %q", out, "a\nb\n")
	}
}

// testExecSignal: a signal request reaches the process (OpenSSH's client
// has no way to send one; x/crypto's does).
func testExecSignal(t *testing.T, g *gateway, name string) {
	c := g.dialX(t, "alice")
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	stdout, err := sess.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Start("exec " + name + " -- sh -c 'echo started; exec sleep 100'"); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "started\n" {
		t.Fatalf("read %q: %v", line, err)
	}
	if err := sess.Signal(gossh.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exit *gossh.ExitError
	if err := sess.Wait(); !errors.As(err, &exit) || exit.ExitStatus() != 128+15 {
		t.Fatalf("after SIGTERM: %v, want exit 143", err)
	}
	// Without a process the request is refused, as before.
	s2, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if ok, err := s2.SendRequest("signal", true, gossh.Marshal(struct{ Signal string }{"INT"})); ok || err != nil {
		t.Fatalf("signal without a process: accepted %v (%v)", ok, err)
	}
}

// dialX connects as user with x/crypto's client.
func (g *gateway) dialX(t *testing.T, user string) *gossh.Client {
	t.Helper()
	b, err := os.ReadFile(g.keys[user])
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gossh.Dial("tcp", g.addr, &gossh.ClientConfig{User: user, Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}) // the fixture's host
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
