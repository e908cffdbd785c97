package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"sbx.dev/sbx/fleet/runlog"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
)

// LogStream is a redacted view of a box's log from a byte offset. Chunks
// end at line ends, so Offset is always a place a client can resume from.
// Not safe for concurrent use (Close excepted).
type LogStream struct {
	red   *redact.Redactor
	rd    *runlog.Reader
	limit int64 // without follow: the end at open; -1 with follow
	raw   []byte
	buf   bytes.Buffer   // redacted output not yet returned (Read)
	w     *redact.Writer // one streaming redactor for the stream's life
	out   bytes.Buffer   // where w writes
	off   int64          // raw offset after what was returned
	eof   bool
}

// Chunk is a piece of redacted log text ending at a line end (or at the end
// of a finished log) and the raw offset to resume after it.
type Chunk struct {
	Text   redact.Safe
	Offset int64
}

func (f *Fleet) logs(ctx context.Context, caller keys.Actor, name string, from int64, follow bool) (*LogStream, error) {
	if from < 0 {
		return nil, fmt.Errorf("offset %d: want 0 or more: %w", from, ErrInvalid)
	}
	if _, err := f.resolve(ctx, caller, name); err != nil {
		return nil, f.safeErr(err)
	}
	l, err := f.openLog(name)
	if err != nil {
		return nil, f.safeErr(err)
	}
	// On a cluster the turns may run through another gateway: copy what
	// this gateway's log lacks from the box (and follow the turn).
	caught := f.mirror(name)
	if !follow {
		select {
		case <-caught:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	size := l.Size()
	if from > size {
		return nil, f.safeErr(fmt.Errorf("offset %d is past the end of the log (%d bytes): %w", from, size, ErrInvalid))
	}
	// A line is never redacted from its middle: a secret cut at the
	// offset would not be recognised. Start at the line's beginning.
	from = lineStart(l.Path(), from)
	rd, err := l.Subscribe(ctx, from)
	if err != nil {
		return nil, f.safeErr(err)
	}
	s := &LogStream{red: f.red, rd: rd, limit: -1, off: from}
	if !follow {
		s.limit = size
	}
	s.w = f.red.NewWriter(&s.out)
	return s, nil
}

// maxLineBack bounds the search for a line start; a longer line restarts
// at the bound (the redactor still sees 64 KiB before the offset).
const maxLineBack = 64 << 10

// lineStart returns the offset of the start of the line that holds off.
func lineStart(path string, off int64) int64 {
	if off <= 0 {
		return 0
	}
	f, err := os.Open(path)
	if err != nil {
		return off
	}
	defer f.Close()
	n := min(off, maxLineBack)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off-n); err != nil {
		return off
	}
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		return off - n + int64(i) + 1
	}
	return off - n
}

// Next returns the next chunk of whole lines; io.EOF at the end (without
// follow: the end at open; with follow: the box was destroyed, the gateway
// stops, or ctx ended).
func (s *LogStream) Next(ctx context.Context) (Chunk, error) {
	for {
		if i := bytes.LastIndexByte(s.raw, '\n'); i >= 0 {
			return s.emit(s.raw[:i+1]), nil
		}
		if s.eof {
			if len(s.raw) > 0 {
				return s.emit(s.raw), nil
			}
			return Chunk{}, io.EOF
		}
		if ctx.Err() != nil {
			return Chunk{}, ctx.Err()
		}
		buf := make([]byte, 32<<10)
		if s.limit >= 0 {
			left := s.limit - s.off - int64(len(s.raw))
			if left <= 0 {
				s.eof = true
				continue
			}
			if int64(len(buf)) > left {
				buf = buf[:left]
			}
		}
		n, err := s.rd.Read(buf)
		s.raw = append(s.raw, buf[:n]...)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) || errors.Is(err, context.Canceled) {
				s.eof = true
				continue
			}
			return Chunk{}, err
		}
	}
}

// emit redacts raw (whole lines, or the tail at the end) through the
// stream's one Writer, so a secret or key block spanning chunks is caught.
func (s *LogStream) emit(raw []byte) Chunk {
	s.out.Reset()
	_, _ = s.w.Write(raw)
	if s.eof && len(raw) == len(s.raw) {
		_ = s.w.Close()
	}
	s.off += int64(len(raw))
	s.raw = s.raw[len(raw):]
	// The Writer already redacted it; Bytes makes it a Safe and changes
	// nothing (redacting redacted text is the identity).
	return Chunk{Text: s.red.Bytes(s.out.Bytes()), Offset: s.off}
}

// Read reads redacted log bytes (for fronts that just copy the stream).
func (s *LogStream) Read(p []byte) (int, error) {
	for s.buf.Len() == 0 {
		c, err := s.Next(context.Background())
		if err != nil {
			return 0, err
		}
		s.buf.Write(c.Text.Bytes())
	}
	return s.buf.Read(p)
}

// Offset is the raw offset after what was returned so far.
func (s *LogStream) Offset() int64 { return s.off }

// Close ends the stream; a blocked Next or Read returns.
func (s *LogStream) Close() error { return s.rd.Close() }
