package boxnet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"sbx.dev/sbx/gateway/boxnet/anthropictest"
)

// The real Claude Code CLI, with ANTHROPIC_BASE_URL at the model endpoint
// and a placeholder key, plays anthropictest's scripted conversation: it
// streams the text and the Bash tool_use, runs the tool, sends the
// tool_result and ends with the final text; the upstream sees only the real
// key, nothing it asks is refused (its HEAD /api/hello probe included), and
// the box's usage equals what the upstream reported.
//
// Claude Code lives in the agent image, not on the host: set SBX_CLAUDE to
// its binary (e.g. extracted with debugfs -R "rdump
// /usr/local/lib/node_modules/@anthropic-ai DIR" from the image) or put
// claude on PATH; without either the test is skipped.
func TestClaudeCodeThroughModelEndpoint(t *testing.T) {
	bin := os.Getenv("SBX_CLAUDE")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("claude"); err != nil {
			t.Skip("Claude Code not found: set SBX_CLAUDE to its binary")
		}
	}
	for _, tc := range []struct {
		name string
		env  func(addr string) []string
	}{
		// As a box runs it: everything through the proxy, the model at the
		// gateway's address (served locally by the proxy), non-essential
		// traffic off (else Claude Code CONNECTs to api.anthropic.com, which
		// the egress policy refuses).
		{"box settings", func(addr string) []string {
			return []string{"HTTP_PROXY=http://" + addr, "HTTPS_PROXY=http://" + addr,
				"ANTHROPIC_BASE_URL=http://" + GatewayHost + "/model", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
		}},
		// Straight at the endpoint with non-essential traffic on: its
		// HEAD /api/hello probe must not be refused.
		{"direct", func(addr string) []string {
			return []string{"ANTHROPIC_BASE_URL=http://" + addr + "/model"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { claudeRun(t, bin, tc.env) })
	}
}

func claudeRun(t *testing.T, bin string, env func(addr string) []string) {
	up := anthropictest.New(t, anthropictest.Options{APIKey: "sk-ant-real"})
	pol := newPolicy()
	pol.set("m", BoxPolicy{Model: &ModelRoute{Upstream: mustURL(t, up.URL), APIKey: "sk-ant-real", MaxRequests: 50}})
	s := newTestServer(Config{Policy: pol, PrivateUpstreams: trust(t, up.URL)})
	addr := serveBox(t, s, "m")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "marker-file.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-p", "list the files", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions")
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "ANTHROPIC_API_KEY=sk-box-placeholder",
		"DISABLE_AUTOUPDATER=1", "IS_SANDBOX=1"}, env(addr)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("claude: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	var result struct {
		Type, Subtype, Result string
		NumTurns              int `json:"num_turns"`
	}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct{ Type string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Type == "result" {
			_ = json.Unmarshal(sc.Bytes(), &result)
		}
	}
	if result.Subtype != "success" || result.Result != "The directory listing is done." || result.NumTurns != 2 {
		t.Fatalf("result %+v\n%s", result, stdout.String())
	}
	var want Usage
	var sawResult bool
	for _, r := range up.Requests() {
		if r.APIKey != "sk-ant-real" || r.Status != 200 {
			t.Fatalf("upstream request %+v", r)
		}
		want.Requests++
		want.InputTokens += r.Usage.InputTokens
		want.OutputTokens += r.Usage.OutputTokens
		sawResult = sawResult || (r.Turn == 1 && slices.Contains(r.ToolResults, "marker-file.txt"))
	}
	if !sawResult {
		t.Fatalf("the Bash tool's output never reached the upstream: %+v", up.Requests())
	}
	for _, d := range pol.audited("") {
		if d.Verdict != Allow {
			t.Errorf("Claude Code was refused: %+v", d)
		}
	}
	if got := pol.used("m"); got != want {
		t.Fatalf("used %+v, upstream reported %+v", got, want)
	}
}
