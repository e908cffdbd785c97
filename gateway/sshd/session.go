package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	"charm.land/ssh"
	"github.com/spf13/cobra"

	"sbx.dev/sbx/internal/cliusage"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/internal/termtext"
	"sbx.dev/sbx/keys"
)

// acquire counts a session against the user's cap.
func (s *Server) acquire(user string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[user] >= s.MaxSessionsPerUser {
		return nil, false
	}
	s.sessions[user]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.sessions[user]--; s.sessions[user] <= 0 {
			delete(s.sessions, user)
		}
	}, true
}

// call is one command invocation: who, over which session.
type call struct {
	srv   *Server
	sess  ssh.Session
	user  keys.User
	actor keys.Actor
	// exit is the status of a command that ran a process (attach, exec).
	exit int
}

// usagePrefix is how a user reaches this server: "ssh -p PORT HOST".
func (c *call) usagePrefix() string {
	host, port := "localhost", "22"
	if c.sess == nil {
		return "ssh " + host // Commands builds the tree without a session
	}
	if tcp, ok := c.sess.LocalAddr().(*net.TCPAddr); ok {
		port = strconv.Itoa(tcp.Port)
		if !tcp.IP.IsLoopback() && !tcp.IP.IsUnspecified() {
			host = tcp.IP.String()
		}
	}
	if port == "22" {
		return "ssh " + host
	}
	return "ssh -p " + port + " " + host
}

// run executes args through a fresh cobra root and returns the exit code.
//
// This is the one place command output is made safe for the terminal:
// everything a command prints, and its error, passes termtext on the way
// to the client. Box text (questions, logs, patches, errors quoting it) is
// hostile and may hold escape sequences. Only attach and exec write their
// process's bytes raw, to the channel itself (runProcess), as scp and sftp
// do file bytes.
func (c *call) run(ctx context.Context, args []string) int {
	stdout, stderr := termtext.NewWriter(c.sess), termtext.NewWriter(c.sess.Stderr())
	defer func() { _ = stdout.Flush(); _ = stderr.Flush() }()
	root := c.root()
	root.SetArgs(args)
	root.SetIn(c.sess)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		writeError(stderr, err, cmd != nil && errorAsJSON(cmd, args))
		return errkind.ExitCode(err)
	}
	return c.exit
}

// writeError reports a failed command on stderr: one "error:" line (and
// the usage line after a wrong command line), or with --json one object
// {"error", "kind", and "usage" for a wrong command line}.
func writeError(stderr io.Writer, err error, asJSON bool) {
	msg := oneLine(err.Error())
	var usage string
	var ue *cliusage.Error
	if errors.As(err, &ue) {
		usage = usageLine(ue.Cmd)
	}
	if asJSON {
		kind := "other"
		switch k := errkind.Of(err); {
		case usage != "":
			kind = "usage"
		case k != nil:
			kind = k.Name()
		}
		out := map[string]string{"error": msg, "kind": kind}
		if usage != "" {
			out["usage"] = usage
		}
		_ = writeJSONLine(stderr, out)
		return
	}
	fmt.Fprintln(stderr, "error: "+msg)
	if usage != "" {
		fmt.Fprintln(stderr, "usage: "+usage)
	}
}

// errorAsJSON reports whether the command line asked for JSON: the command's
// --json flag, or "--json" among the arguments when parsing them failed.
func errorAsJSON(cmd *cobra.Command, args []string) bool {
	if wantJSON(cmd) {
		return true
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}

// accessAdmin marks commands only admins may run.
const accessAdmin = "admin"

func needsAdmin(cmd *cobra.Command) bool {
	for ; cmd != nil; cmd = cmd.Parent() {
		if cmd.Annotations["access"] == accessAdmin {
			return true
		}
	}
	return false
}
