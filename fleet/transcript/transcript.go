// Package transcript turns Claude Code's `-p --output-format stream-json
// --verbose` output into a readable transcript: what the assistant said, the
// tools it called (name and a one-line summary of the input), what they
// returned (truncated, with the error flag), and the final result (cost,
// turns, duration, and the session id for `--resume`).
//
// The stream is one JSON object per line, each with a "type": "system"
// (subtype "init" first, then status lines), "assistant" (message.content
// holds "text", "thinking" and "tool_use" blocks), "user" (message.content
// holds "tool_result" blocks) and "result" last. Field names follow the CLI's
// own output as recorded in testdata/ (see testdata/README.md).
//
// The stream comes from inside a box and is untrusted: a line that is not
// JSON, a type this package does not know, or a known type of an unexpected
// shape becomes a KindRaw event holding the line. Nothing panics, nothing is
// dropped, and Format strips terminal control characters.
package transcript

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Kind says what an Event is.
type Kind string

const (
	KindInit       Kind = "init"        // session start: SessionID, Model, Cwd, Tools
	KindSystem     Kind = "system"      // another system line (status, hooks, ...): Subtype
	KindText       Kind = "text"        // assistant text: Text
	KindThinking   Kind = "thinking"    // assistant thinking: Text (often empty: the CLI withholds it)
	KindToolCall   Kind = "tool_call"   // ToolID, Tool, Summary, Input
	KindToolResult Kind = "tool_result" // ToolID, Tool (when its call was seen), Output, Truncated, IsError
	KindUser       Kind = "user"        // user text echoed in the stream: Text
	KindResult     Kind = "result"      // Result
	KindRaw        Kind = "raw"         // anything else, verbatim: Raw
)

