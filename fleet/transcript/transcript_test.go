package transcript

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func readFixture(t *testing.T, name string) []Event {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := Events(f)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func kinds(evs []Event) string {
	var ks []string
	for _, e := range evs {
		ks = append(ks, string(e.Kind))
	}
	return strings.Join(ks, " ")
}

func TestRecordedTextRun(t *testing.T) {
	evs := readFixture(t, "resume1.jsonl")
	if got := kinds(evs); got != "init text result" {
		t.Fatalf("kinds = %s", got)
	}
	init := evs[0]
	if init.SessionID != "81898c55-fde9-4d44-b1f5-fbd77cd4fef6" || init.Model != "claude-sonnet-4-6" || len(init.Tools) != 28 {
		t.Fatalf("init = %+v", init)
	}
	if evs[1].Text != "OK" {
		t.Fatalf("text = %q", evs[1].Text)
	}
	r := evs[2].Result
	want := Result{
		Subtype: "success", Text: "OK", CostUSD: 0.043551200000000005, Turns: 1,
		Duration: 1425 * time.Millisecond, APIDuration: 2492 * time.Millisecond,
		SessionID: "81898c55-fde9-4d44-b1f5-fbd77cd4fef6",
		Usage:     Usage{InputTokens: 2, OutputTokens: 4, CacheReadInputTokens: 15934, CacheCreationInputTokens: 6354},
	}
	if r == nil || *r != want {
		t.Fatalf("result = %+v\nwant     %+v", r, want)
	}
	if got := Format(evs[2]); got != "■ done in 1.4s, 1 turn, $0.0436, session 81898c55-fde9-4d44-b1f5-fbd77cd4fef6" {
		t.Fatalf("Format(result) = %q", got)
	}
}

// TestRecordedResume: the resumed run reports the same session id, which is
// what a follow-up passes to --resume.
func TestRecordedResume(t *testing.T) {
	one, two := readFixture(t, "resume1.jsonl"), readFixture(t, "resume2.jsonl")
	if one[2].Result.SessionID != two[0].SessionID || two[2].Result.SessionID != two[0].SessionID {
		t.Fatal("session id changed across --resume")
	}
	if two[1].Text != "umbrella" || two[2].Result.CostUSD != 0.0068814 {
		t.Fatalf("resume2: %+v %+v", two[1], two[2].Result)
	}
}

func TestRecordedToolUse(t *testing.T) {
	evs := readFixture(t, "tool-use.jsonl")
	if got := kinds(evs); got != "init system thinking text tool_call tool_result text result" {
		t.Fatalf("kinds = %s", got)
	}
	call, res := evs[4], evs[5]
	if call.Tool != "Read" || call.ToolID != "toolu_019rKGcJPhtHa7YDUATrU3gv" || call.Summary != "/tmp/probe/note.md" {
		t.Fatalf("call = %+v", call)
	}
	if res.Tool != "Read" || res.ToolID != call.ToolID || res.IsError || res.Output != "1\t# Note\n2\t\n3\tHello world.\n4\t" || res.Truncated {
		t.Fatalf("result = %+v", res)
	}
	var lines []string
	for _, e := range evs {
		if s := Format(e); s != "" {
			lines = append(lines, s)
		}
	}
	want := strings.Join([]string{
		"▶ session b96cf965-8bfd-4959-9102-fe31e7e1867d, model claude-haiku-4-5-20251001, 3 tools",
		"● I'll read the file and then append 'ok' to it.",
		"→ Read /tmp/probe/note.md",
		"← Read: 1\t# Note\n  2\t\n  3\tHello world.\n  4\t",
		"● Done. I've appended 'ok' to note.md.",
		"■ done in 0s, 0 turns, $0.0000, session b96cf965-8bfd-4959-9102-fe31e7e1867d",
	}, "\n")
	if got := strings.Join(lines, "\n"); got != want {
		t.Fatalf("transcript:\n%s\nwant:\n%s", got, want)
	}
}

func TestRecordedDenial(t *testing.T) {
	evs := readFixture(t, "tool-denied.jsonl")
	if len(evs) != 1 || evs[0].Kind != KindToolResult || !evs[0].IsError || evs[0].Output != "spike: denied by probe" {
		t.Fatalf("events = %+v", evs)
	}
	if got := Format(evs[0]); got != "✗ result: spike: denied by probe" {
		t.Fatalf("Format = %q", got)
	}
}

func TestLines(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		check func(t *testing.T, evs []Event)
	}{
		{"not json", []string{"npm WARN deprecated"}, func(t *testing.T, evs []Event) {
			if len(evs) != 1 || evs[0].Kind != KindRaw || evs[0].Raw != "npm WARN deprecated" {
				t.Fatalf("%+v", evs)
			}
		}},
		{"unknown type", []string{`{"type":"stream_event","event":{}}`}, func(t *testing.T, evs []Event) {
			if evs[0].Kind != KindRaw || !strings.Contains(evs[0].Raw, "stream_event") {
				t.Fatalf("%+v", evs)
			}
		}},
		{"json not an object", []string{`[1,2]`, `"s"`, `null`, `42`}, func(t *testing.T, evs []Event) {
			if len(evs) != 4 || kinds(evs) != "raw raw raw raw" {
				t.Fatalf("%+v", evs)
			}
		}},
		{"wrong field type", []string{`{"type":"assistant","message":{"content":5}}`, `{"type":"result","num_turns":"x"}`}, func(t *testing.T, evs []Event) {
			if kinds(evs) != "raw raw" {
				t.Fatalf("%+v", evs)
			}
		}},
		{"blank lines", []string{"", "   ", "\t"}, func(t *testing.T, evs []Event) {
			if len(evs) != 0 {
				t.Fatalf("%+v", evs)
			}
		}},
		{"several blocks in one message", []string{`{"type":"assistant","message":{"content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"go test ./...\n  -run X"}},{"type":"tool_use","id":"t2","name":"Grep","input":{"pattern":"TODO","path":"src"}}]}}`,
			`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"x.go:1"},{"type":"image"}]},{"type":"tool_result","tool_use_id":"t1","content":"FAIL","is_error":true}]}}`},
			func(t *testing.T, evs []Event) {
				if kinds(evs) != "text tool_call tool_call tool_result tool_result" {
					t.Fatalf("%s", kinds(evs))
				}
				if evs[1].Summary != "go test ./... -run X" || evs[2].Summary != "TODO in src" {
					t.Fatalf("summaries %q %q", evs[1].Summary, evs[2].Summary)
				}
				if evs[3].Tool != "Grep" || evs[3].Output != "x.go:1\n[image]" || evs[4].Tool != "Bash" || !evs[4].IsError {
					t.Fatalf("results %+v %+v", evs[3], evs[4])
				}
			}},
		{"user string content", []string{`{"type":"user","message":{"role":"user","content":"[Request interrupted by user]"}}`}, func(t *testing.T, evs []Event) {
			if evs[0].Kind != KindUser || evs[0].Text != "[Request interrupted by user]" {
				t.Fatalf("%+v", evs)
			}
		}},
		{"unknown block", []string{`{"type":"assistant","message":{"content":[{"type":"future_block","x":1}]}}`}, func(t *testing.T, evs []Event) {
			if evs[0].Kind != KindRaw || !strings.Contains(evs[0].Raw, "future_block") {
				t.Fatalf("%+v", evs)
			}
		}},
		{"error result", []string{`{"type":"result","subtype":"error_max_turns","is_error":false,"num_turns":10,"total_cost_usd":1.5,"duration_ms":60000,"session_id":"s"}`}, func(t *testing.T, evs []Event) {
			r := evs[0].Result
			if !r.IsError || r.Turns != 10 || r.Duration != time.Minute {
				t.Fatalf("%+v", r)
			}
			if got := Format(evs[0]); got != "■ failed (error_max_turns) in 1m0s, 10 turns, $1.5000, session s" {
				t.Fatalf("%q", got)
			}
		}},
		{"result without a call", []string{`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"nope","content":null}]}}`}, func(t *testing.T, evs []Event) {
			if evs[0].Tool != "" || evs[0].Output != "" {
				t.Fatalf("%+v", evs)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewParser()
			var evs []Event
			for _, l := range tc.lines {
				evs = append(evs, p.Line([]byte(l))...)
			}
			tc.check(t, evs)
		})
	}
}

func TestTruncation(t *testing.T) {
	long := strings.Repeat("é", MaxOutput) // 2 bytes each: the cut falls inside a rune
	many := strings.Repeat("line\n", 100)
	for _, tc := range []struct {
		name, content string
		wantLen       int
	}{
		{"bytes", long, MaxOutput},
		{"lines", many, MaxOutputLines*5 - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := json.Marshal(tc.content)
			evs := NewParser().Line([]byte(`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"x","content":` + string(c) + `}]}}`))
			e := evs[0]
			if !e.Truncated || len(e.Output) > tc.wantLen || !strings.HasPrefix(tc.content, e.Output) {
				t.Fatalf("len %d truncated %v", len(e.Output), e.Truncated)
			}
			if !utf8.ValidString(e.Output) {
				t.Fatal("cut inside a rune")
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		tool, input, want string
	}{
		{"Bash", `{"command":"ls -la","description":"List files"}`, "ls -la"},
		{"Read", `{"file_path":"/w/a.go"}`, "/w/a.go"},
		{"Edit", `{"file_path":"/w/a.go","old_string":"x","new_string":"y"}`, "/w/a.go"},
		{"Write", `{"file_path":"/w/b.txt","content":"hello"}`, "/w/b.txt (5 bytes)"},
		{"Glob", `{"pattern":"**/*.go"}`, "**/*.go"},
		{"Grep", `{"pattern":"func main","path":"cmd"}`, "func main in cmd"},
		{"WebFetch", `{"url":"https://go.dev","prompt":"x"}`, "https://go.dev"},
		{"TodoWrite", `{"todos":[{},{}]}`, "2 todos"},
		{"mcp__x__y", `{"a": 1,  "b":"c"}`, `{"a":1,"b":"c"}`},
		{"Bash", `{"command":5}`, `{"command":5}`},
		{"Bash", `not json`, "not json"},
		{"Bash", ``, ""},
	} {
		if got := Summarize(tc.tool, json.RawMessage(tc.input)); got != tc.want {
			t.Errorf("Summarize(%s, %s) = %q, want %q", tc.tool, tc.input, got, tc.want)
		}
	}
	long := Summarize("Bash", json.RawMessage(`{"command":"`+strings.Repeat("x", 500)+`"}`))
	if n := len([]rune(long)); n != MaxSummary || !strings.HasSuffix(long, "…") {
		t.Fatalf("long summary %d runes", n)
	}
}

// TestFormatStripsEscapes: tool output from the box cannot drive the
// operator's terminal.
func TestFormatStripsEscapes(t *testing.T) {
	evs := NewParser().Line([]byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"hi \u001b]0;pwned\u0007 \u001b[2J there\u009b"}]}}`))
	got := Format(evs[0])
	if strings.ContainsAny(got, "\x1b\x07\u009b") {
		t.Fatalf("escape survived: %q", got)
	}
}

func TestReadLongLines(t *testing.T) {
	big := strings.Repeat("a", 200<<10) // longer than the reader's buffer, shorter than MaxLine
	c, _ := json.Marshal(big)
	huge := bytes.Repeat([]byte("z"), MaxLine+10)
	var in bytes.Buffer
	in.WriteString(`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"x","content":` + string(c) + `}]}}` + "\n")
	in.Write(huge)
	in.WriteString("\n")
	in.WriteString(`{"type":"result","subtype":"success","num_turns":2}`) // no final newline
	evs, err := Events(&in)
	if err != nil {
		t.Fatal(err)
	}
	if kinds(evs) != "tool_result raw result" {
		t.Fatalf("kinds = %s", kinds(evs))
	}
	if !evs[0].Truncated || evs[0].Output != big[:MaxOutput] {
		t.Fatal("big result not truncated right")
	}
	if !evs[1].Truncated || len(evs[1].Raw) > MaxRaw+4 {
		t.Fatalf("huge line: truncated %v, %d bytes kept", evs[1].Truncated, len(evs[1].Raw))
	}
	if evs[2].Result.Turns != 2 {
		t.Fatal("line after the huge one lost")
	}
}

func FuzzLine(f *testing.F) {
	for _, name := range []string{"resume1.jsonl", "tool-use.jsonl", "tool-denied.jsonl"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range bytes.Split(b, []byte("\n")) {
			f.Add(l)
		}
	}
	f.Add([]byte(`{"type":"user","message":{"content":[{"type":"tool_result","content":[{"type":"text","text":"\u009b"}]}]}}`))
	f.Add([]byte(`{"type":"assistant","message":{"content":"x"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		p := NewParser()
		evs := p.Line(line)
		// A line that is not JSON is never dropped.
		if len(bytes.TrimSpace(line)) > 0 && !json.Valid(line) && (len(evs) != 1 || evs[0].Kind != KindRaw) {
			t.Fatalf("invalid line %q gave %+v, want one raw event", line, evs)
		}
		for _, e := range evs {
			s := Format(e)
			if strings.ContainsAny(s, "\x1b\x07\x00") {
				t.Fatalf("Format kept a control character: %q", s)
			}
			if e.Kind == KindToolResult && (len(e.Output) > MaxOutput) {
				t.Fatalf("output %d bytes", len(e.Output))
			}
			if e.Kind == KindRaw && len(e.Raw) > MaxRaw+4 {
				t.Fatalf("raw %d bytes", len(e.Raw))
			}
		}
		var in bytes.Buffer
		in.Write(line)
		in.WriteByte('\n')
		in.Write(line)
		if _, err := Events(&in); err != nil {
			t.Fatal(err)
		}
	})
}

func BenchmarkRead(b *testing.B) {
	data, err := os.ReadFile("testdata/tool-use.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := Read(bytes.NewReader(data), func(e Event) error { _ = Format(e); return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
