package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/gateway/config"
	"sbx.dev/sbx/gateway/web"
	"sbx.dev/sbx/internal/testutil"
)

func testConfig(t *testing.T, dir string) config.Config {
	t.Helper()
	testutil.SkipShort(t, "starts the whole gateway: a fresh data dir probes KVM with a boot (~10 s without KVM)")
	cfg, err := config.Load(config.Sources{DataDir: dir, Flags: map[string]string{
		"ssh.listen": "127.0.0.1:0", "http.listen": "127.0.0.1:0",
		"admin_keys": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINF7mMSwJp8aTjkVomWE2mb9jbhmaty2vwerqOlOiMj3 admin",
	}})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestServerLifecycle(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var fingerprints []string
	for round := range 2 {
		srv, err := NewServer(ctx, testConfig(t, dir), Options{Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		fingerprints = append(fingerprints, srv.HostKeyFingerprint())
		if round == 0 && !srv.Bootstrap().Created {
			t.Fatalf("first start did not register the admin: %+v", srv.Bootstrap())
		}
		if round == 1 && !srv.Bootstrap().Skipped {
			t.Fatalf("second start registered again: %+v", srv.Bootstrap())
		}
		addr, err := os.ReadFile(filepath.Join(dir, AddrFile))
		if err != nil || !strings.Contains(string(addr), "ssh="+srv.SSHAddr().String()) ||
			!strings.Contains(string(addr), "url="+srv.HTTPURL()) {
			t.Fatalf("addr file %q (%v)", addr, err)
		}
		resp, err := http.Get(srv.HTTPURL() + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		// Liveness names the build, as `sbx version` does ("dev" for a
		// test binary, which records no module version).
		var health map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&health); err != nil ||
			health["status"] != "ok" || !strings.HasPrefix(health["version"], "dev") && !strings.HasPrefix(health["version"], "v") {
			t.Fatalf("healthz answered %v (%v), want status ok and the build's version", health, err)
		}
		resp.Body.Close()
		sctx, cancel := context.WithTimeout(ctx, DrainTimeout)
		if err := srv.Shutdown(sctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := os.Stat(filepath.Join(dir, AddrFile)); !os.IsNotExist(err) {
			t.Fatalf("addr file left behind: %v", err)
		}
	}
	if fingerprints[0] != fingerprints[1] {
		t.Fatalf("host key changed across restarts: %v", fingerprints)
	}
}

func TestListenErrorNamesKey(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	cfg := testConfig(t, dir)
	busy, err := NewServer(ctx, cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := busy.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer busy.Shutdown(ctx)
	cfg2 := testConfig(t, t.TempDir())
	cfg2.SSH.Listen = busy.SSHAddr().String()
	srv, err := NewServer(ctx, cfg2, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(ctx)
	if err := srv.Start(ctx); err == nil || !strings.Contains(err.Error(), "ssh.listen "+cfg2.SSH.Listen) {
		t.Fatalf("start on a busy port: %v", err)
	}
}

func TestLoggerFormat(t *testing.T) {
	var buf bytes.Buffer
	newLogger(config.Log{Format: "auto", Level: "info"}, &buf).Info("hello")
	if !strings.HasPrefix(buf.String(), "{") {
		t.Fatalf("auto on a non-terminal is not JSON: %q", buf.String())
	}
	buf.Reset()
	newLogger(config.Log{Format: "text", Level: "warn"}, &buf).Info("quiet")
	if buf.Len() != 0 {
		t.Fatalf("info logged at warn level: %q", buf.String())
	}
}

// TestLoggerDurationsAsText: a duration reads "1.5s" in both formats, in
// groups and in a logger's own attributes too, never as nanoseconds.
func TestLoggerDurationsAsText(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		log := newLogger(config.Log{Format: format, Level: "info"}, &buf).With("drain", DrainTimeout)
		log.Info("stopped", "took", 1500*time.Millisecond, slog.Group("probe", "took", 20*time.Second), "count", 3)
		line := buf.String()
		want := []string{`"took":"1.5s"`, `"probe":{"took":"20s"}`, `"drain":"4s"`, `"count":3`}
		if format == "text" {
			want = []string{"took=1.5s", "probe.took=20s", "drain=4s", "count=3"}
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("%s log %q lacks %s", format, line, w)
			}
		}
		if strings.Contains(line, "1500000000") {
			t.Errorf("%s log %q prints a duration in nanoseconds", format, line)
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, content := range []string{"one", "two"} {
		if err := writeFileAtomic(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q %v", got, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temp files left: %v", entries)
	}
	if err := writeFileAtomic(filepath.Join(dir, "missing", "f"), nil, 0o600); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("write into a missing dir: %v", err)
	}
}

// TestShippedFrontsHaveNoTestHooks: the server the shipped `sbx serve`
// builds (no extensions in Options) has no SSH command and no HTTP route
// for tests, hidden or not; tests bring theirs through Options.SSHCommands
// and Options.HTTPRoutes.
func TestShippedFrontsHaveNoTestHooks(t *testing.T) {
	ctx := context.Background()
	srv, err := NewServer(ctx, testConfig(t, t.TempDir()), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(ctx)
	// A user's own action named "test": send a test notification to one
	// of the caller's channels, through the same core call on every front
	// (README "What each front can do"). Named here one by one, so a new
	// command or route with "test" in it still fails until someone says
	// what it is for.
	userActions := map[string]bool{
		"notify test":                       true,
		"POST /settings/notify/{name}/test": true,
	}
	cmds := srv.ssh.Commands()
	if len(cmds) == 0 {
		t.Fatal("the SSH front lists no commands")
	}
	for _, c := range cmds {
		for _, word := range strings.Fields(c.Path) {
			if strings.HasPrefix(word, "test") && !userActions[c.Path] {
				t.Errorf("ssh command %q is a test hook", c.Path)
			}
		}
	}
	for _, r := range srv.http.Handler.(*web.Server).Routes() {
		if strings.Contains(r, "/test") && !userActions[r] {
			t.Errorf("HTTP route %q is a test hook", r)
		}
	}
}
