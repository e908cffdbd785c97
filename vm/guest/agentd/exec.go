package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/vm/agent"
)

// Reaper starts processes and reports their exit. In PID 1 one reaper must
// collect every child (orphans included) and hand each status to whoever
// started that pid; elsewhere waiting on each pid is enough.
type Reaper interface {
	// Start calls fork, which starts a process and returns its pid, and
	// returns a channel that receives the pid's wait status once.
	Start(fork func() (int, error)) (pid int, exited <-chan unix.WaitStatus, err error)
}

// waitEach waits for each started pid on its own.
type waitEach struct{}

func (waitEach) Start(fork func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	pid, err := fork()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	go func() {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if err == unix.EINTR {
				continue
			}
			break
		}
		ch <- ws
	}()
	return pid, ch, nil
}

// ChildReaper is the reaper of PID 1: it reaps every child on SIGCHLD and
// hands the status of a pid started through Start to its starter; orphans
// are reaped and logged.
type ChildReaper struct {
	log     *slog.Logger
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
}

// NewChildReaper starts reaping until ctx ends.
func NewChildReaper(ctx context.Context, log *slog.Logger) *ChildReaper {
	r := &ChildReaper{log: log, waiting: map[int]chan unix.WaitStatus{}}
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		defer signal.Stop(sig)
		tick := time.NewTicker(time.Second) // a lost SIGCHLD cannot leave a zombie for long
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
			case <-tick.C:
			}
			r.reap()
		}
	}()
	return r
}

func (r *ChildReaper) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		ch, ok := r.waiting[pid]
		delete(r.waiting, pid)
		r.mu.Unlock()
		if ok {
			ch <- ws
		} else if r.log != nil {
			r.log.Debug("reaped orphan", "pid", pid, "status", int(ws))
		}
	}
}

// Start forks under the lock so the pid is registered before reap can see it.
func (r *ChildReaper) Start(fork func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiting[pid] = ch
	return pid, ch, nil
}

// pendingExec collects the stdio streams of one exec call.
type pendingExec struct {
	streams [3]*yamux.Stream
	got     chan struct{} // one send per attached stream
	done    chan struct{} // closed when the process's streams are finished
	claimed bool          // an exec call owns it (guarded by connState.mu)
}

// pending returns the rendezvous of exec call id, creating it: the exec
// stream and its stdio streams are handled concurrently, in any order.
func (c *connState) pending(id uint64) *pendingExec {
	c.mu.Lock()
	defer c.mu.Unlock()
	pe, ok := c.execs[id]
	if !ok {
		pe = &pendingExec{got: make(chan struct{}, 3), done: make(chan struct{})}
		c.execs[id] = pe
		// Streams for an exec that never comes are dropped after a while.
		time.AfterFunc(attachTimeout, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !pe.claimed {
				delete(c.execs, id)
				close(pe.done)
			}
		})
	}
	return pe
}

// attach hands a stdio stream to its exec call and holds it until the exec
// is done with it.
func (c *connState) attach(st *yamux.Stream, req agent.Request) {
	if req.FD < 0 || req.FD > 2 {
		return
	}
	pe := c.pending(req.Exe)
	c.mu.Lock()
	ok := pe.streams[req.FD] == nil
	if ok {
		pe.streams[req.FD] = st
	}
	c.mu.Unlock()
	if !ok {
		return // duplicate fd: drop the stream
	}
	pe.got <- struct{}{}
	<-pe.done
}

// attachTimeout bounds the wait for an exec's three stdio streams.
const attachTimeout = 10 * time.Second

func (c *connState) exec(ctx context.Context, ctl *yamux.Stream, req agent.Request) {
	s := c.srv
	fail := func(err error) {
		_ = agent.WriteFrame(ctl, agent.Reply{ID: req.ID, Err: agent.ToWire(err)})
	}
	pe := c.pending(req.ID)
	c.mu.Lock()
	if pe.claimed {
		c.mu.Unlock()
		fail(fmt.Errorf("exec id %d already in use: %w", req.ID, errInvalid))
		return
	}
	select {
	case <-pe.done: // timed out just now
		c.mu.Unlock()
		fail(errors.New("exec: stdio streams timed out"))
		return
	default:
	}
	pe.claimed = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.execs, req.ID)
		c.mu.Unlock()
		close(pe.done)
	}()
	if req.Exec == nil || len(req.Exec.Argv) == 0 {
		fail(fmt.Errorf("exec: empty argv: %w", errInvalid))
		return
	}
	timer := time.NewTimer(attachTimeout)
	defer timer.Stop()
	for range 3 {
		select {
		case <-pe.got:
		case <-timer.C:
			fail(errors.New("exec: stdio streams did not arrive"))
			return
		case <-ctx.Done():
			return
		}
	}
	p, err := s.startProcess(*req.Exec)
	if err != nil {
		fail(err)
		return
	}
	// A failed write does not mean the host missed the PID: yamux may report
	// a session shutdown for a frame it already sent. Processes outlive
	// their connection anyway (a gateway restart must not kill work), so
	// the process keeps running either way.
	if err := agent.WriteFrame(ctl, agent.Reply{ID: req.ID, PID: p.pid}); err != nil {
		s.log.Debug("agent: exec reply", "pid", p.pid, "err", err)
	}
	s.log.Debug("agent: exec", "pid", p.pid, "argv", req.Exec.Argv)
	p.run(ctl, pe.streams, req.ID, s.log)
}

