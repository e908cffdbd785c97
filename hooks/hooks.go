// Package hooks holds the Claude Code hooks that run inside a box as
// `sbx hook <name>`: guard (the driver lane's containment: no control-plane
// edits, no credential exfiltration, no runtime reconfiguration, no deleting
// system directories), ask-gate (no tool calls while a question waits for
// the operator) and read-only (the side-question lane: nothing that writes).
//
// Claude Code runs a PreToolUse hook with a JSON object on stdin. Exit 0 lets
// the call through; exit 2 blocks it and shows stderr to the model. Any other
// exit status, or a hook that times out, is treated as a hook failure and the
// call goes ahead — so every hook here fails closed: unparsable input, an
// unknown shape, an unknown tool, an I/O error or an internal panic all end
// in exit 2 with a one-line reason.
//
// guard and read-only decide Bash commands on the mvdan.cc/sh/v3 syntax
// tree, never on the command text: guard walks it in order with quotes and
// escapes removed, following the variables, functions and directories the
// command sets and every nested shell (bash -c, eval, xargs, find -exec,
// sudo, env, timeout, ...), and denies what it cannot resolve where it
// matters (a program named by command output, code fed to a shell through
// a pipe). File tools are judged on the path with .., // and symlinks
// resolved. guard is a second line: the box holds no long-lived secret and
// reaches only the gateway.
//
// Every decision is appended as one JSON line (Entry) to
// /workspace/.agent.hooks.log, or SBX_HOOK_LOG, so denials can be shown with
// the transcript. SBX_WORKSPACE (or --workspace) moves the workspace; HOME
// is the agent's home (default /root). Inside a box the hook process runs
// as the agent and only forwards: the root guest agent's Broker decides
// with its own workspace, log and state, and logs who asked (broker.go).
//
// The core installs them by absolute path (a relative "sbx" could be
// shadowed earlier in PATH) in the box's root-owned managed settings,
// /etc/claude-code/managed-settings.json, with allowManagedHooksOnly: the
// guard, then "lane" (ask-gate in the driver's lane, read-only in the side
// lane):
//
//	{"allowManagedHooksOnly": true, "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
//	  {"type": "command", "command": "/usr/local/bin/sbx hook guard", "timeout": 30},
//	  {"type": "command", "command": "/usr/local/bin/sbx hook lane", "timeout": 30}]}]}}
//
// This package holds the command, the root broker and the ask-gate; the
// lanes are its subpackages: guard, readonly (the read-only lane), shell
// (what both know about bash: the parser, the bounds, a word's description)
// and toolcall (the hook input and the decision every lane returns). They
// run in the guest and import no server package.
package hooks

// Exit statuses Claude Code understands. Nothing else may leave a hook.
const (
	ExitAllow = 0
	ExitDeny  = 2
)
