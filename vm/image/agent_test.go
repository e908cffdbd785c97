package image_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/image"
	"sbx.dev/sbx/vm/initramfs"
	"sbx.dev/sbx/vm/kernel"
	"sbx.dev/sbx/vm/qemu"
)

// TestAgentImage boots the Debian agent image through the real vm.Manager
// and QEMU backend (the guest pivots into the image) and runs the tools the
// agent needs.
func TestAgentImage(t *testing.T) {
	project := projectDataDir(t)
	img, err := image.Resolve(project, image.Agent)
	if err != nil {
		t.Skipf("agent image not built (run `go tool -modfile=tools/go.mod task image`): %v", err)
	}
	kernels := map[kernel.Kind]func() (kernel.Kernel, error){
		kernel.KindSmall: func() (kernel.Kernel, error) { return kernel.Small(project) },
		kernel.KindStock: func() (kernel.Kernel, error) { return kernel.Stock(project) },
	}
	for _, kind := range []kernel.Kind{kernel.KindSmall, kernel.KindStock} {
		t.Run(string(kind), func(t *testing.T) {
			k, err := kernels[kind]()
			if err != nil {
				if kind == kernel.KindSmall {
					t.Skipf("small kernel not built (run `go tool -modfile=tools/go.mod task kernel`): %v", err)
				}
				t.Fatal(err)
			}
			bootAgentImage(t, img, k)
		})
	}
}

func bootAgentImage(t *testing.T, img image.Image, k kernel.Kernel) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m, name := startAgentBox(ctx, t, img, k)
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"git", "--version"}, "git version 2."},
		{[]string{"node", "--version"}, "v18."},
		{[]string{"claude", "--version"}, "(Claude Code)"},
		{[]string{"sh", "-c", "test -f /etc/debian_version && cat /etc/debian_version"}, "12."},
		// The init is bound into the image for `sbx hook` and friends.
		{[]string{"/usr/local/bin/sbx", "--help"}, "microVMs"},
		// Egress in the pivoted root: the image's /etc/hosts names the
		// gateway, its resolv.conf names no server, curl reaches the
		// gateway and nothing else.
		{[]string{"curl", "-sS", "http://" + vm.EgressHostname + "/from-debian"}, "gateway: GET /from-debian"},
		{[]string{"sh", "-c", "grep -c nameserver /etc/resolv.conf; getent hosts " + vm.EgressHostname}, "0\n10.0.2.100"},
		{[]string{"sh", "-c", "curl -sS -m 10 http://example.com/ || curl -sS -m 10 http://93.184.215.14/ || echo blocked"}, "blocked"},
	} {
		stdout, stderr, status := run(ctx, t, m, name, tc.argv)
		if status != "0" || !strings.Contains(stdout, tc.want) {
			hint := ""
			if status == "signal SIGILL" {
				// Claude Code's native binary needs AVX2; QEMU's default TCG CPU lacks it.
				hint = " (the guest CPU lacks an instruction: under TCG QEMU needs -cpu max)"
			}
			t.Errorf("%v: exit %s%s, stdout %q, stderr %q; want exit 0 and %q", tc.argv, status, hint, stdout, stderr, tc.want)
		} else {
			t.Logf("%v: %s", tc.argv, strings.TrimSpace(stdout))
		}
	}
}

// startAgentBox boots a box of the agent image on kernel k through the real
// vm.Manager and QEMU backend, with a test gateway as its one way out, and
// destroys it when the test ends.
func startAgentBox(ctx context.Context, t *testing.T, img image.Image, k kernel.Kernel) (*vm.Manager, string) {
	t.Helper()
	testutil.SkipShort(t, "boots the agent image in QEMU")
	// A private data dir for the boxes, sharing the built image read-only.
	data := t.TempDir()
	if err := os.MkdirAll(filepath.Join(data, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(img.Path, filepath.Join(data, "images", image.Agent+".ext4")); err != nil {
		t.Fatal(err)
	}
	initrd, err := initramfs.Build(ctx, t.TempDir(), initramfs.Options{
		Init: initramfs.BuildTestBinary(t), Modules: k.Modules,
	})
	if err != nil {
		t.Fatal(err)
	}
	backend, err := qemu.New(ctx, qemu.Config{DataDir: data, Kernel: &k, Initramfs: initrd, Debug: true,
		Forwarder: forwarder(t)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := vm.New(ctx, vm.Config{Backend: backend, BootTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	const name = "agent-image"
	// The box's one way out: a test gateway on a unix socket.
	sock := filepath.Join(t.TempDir(), "gw.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "gateway: %s %s", r.Method, r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	if _, err := m.Create(ctx, name, vm.Spec{Image: image.Agent, MemoryMiB: 1024, WorkspaceMiB: 64, Egress: sock}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Destroy(ctx, name); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	start := time.Now()
	if _, err := m.Start(ctx, name); err != nil {
		console, _ := os.ReadFile(filepath.Join(backend.Dir(name), "console.log"))
		t.Fatalf("boot the agent image (%s kernel): %v\nconsole:\n%s", k.Kind, err, tail(console, 3000))
	}
	t.Logf("%s kernel: agent image booted to the agent in %v", k.Kind, time.Since(start).Round(time.Millisecond))
	return m, name
}

// forwarder builds the vm tests' guest init, which (like sbx) serves
// `vm-fwd SOCKET` for QEMU's egress connections; the sbx test binary gets
// that command only when main.go wires fwd.NewCommand.
func forwarder(t *testing.T) string {
	out := filepath.Join(t.TempDir(), "fwd")
	cmd := exec.Command("go", "build", "-o", out, "../qemu/testdata/guestinit")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the forwarder: %v\n%s", err, b)
	}
	return out
}

func run(ctx context.Context, t *testing.T, m *vm.Manager, name string, argv []string) (stdout, stderr string, status string) {
	t.Helper()
	return runReq(ctx, t, m, name, agent.ExecRequest{Argv: argv})
}

// runReq runs req in the box to its end: its output and "0", "1"... or
// "signal NAME".
func runReq(ctx context.Context, t *testing.T, m *vm.Manager, name string, req agent.ExecRequest) (stdout, stderr string, status string) {
	t.Helper()
	argv := req.Argv
	p, err := m.Exec(ctx, name, req)
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	p.Stdin().Close()
	var out, errb bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&errb, p.Stderr()); close(done) }()
	io.Copy(&out, p.Stdout())
	<-done
	st, err := p.Wait()
	if err != nil {
		t.Fatalf("wait %v: %v", argv, err)
	}
	status = fmt.Sprint(st.Code)
	if st.Signal != "" {
		status = "signal " + st.Signal
	}
	return out.String(), errb.String(), status
}

// projectDataDir is where `go tool -modfile=tools/go.mod task image` installs: $SBX_DATA (relative
// to the module root), else .sbx at the module root.
func projectDataDir(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			// The tasks run at the module root, so a relative SBX_DATA is
			// relative to it, not to the test's package directory.
			if d := os.Getenv("SBX_DATA"); d != "" {
				if filepath.IsAbs(d) {
					return d
				}
				return filepath.Join(dir, d)
			}
			return filepath.Join(dir, ".sbx")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