type process struct {
	pid    int
	tty    *os.File // pty master, or nil
	stdin  *os.File // our ends of the pipes (nil with a tty)
	stdout *os.File
	stderr *os.File
	exited <-chan unix.WaitStatus
	gone   atomic.Bool // reaped: its pid may be reused
}

func (s *server) startProcess(req agent.ExecRequest) (*process, error) {
	if err := checkUser(req.User); err != nil {
		return nil, err
	}
	dir := s.root
	if req.Dir != "" {
		rel, err := s.rel(req.Dir)
		if err != nil {
			return nil, err
		}
		fi, err := s.stat(rel)
		if err != nil {
			return nil, fmt.Errorf("exec dir %q: %w", req.Dir, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("exec dir %q: not a directory: %w", req.Dir, errInvalid)
		}
		dir = filepath.Join(s.root, rel)
	}
	env := append(userEnv(req.User, s.env), req.Env...)
	if req.TTY && lookupEnv(env, "TERM") == "" {
		env = append(env, "TERM=xterm-256color")
	}
	path, err := lookPath(req.Argv[0], lookupEnv(env, "PATH"), dir)
	if err != nil {
		return nil, err
	}
	path, argv := asUser(req.User, path, req.Argv)

	p := &process{}
	var childFiles []*os.File
	attr := &syscall.ProcAttr{Dir: dir, Env: env, Sys: &syscall.SysProcAttr{}}
	if req.TTY {
		master, slave, err := pty.Open()
		if err != nil {
			return nil, fmt.Errorf("exec: open pty: %w", err)
		}
		rows, cols := req.Rows, req.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		if err := pty.Setsize(master, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
			master.Close()
			slave.Close()
			return nil, fmt.Errorf("exec: set pty size: %w", err)
		}
		p.tty = master
		if req.User == agent.AgentUser {
			// The terminal is the agent's (as login does), so what opens
			// its own tty by name (less, ssh, git's pager) may.
			if err := slave.Chown(agent.AgentUID, -1); err != nil {
				master.Close()
				slave.Close()
				return nil, fmt.Errorf("exec: chown pty: %w", err)
			}
		}
		childFiles = []*os.File{slave, slave, slave}
		attr.Sys.Setsid = true
		attr.Sys.Setctty = true
		attr.Sys.Ctty = 0
	} else {
		var ends [3][2]*os.File // [fd]{parent, child}
		for i := range ends {
			r, w, err := os.Pipe()
			if err != nil {
				for _, e := range ends[:i] {
					e[0].Close()
					e[1].Close()
				}
				return nil, fmt.Errorf("exec: pipe: %w", err)
			}
			if i == 0 {
				ends[i] = [2]*os.File{w, r}
			} else {
				ends[i] = [2]*os.File{r, w}
			}
		}
		p.stdin, p.stdout, p.stderr = ends[0][0], ends[1][0], ends[2][0]
		childFiles = []*os.File{ends[0][1], ends[1][1], ends[2][1]}
		attr.Sys.Setpgid = true
	}
	if req.User == agent.AgentUser {
		// The trampoline starts on /dev/null and gets the process's stdio
		// as fds 3-5 (see NewDropCommand): nothing the guest binary links
		// may talk to the terminal before the target runs.
		null, err := os.Open(os.DevNull)
		if err != nil {
			for _, f := range childFiles {
				f.Close()
			}
			p.closeAll()
			return nil, fmt.Errorf("exec: %w", err)
		}
		defer null.Close()
		attr.Files = []uintptr{null.Fd(), null.Fd(), null.Fd()}
		if req.TTY {
			attr.Sys.Ctty = dropFirstFD
		}
	}
	for _, f := range childFiles {
		attr.Files = append(attr.Files, f.Fd())
	}
	pid, exited, err := s.reaper.Start(func() (int, error) {
		return syscall.ForkExec(path, argv, attr)
	})
	for _, f := range childFiles {
		f.Close() // the child has its copies (a tty's slave is closed once per alias; extra closes are no-ops)
	}
	if err != nil {
		p.closeAll()
		return nil, fmt.Errorf("exec %q: %w", req.Argv[0], err)
	}
	p.pid, p.exited = pid, exited
	return p, nil
}

func (p *process) closeAll() {
	for _, f := range []*os.File{p.tty, p.stdin, p.stdout, p.stderr} {
		if f != nil {
			f.Close()
		}
	}
}

// control applies a resize or signal request.
func (p *process) control(req agent.Request) error {
	switch req.Op {
	case agent.OpResize:
		if p.tty == nil {
			return fmt.Errorf("resize: process has no tty: %w", errInvalid)
		}
		return pty.Setsize(p.tty, &pty.Winsize{Rows: req.Rows, Cols: req.Cols})
	case agent.OpSignal:
		if p.gone.Load() {
			return errors.New("signal: process has exited") // the pid may already belong to someone else
		}
		err := unix.Kill(-p.pid, unix.Signal(req.Signal))
		if err != nil {
			err = unix.Kill(p.pid, unix.Signal(req.Signal))
		}
		return err
	}
	return fmt.Errorf("unknown control op %q: %w", req.Op, errInvalid)
}

// run pumps the stdio streams, obeys control frames, and reports the exit.
func (p *process) run(ctl *yamux.Stream, st [3]*yamux.Stream, id uint64, log *slog.Logger) {
	defer p.closeAll()
	var ctlMu sync.Mutex // acks and the exit frame share ctl
	send := func(rep agent.Reply) error {
		ctlMu.Lock()
		defer ctlMu.Unlock()
		return agent.WriteFrame(ctl, rep)
	}
	// Control frames: resize and signal, until the host closes ctl. Each is
	// acknowledged once applied, so a resize is in effect before the input
	// the host sends after it.
	go func() {
		for {
			var req agent.Request
			if err := agent.ReadFrame(ctl, &req); err != nil {
				return
			}
			if send(agent.Reply{ID: req.ID, Err: agent.ToWire(p.control(req))}) != nil {
				return
			}
		}
	}()

	// stdin: host → process; EOF closes the pipe, or sends ^D to a tty.
	go func() {
		if p.tty != nil {
			_, _ = io.Copy(p.tty, st[0])
			_, _ = p.tty.Write([]byte{4})
			return
		}
		_, _ = io.Copy(p.stdin, st[0])
		p.stdin.Close()
	}()

	var outs sync.WaitGroup
	var pumps []*pump
	out := func(src *os.File, dst *yamux.Stream) {
		pm := &pump{src: src, tty: src == p.tty}
		pumps = append(pumps, pm)
		outs.Add(1)
		go func() {
			defer outs.Done()
			pm.copy(0, func(b []byte) error { _, err := dst.Write(b); return err })
			dst.Close()
		}()
	}
	if p.tty != nil {
		out(p.tty, st[1])
		st[2].Close()
	} else {
		out(p.stdout, st[1])
		out(p.stderr, st[2])
	}
	exit := p.finish(pumps, &outs)
	if err := send(agent.Reply{ID: id, Exit: &exit}); err != nil {
		log.Debug("agent: send exit", "pid", p.pid, "err", err)
	}
}

// finish waits for the process to exit and for its output pumps to deliver
// what it wrote, and says how it ended.
func (p *process) finish(pumps []*pump, outs *sync.WaitGroup) agent.ExitStatus {
	ws := <-p.exited
	p.gone.Store(true)
	// Drain what the process wrote; then cut outputs that stay idle, which
	// happens when a background child keeps the pipe or tty open.
	copied := make(chan struct{})
	go func() { outs.Wait(); close(copied) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-copied:
			break wait
		case <-tick.C:
			for _, pm := range pumps {
				pm.cutIfIdle(250 * time.Millisecond)
			}
		}
	}
	if ws.Signaled() {
		return agent.ExitStatus{Code: -1, Signal: unix.SignalName(ws.Signal())}
	}
	return agent.ExitStatus{Code: ws.ExitStatus()}
}

