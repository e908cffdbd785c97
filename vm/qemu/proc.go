package qemu

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// proc is one running QEMU process, started by us or adopted after a
// gateway restart.
type proc struct {
	pid    int
	log    string // qemu.log, tailed into failure reasons
	logOff int64  // where this process's lines in qemu.log begin
	done   chan struct{}
	// stopping is set before we end the process on purpose (sleep, kill,
	// destroy), so its exit is not a failure.
	stopping atomic.Bool

	mu  sync.Mutex
	err error // why it ended; read after done is closed
}

// startProc launches QEMU in its own session, so a Ctrl-C to the gateway's
// process group does not reach the boxes, with output appended to logPath.
func startProc(bin string, args []string, logPath string) (*proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", logPath, err)
	}
	defer lf.Close()
	off, _ := lf.Seek(0, io.SeekEnd)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &proc{pid: cmd.Process.Pid, log: logPath, logOff: off, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.finish(err)
	}()
	return p, nil
}

// adoptProc watches a QEMU process that is not our child through a pidfd.
func adoptProc(pid int, logPath string) (*proc, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	p := &proc{pid: pid, log: logPath, done: make(chan struct{})}
	if fi, err := os.Stat(logPath); err == nil {
		p.logOff = fi.Size() // only what it says from now on
	}
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			if err == nil || !errors.Is(err, unix.EINTR) {
				break
			}
		}
		// Not our child: the exit status went to our predecessor.
		p.finish(errors.New("exited (adopted process, status unknown)"))
	}()
	return p, nil
}

func (p *proc) finish(err error) {
	if err == nil {
		err = errors.New("exited with status 0")
	}
	// The guest console's last line says why a machine stopped on its own
	// (a kernel panic); a machine killed by a signal from outside (the OOM
	// killer, an operator's kill -9) did not stop for anything the guest
	// printed, and its last boot message would only mislead.
	console := tailNote(filepath.Join(filepath.Dir(p.log), consoleFile), 0)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			console = " (killed from outside sbx: the OOM killer, or an operator)"
		}
	}
	p.mu.Lock()
	p.err = fmt.Errorf("qemu process %d %w%s%s", p.pid, err, tailNote(p.log, p.logOff), console)
	p.mu.Unlock()
	close(p.done)
}

// exitErr is why the process ended; valid after done is closed.
func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill ends the process at once and waits for it.
func (p *proc) kill(timeout time.Duration) error {
	p.stopping.Store(true)
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("qemu process %d did not end after SIGKILL", p.pid)
	}
}

// tailNote returns the last line of path written after offset as
// ": <line>", or "".
func tailNote(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return ""
	}
	b = b[offset:]
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	if len(b) == 0 {
		return ""
	}
	if len(b) > 300 {
		b = b[:300]
	}
	return ": " + string(b)
}

// cmdline returns a process's argv, or nil when it is gone.
func cmdline(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// qmpPathOf returns the QMP socket path in a QEMU argv, or "".
func qmpPathOf(argv []string) string {
	if len(argv) == 0 || !strings.HasPrefix(filepath.Base(argv[0]), "qemu-system") {
		return ""
	}
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == "-qmp" {
			v := strings.TrimPrefix(argv[i+1], "unix:")
			v, _, _ = strings.Cut(v, ",")
			return v
		}
	}
	return ""
}

// isOurs reports whether pid is the QEMU of the box in dir.
func isOurs(pid int, dir string) bool {
	return pid > 0 && qmpPathOf(cmdline(pid)) == filepath.Join(dir, qmpSock)
}

// qemuUnder lists QEMU processes whose QMP socket lies under root, by pid.
func qemuUnder(root string) map[int]string {
	found := map[int]string{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return found
	}
	prefix := filepath.Clean(root) + string(filepath.Separator)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if q := qmpPathOf(cmdline(pid)); strings.HasPrefix(q, prefix) {
			found[pid] = q
		}
	}
	return found
}

// cpuTicks returns utime+stime of pid in clock ticks.
func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat times", pid)
	}
	return ut + st, nil
}

// privateBytes sums Private_Clean and Private_Dirty of /proc/pid/smaps_rollup.
func privateBytes(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "Private_Clean" && k != "Private_Dirty") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse smaps_rollup %q: %w", line, err)
		}
		total += n << 10
	}
	return total, nil
}
