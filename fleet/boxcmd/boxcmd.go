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
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
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
	root.AddCommand(runCommand(), followCommand(), scriptAgentCommand())
	return root
}

func runCommand() *cobra.Command {
	var out, exitFile, dir string
	var foreground bool
	cmd := &cobra.Command{
		Use:   "run --out FILE --exit FILE [--dir DIR] -- ARGV...",
		Short: "Start ARGV detached, its output appended to FILE, its status written to the exit file",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" || exitFile == "" {
				return errors.New("--out and --exit are required")
			}
			if foreground {
				return supervise(out, exitFile, dir, args)
			}
			return detach(cmd, out, exitFile, dir, args)
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "output file (appended)")
	cmd.Flags().StringVar(&exitFile, "exit", "", "exit status file, written when the command ends")
	cmd.Flags().StringVar(&dir, "dir", "", "working directory")
	cmd.Flags().BoolVar(&foreground, "foreground", false, "supervise in this process (the host runs it so, as an exec that outlives its connection)")
	return cmd
}

// detach re-runs itself with --foreground in a new session with no
// inherited stdio, and returns once that supervisor wrote its pid file: the
// host's exec then ends at once while the agent runs on.
func detach(cmd *cobra.Command, out, exitFile, dir string, argv []string) error {
	if err := os.MkdirAll(filepath.Dir(exitFile), 0o700); err != nil {
		return err
	}
	_ = os.Remove(exitFile)
	pidFile := exitFile + ".pid"
	_ = os.Remove(pidFile)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"box", "run", "--foreground", "--out", out, "--exit", exitFile}
	if dir != "" {
		args = append(args, "--dir", dir)
	}
	args = append(append(args, "--"), argv...)
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	c := exec.Command(self, args...)
	c.Stdin, c.Stdout, c.Stderr = null, null, null
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		return fmt.Errorf("start supervisor: %w", err)
	}
	_ = c.Process.Release()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
			fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(string(b)))
			return nil
		}
		if _, err := os.Stat(exitFile); err == nil {
			b, _ := os.ReadFile(exitFile)
			return fmt.Errorf("command ended at once: %s", strings.TrimSpace(string(b)))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.New("supervisor did not start within 10s")
}

// supervise runs argv with its output appended to out and writes its status
// to exitFile ("0", "1", ... or "signal killed") atomically when it ends.
func supervise(out, exitFile, dir string, argv []string) error {
	for _, p := range []string{out, exitFile} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return writeExit(exitFile, fmt.Sprintf("error %v", err))
	}
	defer f.Close()
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdout, c.Stderr, c.Dir = f, f, dir
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		fmt.Fprintf(f, "sbx: cannot start %s: %v\n", argv[0], err)
		return writeExit(exitFile, "127")
	}
	if err := atomicWrite(exitFile+".pid", strconv.Itoa(c.Process.Pid)); err != nil {
		_ = c.Process.Kill()
		return err
	}
	err = c.Wait()
	status := "0"
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			status = "signal " + ws.Signal().String()
		} else {
			status = strconv.Itoa(ee.ExitCode())
		}
	} else if err != nil {
		status = fmt.Sprintf("error %v", err)
	}
	_ = f.Sync()
	return writeExit(exitFile, status)
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
