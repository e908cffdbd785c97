package hooks

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// selfDeadline ends a hook that has not decided in time with a deny: Claude
// Code lets the call through when a hook times out (60 s by default).
const selfDeadline = 20 * time.Second

// NewCommand is `sbx hook NAME`, run by Claude Code inside a box.
//
// It parses its own flags and exits itself: a cobra error would end in the
// CLI's exit 1, which Claude Code treats as allow.
func NewCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "hook [--broker=SOCKET] [--workspace DIR] [--log FILE] NAME",
		Short: "Decide a Claude Code PreToolUse call inside a box (" + strings.Join(Names(), ", ") + ")",
		Long: `Reads Claude Code's PreToolUse JSON on stdin and exits 0 (allow) or 2 (deny,
reason on stderr). Every decision is appended as a JSON line to the workspace's
` + LogFile + ` (or SBX_HOOK_LOG / --log). The workspace is /workspace unless
SBX_WORKSPACE or --workspace says otherwise. Anything unexpected is a deny.

Inside a box the hook does not decide itself: it forwards the payload to the
root guest agent's broker at ` + BrokerSocket + `, which decides with its own
workspace, log and state (those flags and variables are then ignored) and
logs the asking process's uid and pid. Where there is no broker socket (a
host), the hook decides in its own process.

Hooks: guard (the driver lane: deny control-plane edits and reads, credential
exfiltration, runtime reconfiguration and deleting system directories, deciding
Bash on its parsed syntax tree), ask-gate (deny every call while .agent.question
is pending, except writing it), read-only (the side-question lane: deny every
tool that writes).`,
		DisableFlagParsing: true,
		SilenceUsage:       true,
		SilenceErrors:      true,
		Run: func(cmd *cobra.Command, args []string) {
			timer := time.AfterFunc(selfDeadline, func() {
				fmt.Fprintf(os.Stderr, "sbx hook: no decision within %v; denying\n", selfDeadline)
				os.Exit(ExitDeny)
			})
			// --broker=PATH (first) names another broker socket, for tests
			// and benchmarks on a host; never the environment, which the
			// agent's own settings can set for the hooks Claude Code runs.
			socket := BrokerSocket
			if len(args) > 0 && strings.HasPrefix(args[0], "--broker=") {
				socket, args = strings.TrimPrefix(args[0], "--broker="), args[1:]
			}
			code := MainBroker(socket, args, cmd.InOrStdin(), cmd.ErrOrStderr(), os.Getenv)
			timer.Stop()
			if code != ExitAllow {
				os.Exit(code)
			}
		},
	}
}
