package fleet

// The operator's setup step: root work a project needs (packages,
// toolchains, services) runs in the box after its repos are copied in and
// before the agent gets the workspace — on the operator's word, never the
// agent's, who runs unprivileged and cannot install system packages.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"sbx.dev/sbx/vm/agent"
)

// Limits of the setup step.
const (
	MaxSetupBytes = 64 << 10
	setupTimeout  = 20 * time.Minute
)

// checkSetup validates a delegation's setup script ("" is none).
func checkSetup(script string) error {
	switch {
	case len(script) > MaxSetupBytes:
		return fmt.Errorf("setup script is %d bytes (max %d): %w", len(script), MaxSetupBytes, ErrInvalid)
	case !utf8.ValidString(script) || strings.ContainsRune(script, 0):
		return fmt.Errorf("setup script is not valid UTF-8 text: %w", ErrInvalid)
	}
	return nil
}

// runSetup runs the setup script as root in /workspace with the box's
// network environment (its egress proxy and allow-list hold for it as for
// the agent), its output into the box's log. A non-zero exit, or one that
// outlives setupTimeout, fails the box.
func (f *Fleet) runSetup(ctx context.Context, rec record, script string) error {
	if strings.TrimSpace(script) == "" {
		return nil
	}
	env := []string{"HOME=/root", "SBX_BOX=" + rec.Name, "CI=1", "DEBIAN_FRONTEND=noninteractive"}
	if f.net != nil {
		env = append(env, netEnv()...)
	}
	return f.runLogged(ctx, rec, "setup", "root", setupTimeout, agent.ExecRequest{
		// One stream, in order: stderr joins stdout. -e: the first failing
		// command ends the step.
		Argv: []string{"/bin/sh", "-c", `exec 2>&1; exec /bin/sh -ec "$1"`, "setup", script},
		Env:  env,
	})
}

// runLogged runs one step of a box's start (setup, install) in the box,
// its output into the box's log between a header naming the step and who
// runs it and a line saying how it ended. A non-zero exit, or one that
// outlives timeout, is ErrConflict.
func (f *Fleet) runLogged(ctx context.Context, rec record, step, who string, timeout time.Duration, req agent.ExecRequest) error {
	log, err := f.logs.open(rec.Name)
	if err != nil {
		return err
	}
	_, _ = log.Write([]byte("── " + step + " · " + who + " ──\n"))
	began := f.now().Add(-time.Second)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, err := f.vm.Exec(ctx, rec.VM, req)
	if err != nil {
		return fmt.Errorf("%s step: %w", step, vmErr(err))
	}
	p.Stdin().Close()
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	_, _ = io.Copy(log, p.Stdout())
	st, err := p.Wait()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s step: still running after %v: %w", step, timeout, ErrConflict)
	case err != nil:
		return fmt.Errorf("%s step: %w", step, vmErr(err))
	case st.Code != 0 || st.Signal != "":
		_, _ = fmt.Fprintf(log, "── %s exited %d%s ──\n", step, st.Code, sig(st.Signal))
		why := ""
		if r := f.refusedDuring(context.WithoutCancel(ctx), rec.Name, rec.Owner, began); r != "" {
			_, _ = fmt.Fprintf(log, "sbx: %s\n", r)
			why = "; " + r
		}
		return fmt.Errorf("%s step exited %d%s (its output is in the box's log)%s: %w", step, st.Code, sig(st.Signal), why, ErrConflict)
	}
	_, _ = log.Write([]byte("── " + step + " done ──\n"))
	return nil
}
