package agent_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/guest/agentd"
)

// A reader that stops reading holds the process back: the host buffers at
// most agent.OutLimit of its output, the process blocks on its pipe, and every
// byte arrives once reading resumes, slowly, before the exit status.
func TestExecStreamSlowReaderBackPressure(t *testing.T) {
	c, _ := newClient(t)
	const size = 8 << 20 // well past the yamux window and the host's buffer
	p, err := c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"head", "-c", "8388608", "/dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.ExecStream() == nil {
		t.Fatal("Exec did not use the one-stream exec")
	}
	p.Stdin().Close()
	waitFor(t, func() bool { return p.StdoutBuffered() >= agent.OutLimit/2 })
	time.Sleep(300 * time.Millisecond) // long enough for `head` to finish were nothing holding it
	if n := p.StdoutBuffered(); n > agent.OutLimit {
		t.Fatalf("host buffered %d bytes of output, limit %d", n, agent.OutLimit)
	}
	if err := unix.Kill(p.PID(), 0); err != nil {
		t.Fatalf("the process was not held back by the unread output: %v", err)
	}
	var n int64
	buf := make([]byte, 100<<10)
	for {
		m, err := p.Stdout().Read(buf)
		n += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n < 1<<20 {
			time.Sleep(time.Millisecond) // slow at first
		}
	}
	if n != size {
		t.Fatalf("read %d bytes, want %d", n, size)
	}
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("%+v %v", st, err)
	}
}

// Large input streams in while output streams out (cat), both through the
// one exec stream, without deadlock and without a byte lost.
func TestExecStreamStdinWhileOutputFlows(t *testing.T) {
	c, _ := newClient(t)
	data := make([]byte, 24<<20)
	rand.Read(data)
	p, err := c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"sh", "-c", "cat; echo done >&2"}})
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := io.Copy(p.Stdin(), bytes.NewReader(data)) // chunks larger than one frame
		if err == nil {
			err = p.Stdin().Close()
		}
		wrote <- err
	}()
	var errOut bytes.Buffer
	errDone := make(chan struct{})
	go func() { io.Copy(&errOut, p.Stderr()); close(errDone) }()
	h := sha256.New()
	n, err := io.Copy(h, p.Stdout())
	if err != nil || n != int64(len(data)) {
		t.Fatalf("read %d bytes, err %v; want %d", n, err, len(data))
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	<-errDone
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("output differs from input")
	}
	if errOut.String() != "done\n" {
		t.Fatalf("stderr %q", errOut.String())
	}
}

// Input the process does not read fills the stream's window and blocks the
// writer, but a signal still gets through (it has its own stream), and the
// blocked writer is let go once the process is gone.
func TestExecStreamSignalWhileStdinBlocked(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := p.Stdin().Write(make([]byte, 8<<20))
		wrote <- err
	}()
	select {
	case err := <-wrote:
		t.Fatalf("8 MiB written to a process that reads nothing (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := p.Signal(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil || st.Signal != "SIGTERM" {
		t.Fatalf("%+v %v", st, err)
	}
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("stdin writer still blocked after the process ended")
	}
}

// The exit status comes after all output: a caller that reads stdout to EOF
// and then waits sees every byte and the status.
func TestExecStreamExitAfterAllOutput(t *testing.T) {
	c, _ := newClient(t)
	for range 5 {
		p, err := c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"sh", "-c", "head -c 3000000 /dev/zero; echo err >&2; exit 7"}})
		if err != nil {
			t.Fatal(err)
		}
		p.Stdin().Close()
		errOut := make(chan []byte, 1)
		go func() { b, _ := io.ReadAll(p.Stderr()); errOut <- b }()
		n, err := io.Copy(io.Discard, p.Stdout())
		if err != nil || n != 3000000 {
			t.Fatalf("read %d, %v", n, err)
		}
		st, err := p.Wait()
		if err != nil || st.Code != 7 {
			t.Fatalf("%+v %v", st, err)
		}
		if b := <-errOut; string(b) != "err\n" {
			t.Fatalf("stderr %q", b)
		}
	}
}

// The process closes its stdout and runs on: the reader sees EOF before the
// exit.
func TestExecStreamStdoutEOFBeforeExit(t *testing.T) {
	c, _ := newClient(t)
	p, err := c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"sh", "-c", "echo hi; exec >&-; read x; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(p.Stdout())
	if err != nil || string(out) != "hi\n" {
		t.Fatalf("stdout %q %v", out, err)
	}
	select {
	case <-p.Exited():
		t.Fatal("exited before its input was closed")
	default:
	}
	io.WriteString(p.Stdin(), "go\n")
	if st, err := p.Wait(); err != nil || st.Code != 3 {
		t.Fatalf("%+v %v", st, err)
	}
}

