package pid1

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"sbx.dev/sbx/hooks"
	"sbx.dev/sbx/vm/agent"
)

// StartHookBroker serves the agent's hooks their decisions from root
// (hooks.Broker) on hooks.BrokerSocket until ctx ends: the decision log in
// the workspace and the guard's session state stay root's. Both the QEMU
// guest's init and the Kubernetes pod agent run it.
func StartHookBroker(ctx context.Context, workspace string, log *slog.Logger) error {
	ln, err := hooks.ListenBroker(hooks.BrokerSocket)
	if err != nil {
		return err
	}
	b := hooks.Broker{Workspace: workspace, Home: agent.AgentHome, Logger: log}
	go func() {
		if err := b.Serve(ctx, ln); err != nil {
			log.Error("hook broker stopped; hooks now deny every call", "err", err)
		}
	}()
	return nil
}

// hardening are kernel settings for a box whose agent is an unprivileged
// user beside root's processes: links and files in sticky directories
// (/tmp, the workspace's top) cannot steer root's opens; kernel addresses
// and the log stay root's; no unprivileged BPF.
var hardening = map[string]string{
	"fs/protected_symlinks":            "1",
	"fs/protected_hardlinks":           "1",
	"fs/protected_regular":             "2",
	"fs/protected_fifos":               "2",
	"kernel/kptr_restrict":             "2",
	"kernel/dmesg_restrict":            "1",
	"kernel/unprivileged_bpf_disabled": "1",
	"kernel/yama/ptrace_scope":         "2",
}

// harden applies hardening; a setting the kernel lacks is skipped, one it
// refuses is an error.
func harden(log *slog.Logger) error {
	for k, v := range hardening {
		err := os.WriteFile("/proc/sys/"+k, []byte(v), 0)
		switch {
		case errors.Is(err, os.ErrNotExist):
			log.Debug("sysctl absent", "key", k)
		case err != nil:
			return fmt.Errorf("sysctl %s=%s: %w", k, v, err)
		}
	}
	return nil
}
