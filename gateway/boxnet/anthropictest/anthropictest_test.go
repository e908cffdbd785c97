package anthropictest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"sbx.dev/sbx/gateway/boxnet/anthropictest"
)

func client(url, key string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(url), option.WithAPIKey(key), option.WithMaxRetries(0))
}

var bashTool = anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
	Properties: map[string]any{"command": map[string]any{"type": "string"}},
}, "Bash")

// The official SDK, streaming, accumulates the scripted tool-use round trip:
// the stream is shaped like the real API's or the SDK would reject it.
func TestToolUseRoundTripWithOfficialSDK(t *testing.T) {
	up := anthropictest.New(t, anthropictest.Options{APIKey: "sk-ant-test-key"})
	c := client(up.URL, "sk-ant-test-key")
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model:     "claude-sbx-test",
		MaxTokens: 1024,
		Tools:     []anthropic.ToolUnionParam{bashTool},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("list the files"))},
	}
	first, events := streamed(t, c, params)
	// The SDK drops pings; TestRawEventSequence sees them.
	wantPrefix := []string{"message_start", "content_block_start", "content_block_delta"}
	if !slices.Equal(events[:3], wantPrefix) || events[len(events)-2] != "message_delta" || events[len(events)-1] != "message_stop" {
		t.Fatalf("event sequence = %v", events)
	}
	if first.StopReason != "tool_use" || len(first.Content) != 2 {
		t.Fatalf("first turn: stop %q, %d blocks", first.StopReason, len(first.Content))
	}
	if first.Content[0].Type != "text" || first.Content[0].Text != "I'll list the files in the working directory." {
		t.Fatalf("text block = %+v", first.Content[0])
	}
	tool := first.Content[1]
	var input map[string]string
	if tool.Type != "tool_use" || tool.Name != "Bash" || json.Unmarshal(tool.Input, &input) != nil || input["command"] != "ls" {
		t.Fatalf("tool block = %+v (input %s)", tool, tool.Input)
	}
	if first.Usage.InputTokens == 0 || first.Usage.OutputTokens <= 1 {
		t.Fatalf("usage = %+v", first.Usage)
	}

	params.Messages = append(params.Messages, first.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(tool.ID, "README.md\nmain.go", false)))
	second, _ := streamed(t, c, params)
	if second.StopReason != "end_turn" || len(second.Content) != 1 || second.Content[0].Text != "The directory listing is done." {
		t.Fatalf("second turn = %+v", second)
	}
	reqs := up.Requests()
	if len(reqs) != 2 || reqs[0].Prompt != "list the files" || reqs[1].Turn != 1 || !slices.Equal(reqs[1].ToolResults, []string{"README.md\nmain.go"}) {
		t.Fatalf("requests = %+v", reqs)
	}

	// Not streamed: the same turn as one JSON message.
	msg, err := c.Messages.New(ctx, params)
	if err != nil || msg.Content[0].Text != "The directory listing is done." || msg.Usage.OutputTokens == 0 {
		t.Fatalf("non-streamed: %v %+v", err, msg)
	}
}

// The raw stream: event names and the data's type agree, a ping follows the
// first content_block_start, every event ends with a blank line, and the tool
// input arrives as input_json_delta pieces starting with an empty one.
func TestRawEventSequence(t *testing.T) {
	up := anthropictest.New(t, anthropictest.Options{APIKey: "k", ChunkSize: 5})
	body := `{"model":"m","max_tokens":10,"stream":true,"tools":[{"name":"Bash","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest(http.MethodPost, up.URL+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Api-Key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	raw, _ := io.ReadAll(resp.Body)
	var names []string
	var partial []string
	for _, ev := range strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(ev, "\n")
		name, ok1 := strings.CutPrefix(name, "event: ")
		data, ok2 := strings.CutPrefix(data, "data: ")
		if !ok || !ok1 || !ok2 {
			t.Fatalf("malformed event %q", ev)
		}
		var d struct {
			Type  string `json:"type"`
			Delta struct {
				Type        string  `json:"type"`
				PartialJSON *string `json:"partial_json"`
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &d); err != nil || d.Type != name {
			t.Fatalf("event %s data %s: %v", name, data, err)
		}
		if d.Delta.Type == "input_json_delta" {
			partial = append(partial, *d.Delta.PartialJSON)
		}
		names = append(names, name)
	}
	if !slices.Equal(names[:3], []string{"message_start", "content_block_start", "ping"}) || strings.Count(strings.Join(names, " "), "ping") != 1 {
		t.Fatalf("events = %v", names)
	}
	if len(partial) < 3 || partial[0] != "" || strings.Join(partial, "") != `{"command":"ls","description":"List files"}` {
		t.Fatalf("partial_json pieces = %q", partial)
	}
}

func streamed(t *testing.T, c anthropic.Client, p anthropic.MessageNewParams) (anthropic.Message, []string) {
	t.Helper()
	stream := c.Messages.NewStreaming(context.Background(), p)
	var msg anthropic.Message
	var events []string
	for stream.Next() {
		ev := stream.Current()
		events = append(events, string(ev.Type))
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("accumulate %s: %v", ev.Type, err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return msg, events
}

func TestWrongKeyIsRefused(t *testing.T) {
	up := anthropictest.New(t, anthropictest.Options{APIKey: "sk-ant-right"})
	c := client(up.URL, "sk-ant-wrong")
	_, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "claude-sbx-test", MaxTokens: 10,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Fatalf("err = %v, want a 401 API error", err)
	}
	if r := up.Requests(); len(r) != 1 || r[0].Status != http.StatusUnauthorized || r[0].APIKey != "sk-ant-wrong" {
		t.Fatalf("requests = %+v", r)
	}
}

// A request without tools (Claude Code's title and quota probes) gets the
// turn's text only, never a tool_use it did not offer.
func TestSideRequestWithoutToolsGetsText(t *testing.T) {
	up := anthropictest.New(t, anthropictest.Options{})
	c := client(up.URL, "any")
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "claude-sbx-test", MaxTokens: 10,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("title?"))},
	})
	if err != nil || len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.StopReason != "end_turn" {
		t.Fatalf("%v %+v", err, msg)
	}
}
