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
		Use:   "hook [--workspace DIR] [--log FILE] NAME",
		Short: "Decide a Claude Code PreToolUse call inside a box (" + strings.Join(Names(), ", ") + ")",
		Long: `Reads Claude Code's PreToolUse JSON on stdin and exits 0 (allow) or 2 (deny,
reason on stderr). Every decision is appended as a JSON line to the workspace's
` + LogFile + ` (or SBX_HOOK_LOG / --log). The workspace is /workspace unless
SBX_WORKSPACE or --workspace says otherwise. Anything unexpected is a deny.

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
			code := Main(args, cmd.InOrStdin(), cmd.ErrOrStderr(), os.Getenv)
			timer.Stop()
			if code != ExitAllow {
				os.Exit(code)
			}
		},
	}
}
