package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"sbx.dev/sbx/fleet/runlog"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/vm/agent"
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

// logs keeps this gateway's copy of every box's log: one file per box
// (runlog) that the turns' followers write and readers stream from, and on
// a cluster how far the copy goes (logPos) and the mirror that brings it up
// to date from the box when the turns run through another gateway.
type logs struct {
	dir     string // <DataDir>/logs
	red     *redact.Redactor
	vm      Machines
	records *records
	runs    *runs
	leases  *leases
	bg      *background
	log     *slog.Logger

	mu    sync.Mutex
	boxes map[string]*boxLog
}

// boxLog is one box's log as this gateway holds it.
type boxLog struct {
	log *runlog.Log
	// On a cluster: how far this gateway's copy of the log goes, and
	// whether a mirror is bringing it up to date.
	pos       *logPos
	mirroring chan struct{} // closed when the mirror has the finished turns
}

// boxLocked returns a box's entry, creating it. l.mu held.
func (l *logs) boxLocked(name string) *boxLog {
	b := l.boxes[name]
	if b == nil {
		b = &boxLog{}
		l.boxes[name] = b
	}
	return b
}

// path is the box's log file (runlog's naming).
func (l *logs) path(name string) string { return filepath.Join(l.dir, name+".log") }

func (l *logs) posPath(name string) string { return filepath.Join(l.dir, name+".pos") }

// open returns the box's open log.
func (l *logs) open(name string) (*runlog.Log, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.boxLocked(name)
	if b.log != nil {
		return b.log, nil
	}
	l.dropUnrecorded(b, name)
	lg, err := runlog.Open(l.dir, name)
	if err != nil {
		return nil, err
	}
	b.log = lg
	return lg, nil
}

// dropUnrecorded cuts the box's log back to the size its position last
// recorded, before the log is opened for appending: what lies past it was
// written by a gateway killed before it recorded how far the box's output
// it came from, and the follower writes it again from the recorded raw
// offset, once. Without this a kill -9 mid-turn logged up to a second of
// output twice (found by the fault suite, "gateway kill -9 mid-turn").
// l.mu held.
func (l *logs) dropUnrecorded(b *boxLog, name string) {
	p := l.posLocked(b, name)
	fi, err := os.Stat(l.path(name))
	if err != nil || p.Size <= 0 || fi.Size() <= p.Size {
		return
	}
	if err := os.Truncate(l.path(name), p.Size); err != nil {
		l.log.Warn("log: cut back to its recorded position", "box", name, "err", err)
		return
	}
	l.log.Info("log: dropped output written after its last recorded position; it is followed again",
		"box", name, "bytes", fi.Size()-p.Size, "turn", p.Turn, "raw", p.Raw)
}

// append writes text that comes from no turn's output (an interruption, a
// wake, a repository added) and records the log's new size.
func (l *logs) append(name, text string) error {
	lg, err := l.open(name)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := lg.Write([]byte(text)); err != nil {
		return err
	}
	p := l.posLocked(l.boxLocked(name), name)
	p.Size = lg.Size()
	l.savePos(name, p)
	return nil
}

// reading reports whether this gateway has the box's log open.
func (l *logs) reading(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.boxes[name]
	return b != nil && b.log != nil
}

// size is the box's log size in bytes (0 without one).
func (l *logs) size(name string) int64 {
	if fi, err := os.Stat(l.path(name)); err == nil {
		return fi.Size()
	}
	return 0
}

// remove closes a box's log (its followers get io.EOF) and deletes it.
func (l *logs) remove(name string) {
	l.mu.Lock()
	var lg *runlog.Log
	if b := l.boxes[name]; b != nil {
		lg = b.log
	}
	delete(l.boxes, name)
	l.mu.Unlock()
	if lg != nil {
		lg.Close()
	}
	removeFile(l.path(name))
	removeFile(l.posPath(name))
}

// closeAll closes every open log (the core stops).
func (l *logs) closeAll() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, b := range l.boxes {
		if b.log != nil {
			errs = append(errs, b.log.Close())
		}
	}
	return errors.Join(errs...)
}

