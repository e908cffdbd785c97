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
// This package runs in the guest and imports no server package.
package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
)

// Exit statuses Claude Code understands. Nothing else may leave a hook.
const (
	ExitAllow = 0
	ExitDeny  = 2
)

// maxInput bounds what a hook reads from stdin. A Write of a large file
// carries its whole content; past this the call is denied, not truncated.
const maxInput = 64 << 20

// Input is the part of Claude Code's PreToolUse payload the hooks use.
type Input struct {
	SessionID      string
	TranscriptPath string
	Cwd            string
	HookEventName  string
	ToolName       string
	// ToolInput holds the tool's arguments by exact key. Keys are matched
	// exactly, never case-insensitively as encoding/json does for structs:
	// {"command":"rm -rf x","Command":"ls"} must not read as "ls".
	ToolInput map[string]json.RawMessage
}

// ParseInput reads one PreToolUse payload. It refuses anything but a single
// JSON object with a PreToolUse event, a tool name and an object tool_input.
func ParseInput(r io.Reader) (*Input, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("read hook input: %w", err)
	}
	if len(data) > maxInput {
		return nil, fmt.Errorf("hook input larger than %d bytes", maxInput)
	}
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("hook input is not a JSON object: %w", err)
	}
	if top == nil {
		return nil, errors.New("hook input is null, want a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("hook input has data after the JSON object")
	}
	in := &Input{}
	for _, f := range []struct {
		key      string
		dst      *string
		required bool
	}{
		{"session_id", &in.SessionID, false},
		{"transcript_path", &in.TranscriptPath, false},
		{"cwd", &in.Cwd, false},
		{"hook_event_name", &in.HookEventName, true},
		{"tool_name", &in.ToolName, true},
	} {
		s, ok, err := stringField(top, f.key)
		if err != nil {
			return nil, err
		}
		if !ok && f.required {
			return nil, fmt.Errorf("hook input has no %q", f.key)
		}
		*f.dst = s
	}
	if in.HookEventName != "PreToolUse" {
		return nil, fmt.Errorf("hook_event_name %q: these hooks only decide PreToolUse", in.HookEventName)
	}
	if in.ToolName == "" {
		return nil, errors.New("hook input has an empty tool_name")
	}
	raw, ok := top["tool_input"]
	if !ok {
		return nil, errors.New("hook input has no \"tool_input\"")
	}
	if err := json.Unmarshal(raw, &in.ToolInput); err != nil || in.ToolInput == nil {
		return nil, fmt.Errorf("tool_input of %s is not a JSON object", in.ToolName)
	}
	return in, nil
}

// stringField reads key from m as a JSON string. A present key holding
// anything else (null included) is an error, not an empty string.
func stringField(m map[string]json.RawMessage, key string) (string, bool, error) {
	raw, ok := m[key]
	if !ok {
		return "", false, nil
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return "", true, fmt.Errorf("%q is not a JSON string", key)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", true, fmt.Errorf("%q: %w", key, err)
	}
	return s, true, nil
}

// toolString reads a required string argument of the tool call.
func (in *Input) toolString(key string) (string, error) {
	s, ok, err := stringField(in.ToolInput, key)
	if err != nil {
		return "", fmt.Errorf("%s input: %w", in.ToolName, err)
	}
	if !ok {
		return "", fmt.Errorf("%s input has no %q", in.ToolName, key)
	}
	return s, nil
}

// toolPath reads a file path argument and makes it absolute and clean,
// resolving a relative path against the session's cwd.
func (in *Input) toolPath(key string) (string, error) {
	p, err := in.toolString(key)
	if err != nil {
		return "", err
	}
	if p == "" {
		return "", fmt.Errorf("%s input has an empty %q", in.ToolName, key)
	}
	if !filepath.IsAbs(p) {
		if !filepath.IsAbs(in.Cwd) {
			return "", fmt.Errorf("%s path %q is relative and cwd %q is not absolute", in.ToolName, p, in.Cwd)
		}
		p = filepath.Join(in.Cwd, p)
	}
	return filepath.Clean(p), nil
}

// Decision is a hook's verdict on one tool call.
type Decision struct {
	Allow  bool
	Reason string
}

func allow(reason string) Decision { return Decision{Allow: true, Reason: reason} }

func deny(format string, args ...any) Decision {
	return Decision{Reason: fmt.Sprintf(format, args...)}
}
