// Package runlog keeps the live output of a run: one append-only file per run
// on the host, read by any number of subscribers, each from a byte offset of
// its choosing. Offsets are stable forever, so the store can keep them and a
// client can resume exactly where it stopped (never a sliding tail window).
//
// Subscribers read from the file, not from an in-memory queue: a slow
// subscriber costs the writer nothing, and a subscriber that attaches late
// from offset 0 sees every byte.
//
// Durability: Write hands the bytes to the kernel at once (subscribers and a
// restarted gateway see them even if this process dies) and fsyncs at most
// once per SyncInterval, so a host crash loses at most that window; Close and
// Sync always fsync. After a host crash the file may be shorter than an offset
// the store recorded: Open reports the true size, callers clamp to it.
package runlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SyncInterval bounds how long written bytes may sit unsynced in the page
// cache. A variable on Log would do too; one policy for every run is enough.
const SyncInterval = time.Second

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("run log closed")

// Log is the append side of one run's log. Its methods are safe for
// concurrent use; concurrent Writes are serialised, each landing contiguously.
// Keep one Log per file: Open refuses a file that is already open (flock), in
// this process or another.
type Log struct {
	path string

	mu       sync.Mutex
	f        *os.File
	size     int64
	changed  chan struct{} // closed and replaced on every write: a broadcast
	closed   bool
	done     chan struct{} // closed by Close
	lastSync time.Time
	dirty    bool
}

// Open opens (creating if needed) the log of run id under dir and positions
// appends at its end, so a gateway restart continues where it stopped.
func Open(dir, id string) (*Log, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create run log dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, id+".log")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open run log: %w", err)
	}
	// Two appenders would interleave and each would miss the other's
	// wake-ups; refuse the second one instead.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("run log %s is already open: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat run log %s: %w", path, err)
	}
	return &Log{
		path:     path,
		f:        f,
		size:     st.Size(),
		changed:  make(chan struct{}),
		done:     make(chan struct{}),
		lastSync: time.Now(),
	}, nil
}

// ValidID reports whether id can name a run log file: 1 to 128 characters
// from [A-Za-z0-9_.-], not "." or "..", so it can never leave dir.
func ValidID(id string) error {
	if id == "" || len(id) > 128 || id == "." || id == ".." {
		return fmt.Errorf("bad run id %q: want 1-128 characters of [A-Za-z0-9_.-] other than \".\" and \"..\"", id)
	}
	for _, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return fmt.Errorf("bad run id %q: character %q not in [A-Za-z0-9_.-]", id, c)
		}
	}
	return nil
}

// Path is the log file's path.
func (l *Log) Path() string { return l.path }

// Size is the number of bytes written so far (the offset the next Write
// starts at).
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

// Write appends p and wakes every subscriber. It never waits for readers.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	n, err := l.f.Write(p)
	if n > 0 {
		l.size += int64(n)
		l.dirty = true
		close(l.changed)
		l.changed = make(chan struct{})
	}
	if err != nil {
		return n, fmt.Errorf("append to run log %s: %w", l.path, err)
	}
	if time.Since(l.lastSync) >= SyncInterval {
		if err := l.syncLocked(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Sync flushes written bytes to stable storage.
func (l *Log) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	return l.syncLocked()
}

func (l *Log) syncLocked() error {
	l.lastSync = time.Now()
	if !l.dirty {
		return nil
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync run log %s: %w", l.path, err)
	}
	l.dirty = false
	return nil
}

// Close syncs and closes the log. Every subscriber then reads what remains up
// to the final size and gets io.EOF; none waits for more. Close is idempotent.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	close(l.done)
	serr := l.syncLocked()
	cerr := l.f.Close()
	if serr != nil {
		return serr
	}
	if cerr != nil {
		return fmt.Errorf("close run log %s: %w", l.path, cerr)
	}
	return nil
}

// state returns what a reader needs to decide whether to wait: the current
// size, the channel the next write closes, and whether the log is closed.
// Taking all three under one lock is what makes a wake-up impossible to miss.
func (l *Log) state() (size int64, changed <-chan struct{}, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size, l.changed, l.closed
}

// Subscribe returns a reader of the log from byte offset from (0 = from the
// start). Read blocks while the reader is caught up and the log is open, and
// returns io.EOF once the log is closed and everything was read; it returns
// ctx.Err() when ctx ends. Subscribing to a closed log reads it to the end.
// Close the reader when done; closing it also unblocks a pending Read.
func (l *Log) Subscribe(ctx context.Context, from int64) (*Reader, error) {
	size, _, _ := l.state()
	if from < 0 || from > size {
		return nil, fmt.Errorf("subscribe to %s at offset %d: want 0..%d", l.path, from, size)
	}
	f, err := os.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("open run log for reading: %w", err)
	}
	return &Reader{log: l, ctx: ctx, f: f, off: from, stop: make(chan struct{})}, nil
}

// Reader is one subscriber's view of a Log. Read and Offset are for one
// goroutine; Close may be called from any.
type Reader struct {
	log  *Log
	ctx  context.Context
	f    *os.File
	off  int64
	stop chan struct{}
	once sync.Once
}

// Offset is the log offset of the next byte Read will return: what a client
// stores to resume later.
func (r *Reader) Offset() int64 { return r.off }

// Read reads the next bytes of the log, waiting for a write if caught up.
func (r *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		select {
		case <-r.stop:
			return 0, os.ErrClosed
		default:
		}
		size, changed, closed := r.log.state()
		if r.off < size {
			if want := size - r.off; int64(len(p)) > want {
				p = p[:want]
			}
			n, err := r.f.ReadAt(p, r.off)
			r.off += int64(n)
			if n > 0 {
				return n, nil
			}
			if err == nil || err == io.EOF {
				// The size said the bytes are there; a short file means it
				// was truncated under us, which an append-only log forbids.
				return 0, fmt.Errorf("read run log %s at %d: file shorter than %d", r.log.path, r.off, size)
			}
			return 0, fmt.Errorf("read run log %s at %d: %w", r.log.path, r.off, err)
		}
		if closed {
			return 0, io.EOF
		}
		select {
		case <-changed:
		case <-r.log.done:
		case <-r.stop:
			return 0, os.ErrClosed
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
}

// Close releases the reader and unblocks a pending Read.
func (r *Reader) Close() error {
	var err error
	r.once.Do(func() {
		close(r.stop)
		err = r.f.Close()
	})
	return err
}

// Done is closed when the log is closed: the run ended or its box is gone.
func (l *Log) Done() <-chan struct{} { return l.done }
