// Package agent is the host↔guest protocol of a box: the host's Client and the
// guest's server (vm/guest/agentd) talk over one byte stream (the
// virtio-serial port sbx.agent). Both ends speak the wire defined here: the
// hello, the Request and Reply frames, the Op names, the data chunks and the
// typed exec frames.
//
// Wire format. On every new connection the host sends hello = "SBXHELLO" +
// 16-byte nonce; the guest answers with the same 24 bytes and both sides then
// run yamux (host = client). Each call opens one yamux stream and starts with a
// frame — a 4-byte big-endian length and a JSON header carrying a request id
// that the reply frame echoes. Bulk data (file contents, tar) follows as chunks
// (4-byte length + bytes, a zero length ends the data), so a sender that fails
// half-way is seen as a truncated stream, never as a short file.
//
// Exec ("execstream") is one stream for the whole life of a process: the
// request, the reply (its pid, or the error that kept it from starting), then
// typed frames — a kind byte, a 4-byte big-endian length, at most 32 KiB of
// payload. Host to guest: 'i' input bytes, 'I' end of input (^D on a tty).
// Guest to host: 'o'/'e' stdout/stderr bytes, 'O'/'E' their end while the
// process runs on, and last 'x', the JSON ExitStatus, sent once the process
// is reaped and its output drained; it ends both outputs. Resize and signal
// are separate short calls naming the exec's id (so they get through while
// the process ignores its input). Back-pressure: the host buffers at most
// 1 MiB per output and then stops reading the stream, so yamux's window
// holds the guest's pump and the process blocks on its pipe; the guest reads
// input only as fast as the process takes it (and discards it once the
// process has closed its input), so a full input window never blocks output
// or signals. Each side's yamux data frame is one write (joinedConn): on a
// virtio-serial port every write is a trip through the hypervisor.
//
// Agents from before execstream answer it "unknown op"; the client then uses
// their exec for the rest of the connection: an "exec" stream (request,
// pid reply, resize/signal frames with acks, exit reply) plus one "attach"
// stream per stdio file, paired with it by the exec's id, each raw bytes with
// its own back-pressure. The server still serves both.
package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"
)

// MaxFrame bounds one JSON header; larger frames are refused unread.
const MaxFrame = 1 << 20

// maxChunk bounds one data chunk.
const maxChunk = 1 << 20

// chunkSize is the size the senders use.
const chunkSize = 64 << 10

// Ops on the wire.
const (
	OpPing       = "ping"
	OpExec       = "exec"
	OpExecStream = "execstream"
	OpAttach     = "attach"
	OpResize     = "resize"
	OpSignal     = "signal"
	OpStat       = "stat"
	OpReadDir    = "readdir"
	OpRead       = "read"
	OpWrite      = "write"
	OpMkdirAll   = "mkdirall"
	OpRemove     = "remove"
	OpTarOut     = "tarout"
	OpTarIn      = "tarin"
	OpWatch      = "watch"
	OpClock      = "clock"
	OpReseed     = "reseed"
	OpShutdown   = "shutdown"
	OpDial       = "dial" // a TCP connection to the box's loopback (dial.go)
)

// Request is the header of every call.
type Request struct {
	ID     uint64       `json:"id"`
	Op     string       `json:"op"`
	Path   string       `json:"path,omitempty"`
	Mode   uint32       `json:"mode,omitempty"`
	Exec   *ExecRequest `json:"exec,omitempty"`
	Exe    uint64       `json:"exe,omitempty"` // attach: the id of the exec call
	FD     int          `json:"fd,omitempty"`  // attach: 0 stdin, 1 stdout, 2 stderr
	Rows   uint16       `json:"rows,omitempty"`
	Cols   uint16       `json:"cols,omitempty"`
	Signal int          `json:"signal,omitempty"`
	Time   int64        `json:"time,omitempty"` // unix nanoseconds
	Data   []byte       `json:"data,omitempty"`
	Dial   *DialRequest `json:"dial,omitempty"`
}

