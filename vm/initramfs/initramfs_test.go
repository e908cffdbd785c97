package initramfs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWriteReadBack(t *testing.T) {
	dir := t.TempDir()
	opts := Options{
		Init:    writeFile(t, dir, "sbx", "#!init binary", 0o755),
		Busybox: "/bin/busybox",
		Modules: []string{writeFile(t, dir, "virtio_mmio.ko", "mod1", 0o644), writeFile(t, dir, "ext4.ko", "mod2", 0o644)},
		Extra: map[string]string{
			"/etc/sbx/extra.conf": writeFile(t, dir, "extra", "x=1", 0o600),
			"etc/group":           writeFile(t, dir, "group", "root:x:0:\nstaff:x:50:\n", 0o644),
		},
	}
	var buf bytes.Buffer
	if err := Write(&buf, opts); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d is not 4-aligned", buf.Len())
	}
	ents, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Entry{}
	seen := map[string]bool{}
	for _, e := range ents {
		by[e.Name] = e
		// Every parent directory comes before its children.
		if d := filepath.Dir(e.Name); d != "." && !seen[d] {
			t.Errorf("%s comes before its directory %s", e.Name, d)
		}
		seen[e.Name] = true
	}
	check := func(name string, mode uint32, data string) {
		t.Helper()
		e, ok := by[name]
		if !ok {
			t.Errorf("%s missing", name)
			return
		}
		if e.Mode != mode || (data != "" && string(e.Data) != data) {
			t.Errorf("%s: mode %o data %q, want %o %q", name, e.Mode, e.Data, mode, data)
		}
	}
	check("init", 0o100755, "#!init binary")
	check("lib/modules/virtio_mmio.ko", 0o100644, "mod1")
	check("lib/modules/ext4.ko", 0o100644, "mod2")
	check("etc/sbx/extra.conf", 0o100600, "x=1")
	check("etc/sbx", 0o40755, "")
	check("tmp", 0o41777, "")
	check("workspace", 0o40755, "")
	check("bin/sh", 0o120777, "busybox")
	check("bin/stty", 0o120777, "busybox")
	check("bin/busybox", 0o100755, "")
	check("etc/passwd", 0o100644, "root:x:0:0:root:/root:/bin/sh\n")
	check("etc/group", 0o100644, "root:x:0:\nstaff:x:50:\n")
	if c := by["dev/console"]; c.Mode != 0o20600 || c.RdevMaj != 5 || c.RdevMin != 1 {
		t.Errorf("dev/console: %+v", c)
	}
	if c := by["dev/null"]; c.Mode != 0o20666 || c.RdevMaj != 1 || c.RdevMin != 3 {
		t.Errorf("dev/null: %+v", c)
	}
	bb, _ := os.ReadFile("/bin/busybox")
	if !bytes.Equal(by["bin/busybox"].Data, bb) {
		t.Error("bin/busybox differs from /bin/busybox")
	}

	// Deterministic: the same inputs give the same bytes.
	var again bytes.Buffer
	if err := Write(&again, opts); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("two writes of the same inputs differ")
	}
}

func TestWriteBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, opts := range map[string]Options{
		"no init":        {},
		"missing init":   {Init: filepath.Join(dir, "nope")},
		"init is a dir":  {Init: dir},
		"missing module": {Init: writeFile(t, dir, "i", "x", 0o755), Modules: []string{filepath.Join(dir, "gone.ko")}},
		"replaces init":  {Init: writeFile(t, dir, "i2", "x", 0o755), Extra: map[string]string{"init": writeFile(t, dir, "e", "x", 0o644)}},
	} {
		var buf bytes.Buffer
		err := Write(&buf, opts)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: multi-line error %q", name, err)
		}
	}
}

func TestBuildReusesIdenticalFile(t *testing.T) {
	src, out := t.TempDir(), t.TempDir()
	opts := Options{Init: writeFile(t, src, "sbx", "one", 0o755)}
	p1, err := Build(context.Background(), out, opts)
	if err != nil {
		t.Fatal(err)
	}
	st1, _ := os.Stat(p1)
	p2, err := Build(context.Background(), out, opts)
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(p2)
	if p1 != p2 || !os.SameFile(st1, st2) {
		t.Fatalf("identical build not reused: %s vs %s", p1, p2)
	}
	writeFile(t, src, "sbx", "two", 0o755)
	p3, err := Build(context.Background(), out, opts)
	if err != nil {
		t.Fatal(err)
	}
	if p3 == p1 {
		t.Fatal("changed input, same file name")
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != 2 {
		t.Fatalf("want two archives and no temp files, got %v", ents)
	}
	f, _ := os.Open(p3)
	defer f.Close()
	got, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range got {
		if e.Name == "init" && string(e.Data) != "two" {
			t.Fatalf("init = %q", e.Data)
		}
	}
}

func TestBuildTestBinaryIsStatic(t *testing.T) {
	p := BuildTestBinary(t)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x7fELF")) {
		t.Fatal("not an ELF binary")
	}
	if bytes.Contains(b, []byte("ld-linux-x86-64.so")) {
		t.Fatal("the test binary is dynamically linked; /init must be static")
	}
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	dir := f.TempDir()
	p := filepath.Join(dir, "i")
	os.WriteFile(p, []byte("init"), 0o755)
	Write(&buf, Options{Init: p})
	f.Add(buf.Bytes())
	f.Add([]byte("070701"))
	f.Fuzz(func(t *testing.T, data []byte) {
		Read(bytes.NewReader(data)) // must not panic or over-allocate
	})
}