// Event is one step of the transcript. Which fields are set depends on Kind.
type Event struct {
	Kind      Kind   `json:"kind"`
	SessionID string `json:"session_id,omitempty"`
	Subtype   string `json:"subtype,omitempty"`

	Model string   `json:"model,omitempty"`
	Cwd   string   `json:"cwd,omitempty"`
	Tools []string `json:"tools,omitempty"`

	Text string `json:"text,omitempty"`

	ToolID  string          `json:"tool_id,omitempty"`
	Tool    string          `json:"tool,omitempty"`
	Summary string          `json:"summary,omitempty"`
	Input   json.RawMessage `json:"input,omitempty"`

	Output    string `json:"output,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	IsError   bool   `json:"is_error,omitempty"`

	Result *Result `json:"result,omitempty"`

	Raw string `json:"raw,omitempty"`
}

// Result is the run's final line.
type Result struct {
	Subtype     string        `json:"subtype"` // "success", "error_max_turns", "error_during_execution", ...
	IsError     bool          `json:"is_error"`
	Text        string        `json:"text,omitempty"` // the final answer
	CostUSD     float64       `json:"cost_usd"`
	Turns       int           `json:"turns"`
	Duration    time.Duration `json:"duration"`
	APIDuration time.Duration `json:"api_duration"`
	SessionID   string        `json:"session_id"`
	Usage       Usage         `json:"usage"`
	Denials     int           `json:"denials,omitempty"` // permission_denials
}

// Usage is the token count of the run.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

// Limits on what an event carries.
const (
	// MaxOutput bounds a tool result's Output in bytes; MaxOutputLines in
	// lines. Beyond either, Truncated is set.
	MaxOutput      = 2000
	MaxOutputLines = 20
	// MaxSummary bounds a tool call's one-line Summary, in runes.
	MaxSummary = 160
	// MaxLine bounds one stream line; a longer line becomes a truncated
	// KindRaw event (the CLI prints whole file contents in tool results,
	// so lines of megabytes are normal, beyond this they are not).
	MaxLine = 16 << 20
	// MaxRaw bounds the Raw text kept for a line that did not parse.
	MaxRaw = 4096
)

// Parser turns lines into events. It remembers tool calls so a result can
// name its tool, and the session id. Not safe for concurrent use.
type Parser struct {
	tools     map[string]string // tool_use id → name, for results
	sessionID string
}

// NewParser returns a Parser with no state.
func NewParser() *Parser { return &Parser{tools: map[string]string{}} }

// SessionID is the latest session id seen (from init, any message or the
// result): what `--resume` needs.
func (p *Parser) SessionID() string { return p.sessionID }

// maxTools bounds the call-id memory; a stream with more open calls than
// this loses only the tool names of the oldest results.
const maxTools = 4096

type line struct {
	Type          string          `json:"type"`
	Subtype       string          `json:"subtype"`
	SessionID     string          `json:"session_id"`
	Message       json.RawMessage `json:"message"`
	Model         string          `json:"model"`
	Cwd           string          `json:"cwd"`
	Tools         []string        `json:"tools"`
	IsError       bool            `json:"is_error"`
	Result        string          `json:"result"`
	TotalCostUSD  float64         `json:"total_cost_usd"`
	NumTurns      int             `json:"num_turns"`
	DurationMS    float64         `json:"duration_ms"`
	DurationAPIMS float64         `json:"duration_api_ms"`
	Usage         *Usage          `json:"usage"`
	Denials       []any           `json:"permission_denials"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// Line parses one line of the stream (without its newline) into events: one
// per content block for messages, exactly one otherwise. A blank line gives
// none.
func (p *Parser) Line(b []byte) []Event {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	var l line
	if err := json.Unmarshal(b, &l); err != nil || l.Type == "" {
		return []Event{raw(b)}
	}
	if l.SessionID != "" {
		p.sessionID = l.SessionID
	}
	switch l.Type {
	case "system":
		if l.Subtype == "init" {
			return []Event{{Kind: KindInit, SessionID: l.SessionID, Subtype: l.Subtype, Model: l.Model, Cwd: l.Cwd, Tools: l.Tools}}
		}
		return []Event{{Kind: KindSystem, SessionID: l.SessionID, Subtype: l.Subtype, Raw: clip(string(b), MaxRaw)}}
	case "assistant", "user":
		evs, ok := p.message(l)
		if !ok {
			return []Event{raw(b)}
		}
		return evs
	case "result":
		r := &Result{
			Subtype: l.Subtype, IsError: l.IsError, Text: l.Result, CostUSD: l.TotalCostUSD, Turns: l.NumTurns,
			Duration:    time.Duration(l.DurationMS * float64(time.Millisecond)),
			APIDuration: time.Duration(l.DurationAPIMS * float64(time.Millisecond)),
			SessionID:   l.SessionID, Denials: len(l.Denials),
		}
		if l.Usage != nil {
			r.Usage = *l.Usage
		}
		if r.Subtype != "" && r.Subtype != "success" {
			r.IsError = true
		}
		return []Event{{Kind: KindResult, SessionID: l.SessionID, Subtype: l.Subtype, Result: r}}
	}
	return []Event{raw(b)}
}

func (p *Parser) message(l line) ([]Event, bool) {
	var m message
	if len(l.Message) == 0 || json.Unmarshal(l.Message, &m) != nil {
		return nil, false
	}
	// A user message may be a bare string ("[Request interrupted by user]").
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		kind := KindUser
		if l.Type == "assistant" {
			kind = KindText
		}
		return []Event{{Kind: kind, SessionID: l.SessionID, Text: s}}, true
	}
	var blocks []block
	if json.Unmarshal(m.Content, &blocks) != nil {
		return nil, false
	}
	var evs []Event
	for _, bl := range blocks {
		e := Event{SessionID: l.SessionID}
		switch {
		case bl.Type == "text" && l.Type == "assistant":
			e.Kind, e.Text = KindText, bl.Text
		case bl.Type == "text":
			e.Kind, e.Text = KindUser, bl.Text
		case bl.Type == "thinking" || bl.Type == "redacted_thinking":
			e.Kind, e.Text = KindThinking, bl.Thinking
		case bl.Type == "tool_use" || bl.Type == "server_tool_use":
			e.Kind, e.ToolID, e.Tool, e.Input = KindToolCall, bl.ID, bl.Name, bl.Input
			e.Summary = Summarize(bl.Name, bl.Input)
			if len(p.tools) >= maxTools {
				clear(p.tools)
			}
			if bl.ID != "" {
				p.tools[bl.ID] = bl.Name
			}
		case bl.Type == "tool_result":
			e.Kind, e.ToolID, e.IsError = KindToolResult, bl.ToolUseID, bl.IsError
			e.Tool = p.tools[bl.ToolUseID]
			delete(p.tools, bl.ToolUseID)
			e.Output, e.Truncated = truncate(resultText(bl.Content))
		default:
			raw, _ := json.Marshal(bl)
			e.Kind, e.Raw = KindRaw, clip(string(raw), MaxRaw)
		}
		evs = append(evs, e)
	}
	return evs, true
}

