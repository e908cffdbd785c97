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
	log, err := f.logs.open(rec.Name)
	if err != nil {
		return err
	}
	_, _ = log.Write([]byte("── setup · root ──\n"))
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	env := []string{"HOME=/root", "SBX_BOX=" + rec.Name, "CI=1", "DEBIAN_FRONTEND=noninteractive"}
	if f.net != nil {
		env = append(env, netEnv()...)
	}
	p, err := f.vm.Exec(ctx, rec.VM, agent.ExecRequest{
		// One stream, in order: stderr joins stdout. -e: the first failing
		// command ends the step.
		Argv: []string{"/bin/sh", "-c", `exec 2>&1; exec /bin/sh -ec "$1"`, "setup", script},
		Env:  env,
	})
	if err != nil {
		return fmt.Errorf("setup step: %w", vmErr(err))
	}
	p.Stdin().Close()
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	_, _ = io.Copy(log, p.Stdout())
	st, err := p.Wait()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("setup step: still running after %v: %w", setupTimeout, ErrConflict)
	case err != nil:
		return fmt.Errorf("setup step: %w", vmErr(err))
	case st.Code != 0 || st.Signal != "":
		_, _ = fmt.Fprintf(log, "── setup exited %d%s ──\n", st.Code, sig(st.Signal))
		return fmt.Errorf("setup step exited %d%s (its output is in the box's log): %w", st.Code, sig(st.Signal), ErrConflict)
	}
	_, _ = log.Write([]byte("── setup done ──\n"))
	return nil
}