// PTY mode on the one stream: size, resize, input, ^D on close, no stderr.
func TestExecStreamPTY(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sh", "-c", "stty size; read x; stty size; echo got $x; cat"}, TTY: true, Rows: 33, Cols: 101})
	if err != nil {
		t.Fatal(err)
	}
	if p.ExecStream() == nil {
		t.Fatal("Exec did not use the one-stream exec")
	}
	out := &testutil.SyncBuffer{}
	copied := make(chan struct{})
	go func() { io.Copy(out, p.Stdout()); close(copied) }()
	waitFor(t, func() bool { return strings.Contains(out.String(), "33 101") })
	if err := p.Resize(ctx, 44, 111); err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin(), "word\n")
	waitFor(t, func() bool { return strings.Contains(out.String(), "got word") })
	p.Stdin().Close() // ^D ends cat
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	<-copied
	if !strings.Contains(out.String(), "44 111") {
		t.Fatalf("output %q lacks the new size", out.String())
	}
	if b, err := io.ReadAll(p.Stderr()); err != nil || len(b) != 0 {
		t.Fatalf("stderr of a tty: %q %v", b, err)
	}
}

// An agent from before the one-stream exec answers "unknown op"; the client
// falls back to the four-stream exec, asks only once per connection, and
// everything exec does still works.
func TestExecFallbackToFourStreams(t *testing.T) {
	g := startGuest(t, agentd.ServerOptions{NoExecStream: true})
	c := g.connect(t)
	ctx := ctxT(t)
	out, errOut, st := run(t, c, agent.ExecRequest{Argv: []string{"sh", "-c", "cat; echo e >&2; exit 5"}}, "in")
	if out != "in" || errOut != "e\n" || st.Code != 5 {
		t.Fatalf("stdout %q stderr %q status %+v", out, errOut, st)
	}
	if !c.OldExec() {
		t.Fatal("the client did not remember the old agent")
	}
	p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sh", "-c", "stty size; read x; stty size"}, TTY: true, Rows: 20, Cols: 70})
	if err != nil {
		t.Fatal(err)
	}
	if p.ExecStream() != nil || p.ControlStream() == nil {
		t.Fatal("a second Exec on the old agent did not go straight to the four-stream exec")
	}
	tty := &testutil.SyncBuffer{}
	copied := make(chan struct{})
	go func() { io.Copy(tty, p.Stdout()); close(copied) }()
	waitFor(t, func() bool { return strings.Contains(tty.String(), "20 70") })
	if err := p.Resize(ctx, 21, 71); err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin(), "x\n")
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	<-copied
	if !strings.Contains(tty.String(), "21 71") {
		t.Fatalf("tty output %q", tty.String())
	}
	p, err = c.Exec(ctx, agent.ExecRequest{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(ctx, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(); err != nil || st.Signal != "SIGINT" {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"no-such-command-sbx"}}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing command: %v", err)
	}
	// A new connection to a new agent uses the one stream again.
	c2 := startGuest(t, agentd.ServerOptions{}).connect(t)
	p, err = c2.Exec(ctx, agent.ExecRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if p.ExecStream() == nil || c2.OldExec() {
		t.Fatal("a new agent got the four-stream exec")
	}
}

// Resize and signal name the exec they are for; one for an exec that is not
// running on this connection is refused, not applied elsewhere.
func TestExecStreamControlUnknownExec(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	_, err := c.Simple(ctx, agent.Request{Op: agent.OpSignal, Exe: 999999, Signal: int(syscall.SIGKILL)})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("signal to an unknown exec: %v", err)
	}
	p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if _, err := c.Simple(ctx, agent.Request{Op: agent.OpResize, Exe: p.ID(), Rows: 1, Cols: 1}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("resize of a finished exec: %v", err)
	}
}

// Detach returns at once even while a stdin write is blocked on a full
// window, and the process runs on.
func TestExecStreamDetachWithBlockedStdin(t *testing.T) {
	c, _ := newClient(t)
	p, err := c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Kill(p.PID(), unix.SIGKILL)
	go p.Stdin().Write(make([]byte, 8<<20))
	time.Sleep(200 * time.Millisecond)
	detached := make(chan struct{})
	go func() { p.Detach(); close(detached) }()
	select {
	case <-detached:
	case <-time.After(5 * time.Second):
		t.Fatal("Detach blocked behind the stdin write")
	}
	if _, err := p.Wait(); err == nil {
		t.Error("Wait after Detach: no error")
	}
	if err := unix.Kill(p.PID(), 0); err != nil {
		t.Fatalf("process after Detach: %v", err)
	}
}