// resultText flattens a tool_result's content: a string, or a list of
// blocks of which text is kept and anything else named.
func resultText(c json.RawMessage) string {
	if len(c) == 0 || string(c) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(c, &s) == nil {
		return s
	}
	var blocks []block
	if json.Unmarshal(c, &blocks) == nil {
		parts := make([]string, 0, len(blocks))
		for _, b := range blocks {
			if b.Type == "text" {
				parts = append(parts, b.Text)
			} else {
				parts = append(parts, "["+b.Type+"]")
			}
		}
		return strings.Join(parts, "\n")
	}
	return string(c)
}

func truncate(s string) (string, bool) {
	cut := false
	if n := nthIndex(s, '\n', MaxOutputLines); n >= 0 {
		s, cut = s[:n], true
	}
	if len(s) > MaxOutput {
		s, cut = strings.ToValidUTF8(s[:MaxOutput], ""), true
	}
	return s, cut
}

// nthIndex is the index of the nth occurrence of c in s, or -1.
func nthIndex(s string, c byte, n int) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			n--
			if n == 0 {
				return i
			}
		}
	}
	return -1
}

func raw(b []byte) Event { return Event{Kind: KindRaw, Raw: clip(string(b), MaxRaw)} }

// clip bounds s to max bytes on a rune boundary, marking the cut.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}

// Summarize is a one-line description of a tool call's input: the command
// for Bash, the path for file tools, the pattern for searches, and compact
// JSON for tools it does not know.
func Summarize(tool string, input json.RawMessage) string {
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	str := func(k string) string {
		s, _ := in[k].(string)
		return s
	}
	var s string
	switch tool {
	case "Bash":
		s = str("command")
	case "Read", "Edit", "MultiEdit":
		s = str("file_path")
	case "Write":
		s = str("file_path")
		if c, ok := in["content"].(string); ok {
			s += fmt.Sprintf(" (%d bytes)", len(c))
		}
	case "NotebookEdit":
		s = str("notebook_path")
	case "Glob", "Grep":
		s = str("pattern")
		if p := str("path"); p != "" {
			s += " in " + p
		}
	case "WebFetch":
		s = str("url")
	case "WebSearch":
		s = str("query")
	case "Task", "Agent":
		s = str("description")
	case "TodoWrite":
		if todos, ok := in["todos"].([]any); ok {
			s = fmt.Sprintf("%d todos", len(todos))
		}
	}
	if s == "" && len(input) > 0 {
		var buf bytes.Buffer
		if json.Compact(&buf, input) == nil {
			s = buf.String()
		} else {
			s = string(input)
		}
	}
	return oneLine(s, MaxSummary)
}

// oneLine collapses whitespace (newlines included) and bounds s in runes.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

// Read parses a whole stream, calling fn for each event in order. A line
// longer than MaxLine becomes a truncated KindRaw event and reading goes on.
// It stops at the first error from r (other than EOF) or from fn.
func Read(r io.Reader, fn func(Event) error) error {
	p := NewParser()
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		over := len(buf) > MaxLine
		if !over {
			buf = append(buf, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(buf) > 0 {
			var evs []Event
			if over || len(buf) > MaxLine {
				evs = []Event{raw(buf[:MaxRaw])}
				evs[0].Truncated = true
			} else {
				evs = p.Line(buf)
			}
			for _, e := range evs {
				if ferr := fn(e); ferr != nil {
					return ferr
				}
			}
		}
		buf = buf[:0]
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read stream-json: %w", err)
		}
	}
}

// Events reads a whole stream into a slice.
func Events(r io.Reader) ([]Event, error) {
	var evs []Event
	err := Read(r, func(e Event) error { evs = append(evs, e); return nil })
	return evs, err
}
