package agentd

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// With no host connected the port reads EOF at once; Serve must wait
// between attempts, not spin.
func TestServeWaitsWhenNoHost(t *testing.T) {
	var opens atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	Serve(ctx, PortOpenerFunc(func(context.Context) (io.ReadWriteCloser, error) {
		opens.Add(1)
		return eofConn{}, nil
	}), ServerOptions{Root: t.TempDir()})
	if n := opens.Load(); n > 40 || n < 2 {
		t.Fatalf("%d opens in 300ms; want a few (one per %v)", n, redialDelay)
	}
}

type eofConn struct{}

func (eofConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (eofConn) Write(p []byte) (int, error) { return len(p), nil }
func (eofConn) Close() error                { return nil }
