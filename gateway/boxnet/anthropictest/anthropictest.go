// Package anthropictest is a scripted Messages API upstream for tests: it
// answers POST /v1/messages (streamed as server-sent events exactly like the
// real API, or as one JSON message) and POST /v1/messages/count_tokens,
// checks the API key (x-api-key, or Authorization: Bearer), and replays a conversation turn by turn.
//
// The turn answered is the number of assistant messages in the request's
// history, so the server is stateless and a client that retries gets the same
// answer. The default script is the tool-use round trip an agent makes:
//
//	turn 0: text, then a tool_use block (Bash {"command": "ls"}), stop_reason tool_use
//	turn 1: (after the client sent the tool_result) a final text, stop_reason end_turn
//
//	up := anthropictest.New(t, anthropictest.Options{APIKey: "sk-ant-test"})
//	// ANTHROPIC_BASE_URL=up.URL, ANTHROPIC_API_KEY=sk-ant-test
//
// The stream follows the real event sequence: message_start (usage with
// input_tokens and output_tokens 1), per block content_block_start,
// content_block_delta (text_delta, or input_json_delta with partial_json
// pieces starting with an empty one), content_block_stop, a ping after the
// first block starts, message_delta (stop_reason and cumulative usage) and
// message_stop.
package anthropictest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Block is one content block of a scripted assistant message: a text block,
// or a tool_use block when ToolName is set.
type Block struct {
	Text      string
	ToolName  string
	ToolID    string // "" means toolu_sbxtest_<turn>_<index>
	ToolInput any    // marshalled to JSON; nil means {}
}

// Turn is one scripted assistant message. Its stop_reason is "tool_use" when
// it holds a tool_use block, else "end_turn".
type Turn struct {
	Blocks []Block
}

// DefaultScript is text then a Bash tool_use, then after the tool_result a
// final text.
func DefaultScript() []Turn {
	return []Turn{
		{Blocks: []Block{
			{Text: "I'll list the files in the working directory."},
			{ToolName: "Bash", ToolInput: map[string]any{"command": "ls", "description": "List files"}},
		}},
		{Blocks: []Block{{Text: "The directory listing is done."}}},
	}
}

// Options configure a Server.
type Options struct {
	// APIKey is the x-api-key every request must carry; "" accepts any
	// request, with or without a key.
	APIKey string
	// Script is the conversation; nil means DefaultScript. Requests past the
	// end get the last turn.
	Script []Turn
	// ChunkSize is the size of each text_delta and input_json_delta piece;
	// 0 means 12 bytes.
	ChunkSize int
	// Delay is slept between events, to make streaming observable.
	Delay time.Duration
}

// Request is one request the server answered.
type Request struct {
	Method, Path string
	APIKey       string
	Model        string
	Stream       bool
	Turn         int      // the turn answered, -1 when none
	HasTools     bool     // the request offered tools
	System       string   // the system prompt's text
	Prompt       string   // the text blocks of the last message
	ToolResults  []string // text of the tool_result blocks in the last message
	Status       int
	Usage        Usage // what the response reported
}

// Usage is what a response reported.
type Usage struct{ InputTokens, OutputTokens int64 }

// Server is a scripted Messages API on a loopback port.
type Server struct {
	// URL is the base URL (ANTHROPIC_BASE_URL), http://127.0.0.1:PORT.
	URL string

	opts Options
	mu   sync.Mutex
	reqs []Request
	seq  int
}

// New starts a server that stops when the test ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	s := NewServer(opts)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// NewServer returns the handler without starting a listener, for callers
// that serve it themselves (URL stays empty).
func NewServer(opts Options) *Server {
	if opts.Script == nil {
		opts.Script = DefaultScript()
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = 12
	}
	return &Server{opts: opts}
}

// Requests returns the requests answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r)
}

func (s *Server) nextID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}

