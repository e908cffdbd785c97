package agent

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// TestRegressionHandshakeWriteIgnoresContext: a guest that never reads made
// the host's hello Write block past the caller's deadline (seen for more than
// two minutes under load, with a 90 s context).
func TestRegressionHandshakeWriteIgnoresContext(t *testing.T) {
	host, guest := net.Pipe() // unbuffered: a Write blocks until the peer reads
	defer guest.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Connect(ctx, host)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Connect = %v, want the context's deadline error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Connect ignored its context while its hello write was blocked")
	}
}
