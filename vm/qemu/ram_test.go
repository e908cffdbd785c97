package qemu

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/qemu/host"
)

// TestCopySparseKeepsHoles: the sleep's copy of a guest's memory writes
// what the guest wrote, at the same offsets, and leaves the rest a hole.
func TestCopySparseKeepsHoles(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.ram")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	chunks := map[int64][]byte{
		0:        bytes.Repeat([]byte("a"), 4096),
		9 << 20:  bytes.Repeat([]byte("b"), 3<<20),
		size - 8: []byte("the end!"),
	}
	for off, b := range chunks {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	dst := filepath.Join(dir, "dst.ram")
	if err := copySparse(dst, src); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(src)
	if !bytes.Equal(got, want) {
		t.Fatal("copy differs from the source")
	}
	if a := allocated(dst); a > 8<<20 {
		t.Errorf("copy allocates %d bytes; the source's data is ~3 MiB (holes were filled)", a)
	}
	if _, err := os.Stat(dst + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
}

// TestGuestRAMOnTmpfs: a cold boot maps its RAM from the tmpfs RAM dir; a
// sleep moves it into the box directory (the tmpfs file goes away with the
// machine) and the wake restores from it with the guest's state intact;
// destroy and a killed machine leave nothing in the RAM dir.
func TestGuestRAMOnTmpfs(t *testing.T) {
	k := testKernel(t)
	ramDir, why := host.RAMDir(t.TempDir())
	if ramDir == "" {
		t.Log(why)
		t.Skip("/dev/shm is not a writable tmpfs here")
	}
	ramDir = filepath.Join(filepath.Dir(ramDir), "sbx-test-"+filepath.Base(t.TempDir()))
	t.Cleanup(func() { os.RemoveAll(ramDir) })
	dir := t.TempDir()
	be, err := New(context.Background(), Config{DataDir: dir, Kernel: &k, Init: testInit(t), RAMDir: ramDir})
	if err != nil {
		t.Fatal(err)
	}
	m, err := vm.New(context.Background(), vm.Config{Backend: be, BootTimeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	if _, err := m.Create(ctx, "ram", vm.Spec{MemoryMiB: 256}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, "ram"); err != nil {
		t.Fatal(err)
	}
	ramFiles := func() []string {
		ents, _ := os.ReadDir(ramDir)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	bx, _ := be.get("ram")
	if got := bx.rec.Machine.RAMFile; filepath.Dir(got) != ramDir {
		t.Fatalf("running box's RAM file %s is not in the RAM dir %s", got, ramDir)
	}
	if files := ramFiles(); len(files) != 1 || !strings.HasPrefix(files[0], "ram.") {
		t.Fatalf("RAM dir holds %v, want one file of box ram", files)
	}
	if fi, err := os.Stat(bx.rec.Machine.RAMFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("guest memory file: %v %v, want mode 600", fi.Mode(), err)
	}
	// State in guest memory that only a restore (not a cold boot) keeps.
	run(t, m, "ram", "sh", "-c", "echo kept > /dev/shm/mark")

	if _, err := m.Sleep(ctx, "ram"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := os.Stat(ramDir); return os.IsNotExist(err) },
		"the tmpfs RAM file, and the RAM dir with its last file, to go after the sleep")
	if _, err := os.Stat(filepath.Join(dir, "boxes", "ram", ramFile)); err != nil {
		t.Fatalf("sleep left no memory copy in the box directory: %v", err)
	}
	woke, err := m.Wake(ctx, "ram")
	if err != nil {
		t.Fatal(err)
	}
	if woke.Reason != "restored from memory snapshot" {
		t.Fatalf("wake was a cold boot: %s", woke.Reason)
	}
	if out := run(t, m, "ram", "cat", "/dev/shm/mark"); out != "kept\n" {
		t.Fatalf("guest memory after the wake: %q", out)
	}
	// The next cold boot is on tmpfs again; a killed machine's file goes.
	if err := be.Kill(ctx, "ram"); err != nil {
		t.Fatal(err)
	}
	if err := be.Start(ctx, "ram"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(ramFiles()) == 1 }, "one RAM file after the second cold boot (the killed machine's gone)")
	if err := m.Destroy(ctx, "ram"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(ramFiles()) == 0 }, "the RAM dir to be empty after destroy")
	// Closed with no machine left, the backend leaves nothing in /dev/shm.
	m.Close()
	if _, err := os.Stat(ramDir); !os.IsNotExist(err) {
		t.Errorf("RAM dir %s still there after Close: %v", ramDir, err)
	}
}

// TestGuestRAMFallsBackToDisk: with no room in the RAM dir for the box's
// whole memory the RAM goes to the box directory instead of risking a
// SIGBUS when tmpfs fills up.
func TestGuestRAMFallsBackToDisk(t *testing.T) {
	k := testKernel(t)
	dir := t.TempDir()
	be, err := New(context.Background(), Config{DataDir: dir, Kernel: &k, Init: testInit(t), RAMDir: "/dev/shm"})
	if err != nil {
		t.Fatal(err)
	}
	bx := &box{dir: filepath.Join(dir, "boxes", "huge")}
	bx.rec.Box = vm.Box{Name: "huge", Spec: vm.Spec{MemoryMiB: 1 << 30}} // 1 PiB
	if got := be.ramFileFor(bx); got != filepath.Join(bx.dir, ramFile) {
		t.Fatalf("RAM of a box larger than the tmpfs: %s, want the box directory", got)
	}
	be2, err := New(context.Background(), Config{DataDir: dir, Kernel: &k, Init: testInit(t), RAMDir: "none"})
	if err != nil {
		t.Fatal(err)
	}
	bx.rec.Box.Spec.MemoryMiB = 256
	if got := be2.ramFileFor(bx); got != filepath.Join(bx.dir, ramFile) {
		t.Fatalf("RAMDir none: %s, want the box directory", got)
	}
}

func run(t *testing.T, m *vm.Manager, box string, argv ...string) string {
	t.Helper()
	p, err := m.Exec(context.Background(), box, agent.ExecRequest{Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	p.Stdin().Close()
	go io.Copy(io.Discard, p.Stderr())
	out, _ := io.ReadAll(p.Stdout())
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("%v: %+v %v", argv, st, err)
	}
	return string(out)
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	for range 200 {
		if ok() {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