// message is the part of a request body the server reads.
type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type request struct {
	System   json.RawMessage   `json:"system"`
	Model    string            `json:"model"`
	Stream   bool              `json:"stream"`
	Messages []message         `json:"messages"`
	Tools    []json.RawMessage `json:"tools"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}

// apiKey is the x-api-key header or, as the API also accepts (and newer
// SDKs send), an Authorization: Bearer credential.
func apiKey(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	if k, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return k
	}
	return ""
}

// ServeHTTP answers the Messages API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := Request{Method: r.Method, Path: r.URL.Path, APIKey: apiKey(r), Turn: -1}
	w.Header().Set("Request-Id", fmt.Sprintf("req_sbxtest_%d", s.nextID()))
	if s.opts.APIKey != "" && rec.APIKey != s.opts.APIKey {
		rec.Status = http.StatusUnauthorized
		s.record(rec)
		writeError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return
	}
	if r.Method != http.MethodPost || (r.URL.Path != "/v1/messages" && r.URL.Path != "/v1/messages/count_tokens") {
		rec.Status = http.StatusNotFound
		s.record(rec)
		writeError(w, http.StatusNotFound, "not_found_error", "Not found: "+r.URL.Path)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	var req request
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || req.Model == "" || len(req.Messages) == 0 {
		rec.Status = http.StatusBadRequest
		s.record(rec)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "request needs model and messages")
		return
	}
	rec.Model, rec.Stream, rec.HasTools = req.Model, req.Stream, len(req.Tools) > 0
	last := req.Messages[len(req.Messages)-1]
	rec.ToolResults = toolResults(last)
	rec.System, rec.Prompt = text(req.System), text(last.Content)
	input := max(int64(len(body)/4), 1)
	if r.URL.Path == "/v1/messages/count_tokens" {
		rec.Status = http.StatusOK
		rec.Usage.InputTokens = input
		s.record(rec)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int64{"input_tokens": input})
		return
	}
	turnIdx := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			turnIdx++
		}
	}
	turnIdx = min(turnIdx, len(s.opts.Script)-1)
	rec.Turn = turnIdx
	turn := s.opts.Script[turnIdx]
	if !rec.HasTools {
		// A side request (a title, a quota probe) offers no tools: answer
		// with the turn's text only.
		turn = textOnly(turn)
	}
	blocks := s.render(turn, turnIdx)
	output := int64(0)
	for _, b := range blocks {
		output += max(int64(len(b.text)+len(b.input))/4, 1)
	}
	rec.Usage = Usage{InputTokens: input, OutputTokens: output}
	rec.Status = http.StatusOK
	s.record(rec)
	msgID := fmt.Sprintf("msg_sbxtest_%d", s.nextID())
	stop := "end_turn"
	for _, b := range blocks {
		if b.typ == "tool_use" {
			stop = "tool_use"
		}
	}
	if req.Stream {
		s.stream(w, req.Model, msgID, blocks, stop, input, output)
		return
	}
	content := make([]map[string]any, 0, len(blocks))
	for _, b := range blocks {
		if b.typ == "text" {
			content = append(content, map[string]any{"type": "text", "text": b.text})
		} else {
			content = append(content, map[string]any{"type": "tool_use", "id": b.id, "name": b.name, "input": json.RawMessage(b.input)})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": req.Model,
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": usage(input, output),
	})
}

type rendered struct {
	typ, text, id, name, input string
}

func (s *Server) render(t Turn, turn int) []rendered {
	out := make([]rendered, 0, len(t.Blocks))
	for i, b := range t.Blocks {
		if b.ToolName == "" {
			out = append(out, rendered{typ: "text", text: b.Text})
			continue
		}
		in := []byte("{}")
		if b.ToolInput != nil {
			var err error
			if in, err = json.Marshal(b.ToolInput); err != nil {
				in = []byte("{}")
			}
		}
		id := b.ToolID
		if id == "" {
			id = fmt.Sprintf("toolu_sbxtest_%d_%d", turn, i)
		}
		out = append(out, rendered{typ: "tool_use", id: id, name: b.ToolName, input: string(in)})
	}
	return out
}

func textOnly(t Turn) Turn {
	var out Turn
	for _, b := range t.Blocks {
		if b.ToolName == "" {
			out.Blocks = append(out.Blocks, b)
		}
	}
	if len(out.Blocks) == 0 {
		out.Blocks = []Block{{Text: "OK"}}
	}
	return out
}

func usage(input, output int64) map[string]any {
	return map[string]any{
		"input_tokens": input, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		"output_tokens": output, "service_tier": "standard",
	}
}

// stream writes the turn as the real API's event stream.
func (s *Server) stream(w http.ResponseWriter, model, id string, blocks []rendered, stop string, input, output int64) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	event := func(name string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if fl != nil {
			fl.Flush()
		}
		if s.opts.Delay > 0 {
			time.Sleep(s.opts.Delay)
		}
	}
	event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": usage(input, 1),
	}})
	for i, b := range blocks {
		if b.typ == "text" {
			event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
		} else {
			event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": b.id, "name": b.name, "input": map[string]any{}}})
		}
		if i == 0 {
			event("ping", map[string]any{"type": "ping"})
		}
		if b.typ == "text" {
			for _, c := range chunks(b.text, s.opts.ChunkSize) {
				event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": c}})
			}
		} else {
			event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": ""}})
			for _, c := range chunks(b.input, s.opts.ChunkSize) {
				event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": c}})
			}
		}
		event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"input_tokens": input, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": output},
	})
	event("message_stop", map[string]any{"type": "message_stop"})
}

// chunks splits s into pieces of at most n bytes without splitting a UTF-8
// sequence.
func chunks(s string, n int) []string {
	var out []string
	for len(s) > n {
		i := n
		for i > 0 && i < len(s) && s[i]&0xC0 == 0x80 {
			i--
		}
		if i == 0 {
			i = n
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// text returns the text of a string or of an array of content blocks.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var sb strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			sb.WriteString(p.Text)
		}
	}
	return sb.String()
}

// toolResults returns the text of the tool_result blocks of a message.
func toolResults(m message) []string {
	var blocks []struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(m.Content, &blocks) != nil {
		return nil
	}
	var out []string
	for _, b := range blocks {
		if b.Type == "tool_result" {
			out = append(out, text(b.Content))
		}
	}
	return out
}
