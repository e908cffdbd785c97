package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/kernel"
)

const gatewayHelperEnv = "SBX_VM_TEST_GATEWAY"

// helperConfig is what the test hands the helper gateway.
type helperConfig struct {
	DataDir string
	Kernel  kernel.Kernel
	Init    string
}

// gatewayHelper plays a gateway in a child process: it boots box "kept",
// says "ready" and waits to be killed.
func gatewayHelper() int {
	var hc helperConfig
	if err := json.Unmarshal([]byte(os.Getenv(gatewayHelperEnv)), &hc); err != nil {
		fmt.Println("bad config:", err)
		return 1
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	be, err := New(ctx, Config{DataDir: hc.DataDir, Kernel: &hc.Kernel, Init: hc.Init, Accel: "tcg", Logger: quiet})
	if err != nil {
		fmt.Println("backend:", err)
		return 1
	}
	m, err := vm.New(ctx, vm.Config{Backend: be, Logger: quiet, BootTimeout: 3 * time.Minute})
	if err != nil {
		fmt.Println("manager:", err)
		return 1
	}
	if _, err := m.Create(ctx, "kept", vm.Spec{WorkspaceMiB: 32}); err != nil {
		fmt.Println("create:", err)
		return 1
	}
	if _, err := m.Start(ctx, "kept"); err != nil {
		fmt.Println("start:", err)
		return 1
	}
	fmt.Println("ready")
	select {}
}

// TestGatewayKilled: the gateway process dies by SIGKILL (no Close, no
// cleanup). Its box keeps running in its own session; a new gateway
// re-adopts it, uses it, and notices when that no-longer-child QEMU is
// killed (pidfd), marking the box failed with a reason.
func TestGatewayKilled(t *testing.T) {
	dir := t.TempDir()
	hc, _ := json.Marshal(helperConfig{DataDir: dir, Kernel: testKernel(t), Init: testInit(t)})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), gatewayHelperEnv+"="+string(hc))
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper gateway: %q", line)
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	defer func() {
		for pid := range qemuUnder(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}()

	k := testKernel(t)
	be, err := New(context.Background(), Config{DataDir: dir, Kernel: &k, Init: testInit(t), Accel: "tcg"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := vm.New(context.Background(), vm.Config{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	b, err := m.Get("kept")
	if err != nil || b.State != vm.Running {
		t.Fatalf("after the gateway was killed: %+v %v", b, err)
	}
	p, err := m.Exec(ctx, "kept", agent.ExecRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Stdin().Close()
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("exec in the re-adopted box: %+v %v", st, err)
	}
	evs := m.Events(ctx)
	pid := be.PID("kept")
	if pid == 0 {
		t.Fatal("re-adopted box has no pid")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	select {
	case ev := <-evs:
		if ev.To != vm.Failed || ev.Note == "" {
			t.Fatalf("event after killing the adopted qemu: %+v", ev)
		}
		t.Logf("failed: %s", ev.Note)
	case <-time.After(30 * time.Second):
		t.Fatal("killing an adopted qemu went unnoticed")
	}
}
