package agent

import (
	"bytes"
	"encoding/binary"
	"io"
	"strings"
	"sync"
	"testing"
)

// frame builds one typed frame.
func frame(kind byte, payload []byte) []byte {
	return PutFrameHead(append(make([]byte, FrameHead), payload...), kind)
}

// A hostile or broken guest's frames end the process's output with a clear
// error; none makes the host allocate past one frame of maxExecData or
// panic. (Frames are read by Process.readFrames; FuzzExecFrames explores.)
func TestExecFramesFromHostileGuest(t *testing.T) {
	huge := []byte{FrameStdout, 0xff, 0xff, 0xff, 0xff}
	exit0 := frame(FrameExit, []byte(`{"code":0}`))
	for _, tc := range []struct {
		name, err string
		in        []byte
	}{
		{"oversized frame", "exceeds", huge},
		{"one byte too big", "exceeds", binary.BigEndian.AppendUint32([]byte{FrameStderr}, MaxExecData+1)},
		{"unknown kind", "unknown kind", frame('z', nil)},
		{"data after its end", "stdout data after its end", append(frame(FrameStdoutEOF, nil), frame(FrameStdout, []byte("x"))...)},
		{"end with a payload", "end of output with 1 bytes", frame(FrameStderrEOF, []byte("x"))},
		{"exit not json", "exit status", frame(FrameExit, []byte("{"))},
		{"signal name with escapes", "signal name", frame(FrameExit, []byte(`{"code":-1,"signal":"\u001b[2J"}`))},
		{"signal name too long", "signal name", frame(FrameExit, []byte(`{"code":-1,"signal":"`+strings.Repeat("A", 33)+`"}`))},
		{"truncated header", "connection lost before exit", []byte{FrameStdout, 0}},
		{"truncated body", "connection lost before exit", []byte{FrameStdout, 0, 0, 0, 9, 'a'}},
		{"no exit", "connection lost before exit: EOF", frame(FrameStdout, []byte("hello"))},
		{"clean", "", append(frame(FrameStdout, []byte("hello")), exit0...)},
		{"frames after exit are not read", "", append(exit0, huge...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newStreamProcess(nil, 1, 42, nil, false)
			go io.Copy(io.Discard, p.Stdout())
			go io.Copy(io.Discard, p.Stderr())
			p.demux(bytes.NewReader(tc.in))
			_, err := p.Wait()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// FuzzExecFrames feeds arbitrary guest bytes to the host's frame reader: it
// must end (exit status or error) without panicking, and never buffer more
// than the limit.
func FuzzExecFrames(f *testing.F) {
	f.Add(append(frame(FrameStdout, []byte("out")), frame(FrameExit, []byte(`{"code":3}`))...))
	f.Add(append(append(frame(FrameStderr, []byte("e")), frame(FrameStderrEOF, nil)...), frame(FrameExit, []byte(`{"code":-1,"signal":"SIGKILL"}`))...))
	f.Add([]byte{FrameStdout, 0xff, 0xff, 0xff, 0xff})
	f.Add(frame(FrameStdoutEOF, []byte("x")))
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, tty := range []bool{false, true} {
			p := newStreamProcess(nil, 1, 42, nil, tty)
			p.out.limit, p.errOut.limit = 64, 64
			var wg sync.WaitGroup
			var got [2]int
			for i, r := range []*outPipe{p.out, p.errOut} {
				wg.Go(func() {
					buf := make([]byte, 7)
					for {
						if n := r.buffered(); n > r.limit {
							t.Errorf("buffered %d > limit %d", n, r.limit)
						}
						n, err := r.Read(buf)
						got[i] += n
						if err != nil {
							return
						}
					}
				})
			}
			p.demux(bytes.NewReader(in))
			p.Wait()
			wg.Wait() // both outputs ended: with the exit frame, or with the error
			if got[0]+got[1] > len(in) {
				t.Errorf("read %d bytes of output from %d bytes of frames", got[0]+got[1], len(in))
			}
		}
	})
}
