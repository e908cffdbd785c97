package boxnet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"sbx.dev/sbx/gateway/boxnet/anthropictest"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func sdkClient(base string) anthropic.Client {
	// The box's key is a placeholder: the gateway replaces it.
	return anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey("sk-box-placeholder"), option.WithMaxRetries(0))
}

var sdkParams = anthropic.MessageNewParams{
	Model:     "claude-sbx-test",
	MaxTokens: 256,
	Tools: []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"command": map[string]any{"type": "string"}},
	}, "Bash")},
	Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("list the files"))},
}

// rawModel posts a Messages request to the endpoint and returns the status
// and the decoded error body, if any.
func rawModel(t *testing.T, base string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-box-placeholder")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error.Type, e.Error.Message
}

// The official SDK in the box talks to the endpoint as to the API: the
// upstream gets the real key, the usage of streamed and plain responses is
// counted, and past the request budget the box gets a 429 rate_limit_error
// that never reaches the upstream.
func TestModelEndpointRequestBudget(t *testing.T) {
	up := anthropictest.New(t, anthropictest.Options{APIKey: "sk-ant-real"})
	pol := newPolicy()
	pol.set("m", BoxPolicy{Model: &ModelRoute{Upstream: mustURL(t, up.URL), APIKey: "sk-ant-real", MaxRequests: 2}})
	s := newTestServer(Config{Policy: pol, PrivateUpstreams: trust(t, up.URL)})
	base := "http://" + serveBox(t, s, "m") + "/model"
	c := sdkClient(base)

	stream := c.Messages.NewStreaming(context.Background(), sdkParams)
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil || msg.StopReason != "tool_use" {
		t.Fatalf("streamed: %v %+v", err, msg)
	}
	first := up.Requests()[0]
	if first.APIKey != "sk-ant-real" || !first.Stream {
		t.Fatalf("upstream saw %+v", first)
	}
	if u := pol.used("m"); u.Requests != 1 || u.InputTokens != first.Usage.InputTokens || u.OutputTokens != first.Usage.OutputTokens || u.OutputTokens == 0 {
		t.Fatalf("used after a streamed request %+v, upstream reported %+v", u, first.Usage)
	}

	plain, err := c.Messages.New(context.Background(), sdkParams)
	if err != nil || plain.Usage.OutputTokens == 0 {
		t.Fatalf("plain: %v %+v", err, plain)
	}
	if u := pol.used("m"); u.Requests != 2 || u.OutputTokens != first.Usage.OutputTokens+plain.Usage.OutputTokens {
		t.Fatalf("used after a plain request %+v", u)
	}

	status, typ, message := rawModel(t, base)
	if status != http.StatusTooManyRequests || typ != "rate_limit_error" || !strings.Contains(message, "request budget (2 of 2 requests)") {
		t.Fatalf("over budget: %d %s %q", status, typ, message)
	}
	if _, err := c.Messages.New(context.Background(), sdkParams); err == nil || !strings.Contains(err.Error(), "429") {
		t.Fatalf("SDK over budget: %v", err)
	}
	if n := len(up.Requests()); n != 2 {
		t.Fatalf("%d requests reached the upstream, want 2", n)
	}
	ds := pol.audited(KindModel)
	if last := ds[len(ds)-1]; last.Verdict != Deny || !strings.Contains(last.Reason, "request budget") || last.Box != "m" {
		t.Fatalf("decision = %+v", last)
	}
}

func TestModelEndpointTokenBudgetAndRouting(t *testing.T) {
	up := anthropictest.New(t, anthropictest.Options{APIKey: "sk-ant-real"})
	pol := newPolicy()
	pol.set("m", BoxPolicy{Model: &ModelRoute{Upstream: mustURL(t, up.URL), APIKey: "sk-ant-real", MaxTokens: 10}})
	pol.set("none", BoxPolicy{})
	s := newTestServer(Config{Policy: pol, PrivateUpstreams: trust(t, up.URL)})
	base := "http://" + serveBox(t, s, "m") + "/model"
	if status, typ, msg := rawModel(t, base); status != http.StatusOK {
		t.Fatalf("first request: %d %s %s", status, typ, msg)
	}
	if u := pol.used("m"); u.Tokens() < 10 {
		t.Fatalf("used %+v: the test needs the first request to exhaust the budget", u)
	}
	status, typ, msg := rawModel(t, base)
	if status != http.StatusTooManyRequests || typ != "rate_limit_error" || !strings.Contains(msg, "token budget") {
		t.Fatalf("over the token budget: %d %s %q", status, typ, msg)
	}
	if n := len(up.Requests()); n != 1 {
		t.Fatalf("%d upstream requests", n)
	}
	// A box without a model route gets the API's not-found shape.
	if status, typ, _ := rawModel(t, "http://"+serveBox(t, s, "none")+"/model"); status != http.StatusNotFound || typ != "not_found_error" {
		t.Fatalf("no route: %d %s", status, typ)
	}
	// The gateway's own paths, asked through the proxy (HTTP_PROXY without
	// NO_PROXY), are served locally, not treated as egress.
	req, _ := http.NewRequest(http.MethodPost, "http://"+GatewayHost+"/model/v1/messages", strings.NewReader(`{}`))
	tr := &http.Transport{Proxy: http.ProxyURL(mustURL(t, base[:strings.LastIndex(base, "/model")]))}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("gateway URL through the proxy: %d", resp.StatusCode)
	}
}

