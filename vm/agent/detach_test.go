package agent_test

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"sbx.dev/sbx/vm/agent"
)

// Detach frees a reader blocked on a quiet process's output and leaves the
// process running.
func TestDetachLeavesProcessRunning(t *testing.T) {
	c, _ := newClient(t)
	p, err := c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := p.Stdout().Read(make([]byte, 10))
		read <- err
	}()
	time.Sleep(100 * time.Millisecond)
	p.Detach()
	select {
	case err := <-read:
		if err == nil {
			t.Error("read after Detach: no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read still blocked after Detach")
	}
	if _, err := p.Wait(); err == nil {
		t.Error("Wait after Detach: no error")
	}
	if err := unix.Kill(p.PID(), 0); err != nil {
		t.Fatalf("process after Detach: %v", err)
	}
	unix.Kill(p.PID(), unix.SIGKILL)
}
