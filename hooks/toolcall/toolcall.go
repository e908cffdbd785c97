// Package toolcall is what a hook decides on and what it decides: the part
// of Claude Code's PreToolUse payload the hooks read, parsed strictly, and
// the verdict. It is a leaf so that every lane (guard, read-only, ask-gate)
// and the command that runs them share one shape without importing each
// other.
package toolcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
)

// MaxInput bounds what a hook reads from stdin. A Write of a large file
// carries its whole content; past this the call is denied, not truncated.
const MaxInput = 64 << 20

// LogFile is the decision log's name in the workspace (one JSON line per
// decision): the command writes it and the guard protects it.
const LogFile = ".agent.hooks.log"

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
	data, err := io.ReadAll(io.LimitReader(r, MaxInput+1))
	if err != nil {
		return nil, fmt.Errorf("read hook input: %w", err)
	}
	if len(data) > MaxInput {
		return nil, fmt.Errorf("hook input larger than %d bytes", MaxInput)
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
		s, ok, err := StringField(top, f.key)
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

// StringField reads key from m as a JSON string. A present key holding
// anything else (null included) is an error, not an empty string.
func StringField(m map[string]json.RawMessage, key string) (string, bool, error) {
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

// ToolString reads a required string argument of the tool call.
func (in *Input) ToolString(key string) (string, error) {
	s, ok, err := StringField(in.ToolInput, key)
	if err != nil {
		return "", fmt.Errorf("%s input: %w", in.ToolName, err)
	}
	if !ok {
		return "", fmt.Errorf("%s input has no %q", in.ToolName, key)
	}
	return s, nil
}

// ToolPath reads a file path argument and makes it absolute and clean,
// resolving a relative path against the session's cwd.
func (in *Input) ToolPath(key string) (string, error) {
	p, err := in.ToolString(key)
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

// Allow lets the call through, saying why.
func Allow(reason string) Decision { return Decision{Allow: true, Reason: reason} }

// Deny blocks the call with a reason the model is shown.
func Deny(format string, args ...any) Decision {
	return Decision{Reason: fmt.Sprintf(format, args...)}
}