// stream opens a redacted stream of the box's log from offset from (see
// Fleet.Logs); the caller has resolved the box.
func (l *logs) stream(ctx context.Context, name string, from int64, follow bool) (*LogStream, error) {
	lg, err := l.open(name)
	if err != nil {
		return nil, l.red.Error(err)
	}
	// On a cluster the turns may run through another gateway: copy what
	// this gateway's log lacks from the box (and follow the turn).
	caught := l.mirror(name)
	if !follow {
		select {
		case <-caught:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	size := lg.Size()
	if from > size {
		return nil, l.red.Error(fmt.Errorf("offset %d is past the end of the log (%d bytes): %w", from, size, ErrInvalid))
	}
	// A line is never redacted from its middle: a secret cut at the
	// offset would not be recognised. Start at the line's beginning.
	from = lineStart(lg.Path(), from)
	rd, err := lg.Subscribe(ctx, from)
	if err != nil {
		return nil, l.red.Error(err)
	}
	s := &LogStream{red: l.red, rd: rd, limit: -1, off: from}
	if !follow {
		s.limit = size
	}
	s.w = l.red.NewWriter(&s.out)
	return s, nil
}

// logPos is how far this gateway's copy of a box's log goes, in the raw
// output of the box's turns: the turn, the raw offset in its output file,
// and whether its end line is written. On a cluster every gateway keeps
// its own copy; whoever writes to it (the turn's follower, or a mirror of
// another gateway's) writes only past this, so nothing is logged twice.
type logPos struct {
	Turn  int   `json:"turn"`
	Raw   int64 `json:"raw"`
	Ended bool  `json:"ended"`
	// Size is the log's size once the write this position describes was
	// made: a log found longer was written past it by a gateway that died
	// before saving it (see dropUnrecorded).
	Size int64 `json:"size,omitempty"`
}

// posLocked returns the box's log position, loading it once. l.mu held.
func (l *logs) posLocked(b *boxLog, name string) *logPos {
	if b.pos == nil {
		b.pos = &logPos{}
		if raw, err := os.ReadFile(l.posPath(name)); err == nil {
			_ = json.Unmarshal(raw, b.pos)
		}
	}
	return b.pos
}

// savePos records p with every write to the log, before the store records
// the raw offset the follower resumes from, so that offset is never past
// the recorded position (the follower re-reads, at skips what the log has).
func (l *logs) savePos(name string, p *logPos) {
	b, _ := json.Marshal(p)
	tmp := l.posPath(name) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err == nil {
		_ = os.Rename(tmp, l.posPath(name))
	}
}

// Kinds of log writes at a position.
const (
	logHeader = iota // a turn's first line
	logLine          // text for the raw output up to end
	logEnd           // the turn's end line
)

// at writes text to this gateway's copy of the box's log if it is past
// what the copy holds (see logPos): a follower resumed from an older
// offset (after a restart, or on a cluster a mirror of another gateway's
// turn) writes each line once.
func (l *logs) at(name string, turn int, kind int, end int64, text string) error {
	lg, err := l.open(name)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.posLocked(l.boxLocked(name), name)
	var out string
	switch {
	case turn < p.Turn || turn == p.Turn && p.Ended:
		return nil
	case turn > p.Turn:
		if kind == logHeader {
			out = text
		} else {
			out = fmt.Sprintf("── turn %d ──\n", turn)
			if turn > 1 {
				out = "\n" + out
			}
		}
		*p = logPos{Turn: turn, Size: p.Size}
		if kind == logHeader {
			break
		}
		fallthrough
	default:
		switch kind {
		case logHeader:
			return nil
		case logLine:
			if end <= p.Raw {
				return nil
			}
			p.Raw = end
		case logEnd:
			p.Ended = true
		}
		out += text
	}
	if out != "" {
		if _, err := lg.Write([]byte(out)); err != nil {
			return err
		}
	}
	p.Size = lg.Size()
	l.savePos(name, p)
	return nil
}

// catchUp waits (a bounded while) until this gateway's copy of a box's log
// holds the box's finished turns, before a turn is started or followed
// here (which writes past them). Cluster only.
func (l *logs) catchUp(ctx context.Context, name string) {
	if !l.leases.on() {
		return
	}
	select {
	case <-l.mirror(name):
	case <-time.After(30 * time.Second):
		l.log.Warn("this gateway's copy of the log is behind", "box", name)
	case <-ctx.Done():
	}
}

// mirror brings this gateway's copy of a box's log up to what the box's
// turn files hold, following the current turn until it ends, when no
// follower of this gateway does it already. Cluster only. The channel is
// closed once the finished turns are copied (the current one may go on).
func (l *logs) mirror(name string) <-chan struct{} {
	done := make(chan struct{})
	ctx := l.bg.ctx
	if !l.leases.on() || ctx.Err() != nil {
		close(done)
		return done
	}
	l.mu.Lock()
	b := l.boxLocked(name)
	if b.mirroring != nil {
		defer l.mu.Unlock()
		return b.mirroring
	}
	b.mirroring = done
	l.mu.Unlock()
	var once sync.Once
	caught := func() { once.Do(func() { close(done) }) }
	l.bg.wg.Go(func() {
		defer func() {
			l.mu.Lock()
			b.mirroring = nil
			l.mu.Unlock()
			caught()
		}()
		for ctx.Err() == nil {
			rec, err := l.records.load(ctx, name)
			if err != nil || rec.Turn == 0 || rec.VM == "" || !(rec.State == Running || rec.State == Waiting || rec.State == Done) {
				return
			}
			l.mu.Lock()
			p := *l.posLocked(b, name)
			l.mu.Unlock()
			following := l.runs.following(name)
			turn, from := p.Turn, p.Raw
			if turn == 0 || p.Ended {
				turn, from = turn+1, 0
			}
			if turn > rec.Turn || following && turn == rec.Turn {
				return // caught up, or this gateway's follower has the rest
			}
			parser := profiles()[rec.Agent].newParser()
			out, exit := turnFiles(turn)
			if turn == rec.Turn && !rec.TurnDone {
				// What the running turn printed so far, before following it.
				if n, err := l.mirrorSoFar(ctx, rec, parser, out, from); err == nil {
					from += n
				} else {
					l.log.Warn("mirror a box's log", "box", name, "turn", turn, "err", err)
				}
				caught()
			}
			r := rec
			r.Turn = turn
			code, _, err := l.runs.followOnce(ctx, r, parser, out, exit, from, true)
			if err != nil {
				if ctx.Err() == nil {
					l.log.Warn("mirror a box's log", "box", name, "turn", turn, "err", err)
				}
				return
			}
			_ = l.at(name, turn, logEnd, 0, turnEndLine(turn, code))
		}
	})
	return done
}

// mirrorSoFar copies the whole lines a running turn's output file holds
// past from into this gateway's log; it returns the bytes consumed.
func (l *logs) mirrorSoFar(ctx context.Context, rec record, parser parser, out string, from int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	proc, err := l.vm.Exec(ctx, rec.VM, agent.ExecRequest{Argv: []string{"tail", "-c", "+" + strconv.FormatInt(from+1, 10), out}})
	if err != nil {
		return 0, err
	}
	proc.Stdin().Close()
	go drain(proc.Stderr())
	b, rerr := io.ReadAll(io.LimitReader(proc.Stdout(), 64<<20))
	if _, err := proc.Wait(); err != nil || rerr != nil {
		return 0, errors.Join(err, rerr)
	}
	var n int64
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		line := b[:i+1]
		b = b[i+1:]
		n += int64(len(line))
		if err := l.at(rec.Name, rec.Turn, logLine, from+n, parser.line(trimNL(line))); err != nil {
			return n, err
		}
	}
	return n, nil
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

func drain(r io.Reader) { _, _ = io.Copy(io.Discard, r) }

func removeFile(path string) { _ = os.Remove(path) }
