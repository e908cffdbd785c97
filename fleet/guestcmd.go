package fleet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"sbx.dev/sbx/vm/agent"
)

// The commands the core runs in a box's guest for itself (the diff, the
// agent's setup, an interrupt, the MCP config), as opposed to a caller's
// Exec: their output is the core's to read, never a front's.

// run executes a command in a machine and returns its combined output; a
// non-zero exit is an error.
func run(ctx context.Context, m Machines, vmName string, req agent.ExecRequest) (string, error) {
	return runIn(ctx, m, vmName, req, nil)
}

// runStdin is run with stdin (files written into the guest outside
// /workspace, never through argv or the environment).
func runStdin(ctx context.Context, m Machines, vmName string, argv []string, stdin []byte) (string, error) {
	return runIn(ctx, m, vmName, agent.ExecRequest{Argv: argv}, stdin)
}

func runIn(ctx context.Context, m Machines, vmName string, req agent.ExecRequest, stdin []byte) (string, error) {
	p, err := m.Exec(ctx, vmName, req)
	if err != nil {
		return "", err
	}
	if len(stdin) > 0 {
		if _, err := p.Stdin().Write(stdin); err != nil {
			return "", err
		}
	}
	p.Stdin().Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, io.LimitReader(p.Stderr(), 1<<20)); close(done) }()
	var so bytes.Buffer
	io.Copy(&so, io.LimitReader(p.Stdout(), 64<<20))
	<-done
	st, err := p.Wait()
	if err != nil {
		return so.String(), err
	}
	if st.Code != 0 {
		return so.String() + out.String(), &exitError{fmt.Sprintf("%s exited %d%s", req.Argv[0], st.Code, sig(st.Signal))}
	}
	return so.String(), nil
}

// exitError is a command in a box that ran and failed: what the box holds
// decided it, unlike a failure to reach the box.
type exitError struct{ msg string }

func (e *exitError) Error() string { return e.msg }

// lastLine is the last non-empty line of a command's output, clipped, for
// a message.
func lastLine(out string) string {
	out = strings.TrimSpace(out)
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	if r := []rune(out); len(r) > 200 {
		out = string(r[:200]) + "…"
	}
	return out
}

func sig(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