// pump copies process output to a stream and knows whether it is waiting for
// the process (idle) or for the host (back-pressure, never cut).
type pump struct {
	src       *os.File
	tty       bool         // src is the pty master, shared with stdin: never closed here
	idleSince atomic.Int64 // unix nanos when the pending read began; 0 while not reading
}

// copy reads the process's output into a buffer that keeps head bytes free in
// front (room for a frame header) and hands each read to send.
func (pm *pump) copy(head int, send func(b []byte) error) {
	buf := make([]byte, head+pumpBuf)
	for {
		pm.idleSince.Store(time.Now().UnixNano())
		n, err := pm.src.Read(buf[head:])
		pm.idleSince.Store(0)
		if n > 0 {
			if werr := send(buf[:head+n]); werr != nil {
				// The host is gone: the writer gets EPIPE instead of blocking.
				if pm.src != nil && !pm.tty {
					pm.src.Close()
				}
				return
			}
		}
		if err != nil {
			return // EOF, EIO from a tty whose last holder is gone, or the cut
		}
	}
}

// pumpBuf is the most output one read moves.
const pumpBuf = agent.MaxExecData

func (pm *pump) cutIfIdle(after time.Duration) {
	since := pm.idleSince.Load()
	if since != 0 && time.Since(time.Unix(0, since)) > after {
		_ = pm.src.SetReadDeadline(time.Now())
	}
}

func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// lookPath finds name in path (the process's PATH, not ours).
func lookPath(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("exec %q: %w", name, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec %q: not found in PATH %q: %w", name, path, os.ErrNotExist)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file: %w", p, os.ErrPermission)
	}
	return nil
}
