package vmtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"testing"
	"time"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

// echoServer listens on 127.0.0.1:port in the box and echoes one
// connection to its end: busybox nc in the small image, node in the agent
// image.
const echoServer = `command -v busybox >/dev/null && exec busybox nc -l -p 8000 -e cat
exec node -e "require('net').createServer(c => c.pipe(c)).listen(8000, '127.0.0.1')"`

// dialLoopback: Manager.Dial reaches a port on the box's loopback over the
// agent connection, both ways with the half-close; nothing listening is
// fs.ErrNotExist; an address off the box's loopback is refused.
func dialLoopback(ctx context.Context, t *testing.T, m *vm.Manager, box string) {
	p, err := m.Exec(ctx, box, agent.ExecRequest{Argv: []string{"sh", "-c", echoServer}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Signal(context.WithoutCancel(ctx), 9)
	d := agent.DialRequest{Host: "127.0.0.1", Port: 8000}
	var c *agent.Conn
	deadline := time.Now().Add(time.Minute)
	for {
		c, err = m.Dial(ctx, box, d)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || time.Now().After(deadline) {
			t.Fatalf("dial %s in the box: %v", d.Addr(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer c.Close()
	payload := bytes.Repeat([]byte("sbx-dial "), 100000) // 900 KB
	go func() {
		c.Write(payload)
		c.CloseWrite()
	}()
	c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("echo through the box: %d bytes back of %d, %v", len(got), len(payload), err)
	}
	if _, err := m.Dial(ctx, box, agent.DialRequest{Host: "127.0.0.1", Port: 8001}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dial to a port nothing listens on: %v, want fs.ErrNotExist", err)
	}
	for _, bad := range []agent.DialRequest{{Host: "10.0.2.100", Port: 80}, {Host: "127.0.0.1", Port: 0}, {Host: "localhost", Port: 8000}} {
		if _, err := m.Dial(ctx, box, bad); !errors.Is(err, agent.ErrDialAddr) {
			t.Errorf("dial %+v: %v, want refused", bad, err)
		}
	}
}
