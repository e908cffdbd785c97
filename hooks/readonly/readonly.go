// Package readonly is the side-question lane's hook: tools that only read,
// and Bash commands that cannot write, checked against an allow-list of
// programs (with their own rules for sed, awk and git) over the parsed
// syntax tree. The guard asks it whether a program only reads.
package readonly

import "sbx.dev/sbx/hooks/toolcall"

// readOnlyTools are the tools the side-question lane may use without further
// checks: they read files and directories and nothing else. BashOutput reads
// the output of a background shell the lane itself started.
//
// Denied on purpose (anything not listed is denied too): Write, Edit,
// MultiEdit, NotebookEdit (they write); WebFetch and WebSearch (the network:
// a hijacked lane could send out what it reads); Task (a subagent is another
// session to reason about); TodoWrite, KillShell, ExitPlanMode; every MCP
// tool (mcp__*), whose effects this hook cannot know.
var readOnlyTools = map[string]bool{
	"Read":         true,
	"Glob":         true,
	"Grep":         true,
	"LS":           true,
	"NotebookRead": true,
	"BashOutput":   true,
}

// Decide decides for the side-question lane: allow tools that only read,
// and Bash commands that CheckBash accepts; deny the rest.
func Decide(in *toolcall.Input) toolcall.Decision {
	if readOnlyTools[in.ToolName] {
		return toolcall.Allow("read-only tool")
	}
	if in.ToolName != "Bash" {
		return toolcall.Deny("This is the read-only side-question lane: the %s tool is not allowed here. "+
			"Use Read, Glob, Grep, LS or read-only Bash commands, and answer the question.", in.ToolName)
	}
	cmd, err := in.ToolString("command")
	if err != nil {
		return toolcall.Deny("read-only lane: %v", err)
	}
	if err := CheckBash(cmd); err != nil {
		return toolcall.Deny("This is the read-only side-question lane and this command could change something: %v. "+
			"Only read-only programs (ls, cat, grep, rg, find, git log/diff/show/status, sed -n, awk, jq, ...) "+
			"without output redirection are allowed.", err)
	}
	return toolcall.Allow("read-only command")
}
