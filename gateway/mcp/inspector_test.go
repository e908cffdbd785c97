package mcp

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
)

// inspectorVersion is the MCP Inspector the tests run as the external
// client (npm: @modelcontextprotocol/inspector).
const inspectorVersion = "2.12.0"

var inspectorInstall struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// inspectorBin installs the Inspector once into the cache
// (${SBX_CACHE:-~/.cache/sbx}/inspector-VERSION) and returns its CLI. With no
// npm registry reachable the test fails: it never skips.
func inspectorBin(t testing.TB) string {
	t.Helper()
	testutil.SkipShort(t, "installs (npm, once) and runs the MCP Inspector under Node.js")
	inspectorInstall.once.Do(func() {
		cache := os.Getenv("SBX_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				inspectorInstall.err = err
				return
			}
			cache = filepath.Join(home, ".cache", "sbx")
		}
		dir := filepath.Join(cache, "inspector-"+inspectorVersion)
		bin := filepath.Join(dir, "node_modules", ".bin", "mcp-inspector")
		inspectorInstall.bin = bin
		if _, err := os.Stat(bin); err == nil {
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			inspectorInstall.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", dir,
			"@modelcontextprotocol/inspector@"+inspectorVersion)
		inspectorInstall.out, inspectorInstall.err = cmd.CombinedOutput()
	})
	if inspectorInstall.err != nil {
		t.Fatalf("install the MCP Inspector %s with npm (needs node, npm and the npm registry): %v\n%s",
			inspectorVersion, inspectorInstall.err, inspectorInstall.out)
	}
	return inspectorInstall.bin
}

// inspect runs the Inspector CLI against url with token and returns its
// output; a failing run fails the test.
func inspect(t testing.TB, url, token, era string, args ...string) string {
	t.Helper()
	bin := inspectorBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{"--cli", url, "--transport", "http", "--protocol-era", era,
		"--header", "Authorization: Bearer " + token}, args...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Env = append(os.Environ(), "MCP_CATALOG_PATH="+filepath.Join(t.TempDir(), "mcp.json"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mcp-inspector %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestInspectorCLIListsTools(t *testing.T) {
	f := newFront(t, Options{})
	tok, _ := f.token(t, "bob")
	for _, era := range []string{"legacy", "modern"} {
		t.Run(era, func(t *testing.T) {
			got := inspect(t, f.url, tok, era, "--method", "tools/list")
			for _, name := range allTools {
				if !strings.Contains(got, `"name": "`+name+`"`) {
					t.Errorf("tools/list lacks %s:\n%s", name, got)
				}
			}
		})
	}
}