// Reply answers a request with the same id.
type Reply struct {
	ID     uint64      `json:"id"`
	Err    *wireError  `json:"err,omitempty"`
	Health *Health     `json:"health,omitempty"`
	Info   *FileInfo   `json:"info,omitempty"`
	Infos  []FileInfo  `json:"infos,omitempty"`
	PID    int         `json:"pid,omitempty"`
	Exit   *ExitStatus `json:"exit,omitempty"`
	Event  *WatchEvent `json:"event,omitempty"`
	More   bool        `json:"more,omitempty"` // readdir: more entries follow in further frames
}

// Health is the guest's answer to Ping.
type Health struct {
	Uptime  time.Duration `json:"uptime"`  // since the guest kernel booted
	Kernel  string        `json:"kernel"`  // uname -r
	Time    time.Time     `json:"time"`    // the guest's wall clock
	Root    string        `json:"root"`    // the confined root
	Version string        `json:"version"` // protocol version
	// Guest-side view of its resources (sysinfo(2)).
	MemTotal uint64  `json:"mem_total"` // bytes
	MemFree  uint64  `json:"mem_free"`  // bytes, free plus buffers
	Procs    int     `json:"procs"`
	Load1    float64 `json:"load1"`
}

// ProtocolVersion is reported by Ping.
const ProtocolVersion = "sbx-agent/1"

// ExecRequest starts a process in the guest.
type ExecRequest struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"` // KEY=VALUE, added to the guest's defaults
	Dir  string   `json:"dir,omitempty"` // relative to /workspace; default /workspace
	TTY  bool     `json:"tty,omitempty"`
	Rows uint16   `json:"rows,omitempty"`
	Cols uint16   `json:"cols,omitempty"`
	// User runs the process as that user: "" as root (the default), "agent"
	// (AgentUser) as the box's unprivileged user with no capabilities and
	// no_new_privs; any other name is refused.
	User string `json:"user,omitempty"`
}

// ExitStatus is how a process ended: Code is -1 when a signal killed it.
type ExitStatus struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"` // e.g. "interrupt", "killed"
}

// FileInfo describes one file under /workspace.
type FileInfo struct {
	Name    string      `json:"name"` // base name
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	ModTime time.Time   `json:"mtime"`
	Link    string      `json:"link,omitempty"` // symlink target, when Mode is a symlink
}

// IsDir reports whether the file is a directory.
func (fi FileInfo) IsDir() bool { return fi.Mode.IsDir() }

// WatchKind says what happened to a watched path.
type WatchKind string

// Watch event kinds.
const (
	Created WatchKind = "created"
	Changed WatchKind = "changed"
	Removed WatchKind = "removed"
)

// WatchEvent is one change of a watched path.
type WatchEvent struct {
	Kind WatchKind `json:"kind"`
	Path string    `json:"path"`
	Info *FileInfo `json:"info,omitempty"` // nil when removed
}

// Error kinds carried on the wire.
const (
	codeNotExist   = "not-exist"
	codeExist      = "exist"
	codeEscape     = "escape"
	codePermission = "permission"
	codeInvalid    = "invalid"
	codeOther      = "other"
)

// ErrEscape is returned when a path resolves outside /workspace.
var ErrEscape = errors.New("path escapes /workspace")

// ErrClosed is returned by calls on a closed client.
var ErrClosed = errors.New("agent connection closed")

// Error is an error reported by the guest.
type Error struct {
	Op   string // the call, e.g. "stat"
	Path string // the path it was given, if any
	Code string // not-exist, exist, escape, permission, invalid, other
	Msg  string
}

func (e *Error) Error() string {
	if e.Path != "" {
		return fmt.Sprintf("agent %s %q: %s", e.Op, e.Path, e.Msg)
	}
	return fmt.Sprintf("agent %s: %s", e.Op, e.Msg)
}

// Is lets errors.Is match fs.ErrNotExist, fs.ErrExist, fs.ErrPermission,
// fs.ErrInvalid and ErrEscape.
func (e *Error) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.Code == codeNotExist
	case fs.ErrExist:
		return e.Code == codeExist
	case fs.ErrPermission:
		return e.Code == codePermission
	case fs.ErrInvalid:
		return e.Code == codeInvalid
	case ErrEscape:
		return e.Code == codeEscape
	}
	return false
}

