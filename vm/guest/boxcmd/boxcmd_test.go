package boxcmd

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func files(t *testing.T) (out, exit string) {
	d := t.TempDir()
	return filepath.Join(d, "turns", "1.out"), filepath.Join(d, "turns", "1.exit")
}

func TestSuperviseCopiesToFileAndLive(t *testing.T) {
	out, exit := files(t)
	var live syncBuf
	code, err := supervise(&live, out, exit, "", "", []string{"sh", "-c", "echo one; echo two >&2; exit 3"})
	if err != nil || code != 3 {
		t.Fatalf("code %d err %v", code, err)
	}
	b, _ := os.ReadFile(out)
	if string(b) != live.String() || !strings.Contains(string(b), "one\n") || !strings.Contains(string(b), "two\n") {
		t.Errorf("file %q live %q", b, live.String())
	}
	if st, _ := os.ReadFile(exit); string(st) != "3\n" {
		t.Errorf("exit file %q", st)
	}
	if pid, _ := os.ReadFile(exit + ".pid"); len(pid) == 0 {
		t.Error("no pid file")
	}
}

func TestSuperviseSignal(t *testing.T) {
	out, exit := files(t)
	code, err := supervise(&syncBuf{}, out, exit, "", "", []string{"sh", "-c", "kill -9 $$"})
	if err != nil || code != ExitKilled {
		t.Fatalf("code %d err %v", code, err)
	}
	if st, _ := os.ReadFile(exit); !strings.HasPrefix(string(st), "signal ") {
		t.Errorf("exit file %q", st)
	}
}

// blockingWriter never returns: a live reader whose connection is gone.
type blockingWriter struct{ block chan struct{} }

func (b blockingWriter) Write(p []byte) (int, error) { <-b.block; return len(p), nil }

// Regression: a live reader that stops reading must not stall the agent or
// lose file output; the supervisor then says the live stream is incomplete.
func TestSuperviseStuckLiveReaderRegression(t *testing.T) {
	out, exit := files(t)
	bw := blockingWriter{make(chan struct{})}
	defer close(bw.block)
	done := make(chan struct{})
	var code int
	go func() {
		code, _ = supervise(bw, out, exit, "", "", []string{"sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); done"})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("supervisor stalled by a stuck live reader")
	}
	if code != ExitFollowError {
		t.Errorf("code %d, want %d (live stream incomplete)", code, ExitFollowError)
	}
	b, _ := os.ReadFile(out)
	if n := strings.Count(string(b), "\n"); n != 3000 {
		t.Errorf("file has %d lines", n)
	}
}

func TestFollowResumesAndEndsWithStatus(t *testing.T) {
	out, exit := files(t)
	os.MkdirAll(filepath.Dir(out), 0o700)
	os.WriteFile(out, []byte("first\nsecond\n"), 0o600)
	var got syncBuf
	res := make(chan int, 1)
	go func() {
		code, err := follow(&got, out, exit, 6, 5*time.Millisecond)
		if err != nil {
			t.Error(err)
		}
		res <- code
	}()
	time.Sleep(50 * time.Millisecond)
	f, _ := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("third\n")
	f.Close()
	writeExit(exit, "7")
	select {
	case code := <-res:
		if code != 7 {
			t.Errorf("code %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end")
	}
	if got.String() != "second\nthird\n" {
		t.Errorf("followed %q", got.String())
	}
}

// TestScriptAgentFollowUpScript: a follow-up to a finished script runs when
// it is a script itself, and is only noted when it is not.
func TestScriptAgentFollowUpScript(t *testing.T) {
	ws := t.TempDir()
	var out bytes.Buffer
	a := scriptAgent{out: &out, workspace: ws, state: filepath.Join(t.TempDir(), "state")}
	if code := a.turn("!write a.txt first", false); code != 0 {
		t.Fatalf("first turn: %d\n%s", code, out.String())
	}
	if code := a.turn("thanks", true); code != 0 || !strings.Contains(out.String(), "follow-up noted") {
		t.Fatalf("plain follow-up: %d\n%s", code, out.String())
	}
	if code := a.turn("!write a.txt second\n!say again", true); code != 0 || !strings.HasSuffix(out.String(), "again\n") {
		t.Fatalf("script follow-up: %d\n%s", code, out.String())
	}
	if b, err := os.ReadFile(filepath.Join(ws, "a.txt")); err != nil || string(b) != "first\nsecond\n" {
		t.Fatalf("a.txt: %q %v", b, err)
	}
}

// TestRunSurvivesSIGPIPERegression: `sbx box run` copied the turn to its
// stdout, a pipe to the box's agent; when the gateway was killed (kill -9,
// no detach) the agent closed the pipe and the next copy killed the
// supervisor with SIGPIPE (Go's rule for a broken stdout), and the agent
// with it: the turn stopped writing, no exit file ever came, and the
// gateway that came back followed a turn that would never end. Found by the
// fault suite (TestFaults, "gateway kill -9 mid-turn"). The real guest
// binary runs here, its stdout a pipe whose reader goes away.
func TestRunSurvivesSIGPIPERegression(t *testing.T) {
	bin := testutil.GuestBinary(t)
	out, exit := files(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "box", "run", "--out", out, "--exit", exit, "--",
		"sh", "-c", "i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo line $i; sleep 0.01; done")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// Read the first line, then go away like a killed gateway's connection.
	if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	r.Close()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("the supervisor died of %v when its reader went away", ws.Signal())
		}
	}
	status, rerr := os.ReadFile(exit)
	if rerr != nil || strings.TrimSpace(string(status)) != "0" {
		t.Fatalf("exit file: %q %v (run: %v)", status, rerr, err)
	}
	got, _ := os.ReadFile(out)
	if n := strings.Count(string(got), "line "); n != 40 || !strings.HasSuffix(string(got), "line 40\n") {
		t.Fatalf("the turn's file holds %d of 40 lines:\n%s", n, got)
	}
}
