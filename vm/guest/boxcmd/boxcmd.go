// Package boxcmd is the guest side of a run: `sbx box run` starts an agent
// detached from any connection with its output in a file, `sbx box follow`
// streams that file from an offset to the host and ends with the agent's exit
// status, and `sbx box script-agent` is the deterministic agent the tests and
// benchmarks drive. It runs inside a box and imports no server package.
//
// The split exists so a run survives the host: the agent never writes to a
// host connection, so a gateway restart, a dropped connection or a sleep
// loses nothing; the host resumes `follow` from the byte offset it stored.
package boxcmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/guest/agentd"
)

// TurnDir is where a box keeps its turns' output and exit files, outside
// /workspace so the diff and the artifacts never see them.
const TurnDir = "/var/lib/sbx/turns"

// Exit codes of follow that are not the agent's own.
const (
	// ExitFollowError: follow itself failed (bad offset, unreadable file).
	ExitFollowError = 125
	// ExitKilled: the agent was killed by a signal.
	ExitKilled = 137
)

// NewCommand returns `sbx box` with its subcommands.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:    "box",
		Short:  "Guest-side helpers of a run (inside a box)",
		Hidden: true,
	}
	// drop is the guest agent's trampoline to the unprivileged user
	// (ExecRequest.User); it lives with the agent that starts it.
	root.AddCommand(runCommand(), followCommand(), scriptAgentCommand(), agentd.NewDropCommand())
	return root
}

func runCommand() *cobra.Command {
	var out, exitFile, dir, user string
	cmd := &cobra.Command{
		Use:   "run --out FILE --exit FILE [--dir DIR] [--user agent] -- ARGV...",
		Short: "Run ARGV with its output appended to FILE (and copied to stdout while anyone reads it), its status written to the exit file",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" || exitFile == "" {
				return errors.New("--out and --exit are required")
			}
			if user != "" && user != agent.AgentUser {
				return fmt.Errorf("--user: only %q (or none, root) may be asked for", agent.AgentUser)
			}
			code, err := supervise(cmd.OutOrStdout(), out, exitFile, dir, user, args)
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "sbx box run: %v\n", err)
				os.Exit(ExitFollowError)
			}
			os.Exit(code)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "output file (appended)")
	cmd.Flags().StringVar(&exitFile, "exit", "", "exit status file, written when the command ends")
	cmd.Flags().StringVar(&dir, "dir", "", "working directory")
	cmd.Flags().StringVar(&user, "user", "", `run ARGV as this user: "agent" (the box's unprivileged user, through the trampoline of sbx box drop) or none (root)`)
	return cmd
}

// supervise runs argv with its output appended to out and, best effort,
// copied to live (the host's exec: the first reader sees output at once;
// once that connection is gone, the copy stops and the file alone goes on,
// to be resumed with follow). When argv ends its status goes to exitFile
// ("0", "1", ... or "signal killed"), atomically, and is returned as an
// exit code. The host runs it as an exec, which outlives its connection.
//
// With user agent.AgentUser the supervisor stays root (the output and exit
// files are root's, 0600, out of the agent's reach) and only argv runs as
// the unprivileged user: started through the drop trampoline, with the
// agent user's HOME, USER, LOGNAME and PATH.
func supervise(live io.Writer, out, exitFile, dir, user string, argv []string) (int, error) {
	// live is this process's stdout, a pipe to the box's agent: when the
	// gateway dies (kill -9, no detach) the agent closes it, and Go kills a
	// program that writes to a broken stdout with SIGPIPE, taking the turn
	// down with it. Catching SIGPIPE turns that into EPIPE, which the live
	// copy answers by dropping the reader. Caught, not ignored: the agent
	// started below gets the default disposition back at exec.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	for _, p := range []string{out, exitFile} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return 0, err
		}
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, writeExit(exitFile, fmt.Sprintf("error %v", err))
	}
	defer f.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	c, err := supervised(argv, pw, user)
	if err == nil {
		c.Dir = dir
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err = c.Start()
	}
	if err != nil {
		pw.Close()
		pr.Close()
		fmt.Fprintf(f, "sbx: cannot start %s: %v\n", argv[0], err)
		fmt.Fprintf(live, "sbx: cannot start %s: %v\n", argv[0], err)
		return 127, writeExit(exitFile, "127")
	}
	pw.Close()
	if err := atomicWrite(exitFile+".pid", strconv.Itoa(c.Process.Pid)); err != nil {
		_ = c.Process.Kill()
		return 0, err
	}
	lc := newLiveCopy(live)
	copied := make(chan error, 1)
	go func() { copied <- tee(f, lc, pr) }()
	err = c.Wait()
	var cerr error
	select {
	case cerr = <-copied:
	case <-time.After(2 * time.Second):
		// A background child holds the output open; the agent is done.
		pr.Close()
		cerr = <-copied
	}
	pr.Close()
	status, code := "0", 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			status, code = "signal "+ws.Signal().String(), ExitKilled
		} else {
			status, code = strconv.Itoa(ee.ExitCode()), ee.ExitCode()
		}
	} else if err != nil {
		status, code = fmt.Sprintf("error %v", err), ExitFollowError
	}
	if cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		status, code = fmt.Sprintf("error %v", cerr), ExitFollowError
	}
	// A reader that missed bytes must resume from the file: it gets the
	// follow error code instead of the agent's, and follow gives it both.
	if !lc.finish(5 * time.Second) {
		code = ExitFollowError
	}
	_ = f.Sync()
	return code, writeExit(exitFile, status)
}