type wireError struct {
	Code string `json:"code"`
	Msg  string `json:"msg"`
}

// ToWire classifies a guest-side error for the host. Every error a caller
// can cause by naming the wrong path (a file where a directory is wanted
// and the other way round, a name too long, a symlink loop, a path that is
// not a regular file) gets a kind: "other" is left for what the caller
// could not have caused, which the host reports as a failure of sbx.
func ToWire(err error) *wireError {
	if err == nil {
		return nil
	}
	code := codeOther
	switch {
	case errors.Is(err, ErrEscape):
		code = codeEscape
	case errors.Is(err, fs.ErrNotExist):
		code = codeNotExist
	case errors.Is(err, fs.ErrExist):
		code = codeExist
	case errors.Is(err, fs.ErrPermission):
		code = codePermission
	case errors.Is(err, fs.ErrInvalid), isPathErrno(err):
		code = codeInvalid
	}
	return &wireError{Code: code, Msg: err.Error()}
}

// isPathErrno reports the errnos that mean the path names the wrong kind of
// thing (syscall.Errno.Is maps only ENOENT, EEXIST, ENOTEMPTY, EACCES and
// EPERM to fs errors).
func isPathErrno(err error) bool {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case unix.ENOTDIR, unix.EISDIR, unix.ENAMETOOLONG, unix.ELOOP, unix.EINVAL, unix.ENXIO, unix.ENODEV, unix.ETXTBSY:
		return true
	}
	return false
}

func (w *wireError) err(op, path string) error {
	if w == nil {
		return nil
	}
	return &Error{Op: op, Path: path, Code: w.Code, Msg: w.Msg}
}

// WriteFrame writes one length-prefixed JSON header.
func WriteFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("encode frame: %d bytes exceeds %d", len(b), MaxFrame)
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads one length-prefixed JSON header into v.
func ReadFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d", n, MaxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("read frame body (%d bytes): %w", n, io.ErrUnexpectedEOF)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode frame: %w", err)
	}
	return nil
}

// ChunkWriter frames bulk data; Close writes the end marker.
type ChunkWriter struct{ w io.Writer }

// NewChunkWriter frames the bulk data written to it onto w.
func NewChunkWriter(w io.Writer) ChunkWriter { return ChunkWriter{w: w} }

func (c ChunkWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), maxChunk)
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], uint32(n))
		if _, err := c.w.Write(hdr[:]); err != nil {
			return written, err
		}
		m, err := c.w.Write(p[:n])
		written += m
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

// ReadFrom keeps io.Copy from splitting data into tiny chunks.
func (c ChunkWriter) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, chunkSize)
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

func (c ChunkWriter) Close() error {
	var hdr [4]byte
	_, err := c.w.Write(hdr[:])
	return err
}

// ChunkReader reads framed bulk data; it returns io.EOF only after the end
// marker and io.ErrUnexpectedEOF when the stream ends without one.
type ChunkReader struct {
	r    io.Reader
	left uint32
	done bool
}

// NewChunkReader reads the bulk data framed on r.
func NewChunkReader(r io.Reader) *ChunkReader { return &ChunkReader{r: r} }

func (c *ChunkReader) Read(p []byte) (int, error) {
	if c.done {
		return 0, io.EOF
	}
	for c.left == 0 {
		var hdr [4]byte
		if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("read data chunk: %w", err)
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 {
			c.done = true
			return 0, io.EOF
		}
		if n > maxChunk {
			return 0, fmt.Errorf("data chunk of %d bytes exceeds %d", n, maxChunk)
		}
		c.left = n
	}
	if uint32(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= uint32(n)
	if err == io.EOF {
		if c.left > 0 {
			return n, fmt.Errorf("read data chunk: %w", io.ErrUnexpectedEOF)
		}
		err = nil
	}
	return n, err
}
