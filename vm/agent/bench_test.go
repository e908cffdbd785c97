package agent_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"sbx.dev/sbx/vm/agent"
)

// BenchmarkExecTrue is the exec round trip of `true` over a local socket
// pair (start, stdio, exit status); the guest adds its own costs. The
// sub-benchmarks compare the one-stream exec with the four-stream one that
// older agents speak; with -count they alternate, as A/B runs on a shared
// machine should.
func BenchmarkExecTrue(b *testing.B) {
	for _, v := range []struct {
		name string
		old  bool
	}{{"stream", false}, {"fourstreams", true}} {
		b.Run(v.name, func(b *testing.B) {
			c, _ := newClient(b)
			c.SetOldExec(v.old)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"true"}})
				if err != nil {
					b.Fatal(err)
				}
				p.Stdin().Close()
				io.Copy(io.Discard, p.Stdout())
				if st, err := p.Wait(); err != nil || st.Code != 0 {
					b.Fatal(st, err)
				}
			}
		})
	}
}

func BenchmarkPing(b *testing.B) {
	c, _ := newClient(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadFile reports MB/s of a streamed 32 MiB download.
func BenchmarkReadFile(b *testing.B) {
	c, root := newClient(b)
	const size = 32 << 20
	if err := os.WriteFile(filepath.Join(root, "big"), make([]byte, size), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		r, err := c.ReadFile(ctx, "big")
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, r); err != nil || n != size {
			b.Fatal(n, err)
		}
		r.Close()
	}
}

// BenchmarkWriteFile reports MB/s of an atomic 32 MiB upload.
func BenchmarkWriteFile(b *testing.B) {
	c, _ := newClient(b)
	const size = 32 << 20
	data := make([]byte, size)
	ctx := context.Background()
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		if err := c.WriteFile(ctx, "big", 0, &byteReader{b: data}); err != nil {
			b.Fatal(err)
		}
	}
}

type byteReader struct {
	b   []byte
	off int
}

func (r *byteReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}