// supervised is the command that runs argv with its output on w: as
// root, or through the drop trampoline as the agent user (the target's
// stdin, stdout and stderr on fds 3-5, /dev/null on its own 0-2).
func supervised(argv []string, w *os.File, user string) (*exec.Cmd, error) {
	if user != agent.AgentUser {
		c := exec.Command(argv[0], argv[1:]...)
		c.Stdout, c.Stderr = w, w
		return c, nil
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, err
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	prog, args := agentd.AsAgent(path, argv)
	c := &exec.Cmd{Path: prog, Args: args, Env: agentd.AgentEnv(os.Environ())}
	c.ExtraFiles = []*os.File{null, w, w}
	return c, nil
}

// tee copies the agent's output to the file (which must get every byte)
// and to the live reader, which can never hold the file back.
func tee(file *os.File, lc *liveCopy, r io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := file.Write(buf[:n]); werr != nil {
				_, _ = io.Copy(io.Discard, r) // never block the agent
				return werr
			}
			lc.send(buf[:n])
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// liveCopy writes to the live reader from its own goroutine: a reader that
// went away (its connection broke, and nobody drains the pipe) must not
// stall the agent. Once a chunk cannot be queued the copy is dropped for
// good, so the live stream is always a prefix of the file.
type liveCopy struct {
	ch      chan []byte
	dropped atomic.Bool
	done    chan struct{}
}

func newLiveCopy(w io.Writer) *liveCopy {
	l := &liveCopy{ch: make(chan []byte, 256), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for b := range l.ch {
			if l.dropped.Load() {
				continue
			}
			if _, err := w.Write(b); err != nil {
				l.dropped.Store(true)
			}
		}
	}()
	return l
}

func (l *liveCopy) send(b []byte) {
	if l.dropped.Load() {
		return
	}
	select {
	case l.ch <- append([]byte(nil), b...):
	default:
		l.dropped.Store(true)
	}
}

// finish waits up to d for the queued chunks to be written and reports
// whether the live reader got every byte.
func (l *liveCopy) finish(d time.Duration) bool {
	close(l.ch)
	select {
	case <-l.done:
	case <-time.After(d):
		l.dropped.Store(true)
	}
	return !l.dropped.Load()
}

func writeExit(path, status string) error { return atomicWrite(path, status+"\n") }

func atomicWrite(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func followCommand() *cobra.Command {
	var from int64
	var exitFile string
	var poll time.Duration
	cmd := &cobra.Command{
		Use:   "follow --exit FILE [--from N] OUTPUT",
		Short: "Stream OUTPUT from byte N until the run's exit file appears; exit with its status",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := follow(cmd.OutOrStdout(), args[0], exitFile, from, poll)
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "sbx box follow: %v\n", err)
				code = ExitFollowError
			}
			// cobra has no exit status of its own; the status is the result.
			os.Exit(code)
			return nil
		},
	}
	cmd.Flags().Int64Var(&from, "from", 0, "byte offset to start at")
	cmd.Flags().StringVar(&exitFile, "exit", "", "exit status file of the run")
	cmd.Flags().DurationVar(&poll, "poll", 25*time.Millisecond, "how often to look for new output")
	return cmd
}

// follow copies path from offset from to w until exitFile exists and the
// output is read to its end, then returns the run's exit code.
func follow(w io.Writer, path, exitFile string, from int64, poll time.Duration) (int, error) {
	if exitFile == "" {
		return 0, errors.New("--exit is required")
	}
	var f *os.File
	buf := make([]byte, 64<<10)
	for {
		if f == nil {
			var err error
			f, err = os.Open(path)
			if errors.Is(err, os.ErrNotExist) {
				if _, serr := os.Stat(exitFile); serr == nil {
					return exitCode(exitFile)
				}
				time.Sleep(poll)
				continue
			}
			if err != nil {
				return 0, err
			}
			defer f.Close()
			if _, err := f.Seek(from, io.SeekStart); err != nil {
				return 0, err
			}
		}
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return 0, werr
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if _, serr := os.Stat(exitFile); serr == nil {
			// The exit file is written after the last output: one more
			// read drains what landed in between.
			for {
				n, _ := f.Read(buf)
				if n == 0 {
					break
				}
				if _, werr := w.Write(buf[:n]); werr != nil {
					return 0, werr
				}
			}
			return exitCode(exitFile)
		}
		time.Sleep(poll)
	}
}

func exitCode(exitFile string) (int, error) {
	b, err := os.ReadFile(exitFile)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if strings.HasPrefix(s, "signal ") {
		return ExitKilled, nil
	}
	code, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("exit file says %q", s)
	}
	if code < 0 || code > 255 {
		code = 255
	}
	return code, nil
}
