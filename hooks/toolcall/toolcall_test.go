package toolcall

import (
	"strings"
	"testing"
)

func TestParseInputRejects(t *testing.T) {
	for name, in := range map[string]string{
		"empty":          ``,
		"not json":       `hello`,
		"array":          `[]`,
		"null":           `null`,
		"string":         `"x"`,
		"truncated":      `{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"`,
		"trailing":       `{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{}} {}`,
		"no event":       `{"tool_name":"Bash","tool_input":{}}`,
		"other event":    `{"hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{}}`,
		"event null":     `{"hook_event_name":null,"tool_name":"Bash","tool_input":{}}`,
		"no tool":        `{"hook_event_name":"PreToolUse","tool_input":{}}`,
		"empty tool":     `{"hook_event_name":"PreToolUse","tool_name":"","tool_input":{}}`,
		"tool number":    `{"hook_event_name":"PreToolUse","tool_name":7,"tool_input":{}}`,
		"no input":       `{"hook_event_name":"PreToolUse","tool_name":"Bash"}`,
		"input null":     `{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":null}`,
		"input array":    `{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":["ls"]}`,
		"input string":   `{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":"ls"}`,
		"cwd not string": `{"hook_event_name":"PreToolUse","tool_name":"Bash","cwd":1,"tool_input":{}}`,
	} {
		if _, err := ParseInput(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted %q", name, in)
		}
	}
}