// The response streams through unbuffered (the first event reaches the box
// while the upstream still holds the rest), the box's credentials never
// reach the upstream, and the usage in message_start and message_delta is
// counted (cache tokens as input).
func TestModelEndpointStreamsUnbuffered(t *testing.T) {
	release := make(chan struct{})
	seen := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\\\"usage\\\" is not counted here\"}}\n\n")
		fmt.Fprint(w, "event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":42}}\r\n\r\n")
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	t.Cleanup(up.Close)
	pol := newPolicy()
	pol.set("m", BoxPolicy{Model: &ModelRoute{Upstream: mustURL(t, up.URL), APIKey: "sk-ant-real"}})
	s := newTestServer(Config{Policy: pol, PrivateUpstreams: trust(t, up.URL)})
	base := "http://" + serveBox(t, s, "m") + "/model"

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages?beta=true", strings.NewReader(`{"stream":true}`))
	req.Header.Set("X-Api-Key", "sk-box-placeholder")
	req.Header.Set("Authorization", "Bearer sk-box-placeholder")
	req.Header.Set("Cookie", "a=b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "event: message_start\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "message_stop") {
		t.Fatalf("rest = %q", rest)
	}
	h := <-seen
	if h.Get("X-Api-Key") != "sk-ant-real" || h.Get("Authorization") != "" || h.Get("Cookie") != "" {
		t.Fatalf("upstream headers %v", h)
	}
	// Usage is recorded when the body ends; the handler may still be
	// finishing, so wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for pol.used("m").OutputTokens == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if u := pol.used("m"); u != (Usage{Requests: 1, InputTokens: 15, OutputTokens: 42}) {
		t.Fatalf("used = %+v", u)
	}
}

// The operator's key reaches the whole organization: only the Messages API
// paths are relayed, and a refused path costs no budget.
func TestModelEndpointOnlyMessagesAPI(t *testing.T) {
	up := anthropictest.New(t, anthropictest.Options{APIKey: "sk-ant-real"})
	pol := newPolicy()
	pol.set("m", BoxPolicy{Model: &ModelRoute{Upstream: mustURL(t, up.URL), APIKey: "sk-ant-real", MaxRequests: 100}})
	s := newTestServer(Config{Policy: pol, PrivateUpstreams: trust(t, up.URL)})
	base := "http://" + serveBox(t, s, "m") + "/model"
	for _, tc := range []struct{ method, path string }{
		{"GET", "/v1/files"},
		{"DELETE", "/v1/files/file_123"},
		{"GET", "/v1/messages/batches"},
		{"POST", "/v1/messages/batches"},
		{"GET", "/v1/organizations/api_keys"},
		{"GET", "/v1/messages"},
		{"POST", "/v1/models"},
		{"GET", "/v1/models/x/y"},
		{"POST", "/v1/messages/../files"},
		{"POST", "/v1/messages%2f..%2ffiles"},
		{"POST", "/v1//messages"},
		{"POST", ""},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%s %s: %d", tc.method, tc.path, resp.StatusCode)
		}
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
	if u := pol.used("m"); u.Requests != 0 {
		t.Fatalf("refused paths spent budget: %+v", u)
	}
}

func TestSSEUsageParser(t *testing.T) {
	stream := "event: message_start\n" +
		`data: {"type":"message_start","message":{"usage":{"input_tokens":100,"cache_creation_input_tokens":20,"cache_read_input_tokens":3,"output_tokens":1}}}` + "\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
		`data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"{\"usage\":{\"output_tokens\":99999}}"}}` + "\n\n" +
		`data: {"type":"message_delta","usage":{"output_tokens":7}}` + "\n\n" +
		`data: {"type":"message_delta","usage":{"input_tokens":100,"cache_creation_input_tokens":20,"cache_read_input_tokens":3,"output_tokens":30}}` + "\n\n" +
		"data: not json \"usage\"\n\n"
	// Fed in every split, the result is the same.
	for step := 1; step <= len(stream); step += 7 {
		var p sseUsage
		for i := 0; i < len(stream); i += step {
			p.Write([]byte(stream[i:min(i+step, len(stream))]))
		}
		if u := p.Usage(); u != (Usage{InputTokens: 123, OutputTokens: 30}) {
			t.Fatalf("step %d: usage %+v", step, u)
		}
	}
	var j jsonUsage
	j.Write([]byte(`{"content":[{"type":"text","text":"\"usage\""}],"usage":{"input_tokens":4,"output_tokens":5}}`))
	if u := j.Usage(); u != (Usage{InputTokens: 4, OutputTokens: 5}) {
		t.Fatalf("json usage %+v", u)
	}
}
