package kernel

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestStockExtractsELF(t *testing.T) {
	data := t.TempDir()
	k, err := Stock(data)
	if err != nil {
		t.Fatal(err)
	}
	if k.Kind != KindStock || k.Release == "" {
		t.Fatalf("Stock() = %+v, want kind stock with a release", k)
	}
	if want := filepath.Join(data, "kernel", "stock", "vmlinux-"+k.Release); k.Path != want {
		t.Errorf("Path = %s, want %s", k.Path, want)
	}
	f, err := elf.Open(k.Path)
	if err != nil {
		t.Fatalf("extracted vmlinux is not ELF: %v", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Type != elf.ET_EXEC {
		t.Errorf("vmlinux is %v %v, want x86-64 executable", f.Machine, f.Type)
	}
	// The PVH entry QEMU uses is an ELF note (XEN_ELFNOTE_PHYS32_ENTRY = 18).
	if !hasNote(t, f, "Xen", 18) {
		t.Error("vmlinux has no PVH entry note")
	}
	st, _ := os.Stat(k.Path)
	k2, err := Stock(data)
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(k2.Path)
	if !os.SameFile(st, st2) || !st.ModTime().Equal(st2.ModTime()) {
		t.Error("second Stock() rewrote the cached vmlinux")
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(k.Path), ".*tmp*")); len(leftovers) > 0 {
		t.Errorf("temp files left behind: %v", leftovers)
	}
}

func hasNote(t *testing.T, f *elf.File, name string, typ uint32) bool {
	t.Helper()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		for len(b) >= 12 {
			nsz, dsz, ty := le32(b), le32(b[4:]), le32(b[8:])
			n := align4(nsz)
			if 12+n+align4(dsz) > len(b) {
				break
			}
			if ty == typ && strings.TrimRight(string(b[12:12+nsz]), "\x00") == name {
				return true
			}
			b = b[12+n+align4(dsz):]
		}
	}
	return false
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func align4(n uint32) int { return int((n + 3) &^ 3) }

// The stock kernel's module list must load in order: every module after all
// of its modules.dep dependencies, each once.
func TestStockModuleOrder(t *testing.T) {
	k, err := Stock(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	idx, err := loadModuleIndex(filepath.Join("/lib/modules", k.Release))
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, p := range k.Modules {
		if !filepath.IsAbs(p) {
			t.Errorf("module path %s is not absolute", p)
		}
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
		name := modName(p)
		if _, dup := pos[name]; dup {
			t.Errorf("%s listed twice", name)
		}
		pos[name] = i
	}
	for _, want := range []string{"virtio_blk", "virtio_console", "ext4"} {
		if _, ok := pos[want]; !ok && !idx.builtin[want] {
			t.Errorf("modules lack %s: %v", want, k.Modules)
		}
	}
	for name, i := range pos {
		for _, dep := range idx.deps[name] {
			j, ok := pos[dep]
			if !ok && !idx.builtin[dep] {
				t.Errorf("%s needs %s, which is missing", name, dep)
			} else if ok && j > i {
				t.Errorf("%s (#%d) comes before its dependency %s (#%d)", name, i, dep, j)
			}
		}
	}
	// ext4 and jbd2 checksum with crc32c, a soft dependency modprobe would load.
	if i, ok := pos["ext4"]; ok {
		if j, ok := pos["crc32c_generic"]; !ok || j > i {
			t.Errorf("crc32c_generic must precede ext4: %v", k.Modules)
		}
	}
}

func TestStockMissingKernelNamesPackage(t *testing.T) {
	for name, h := range map[string]Host{
		"empty /boot":         {Boot: t.TempDir(), Modules: t.TempDir()},
		"no such /boot":       {Boot: filepath.Join(t.TempDir(), "nope"), Modules: "/lib/modules"},
		"vmlinuz, no modules": {Boot: fakeBoot(t, "6.1.0-1-amd64"), Modules: t.TempDir()},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := h.Stock(t.TempDir())
			if err == nil || !strings.Contains(err.Error(), "linux-image-amd64") {
				t.Fatalf("Stock() error = %v, want one naming linux-image-amd64", err)
			}
		})
	}
}

func fakeBoot(t *testing.T, release string) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vmlinuz-"+release), []byte("MZ"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSmallMissingNamesTask(t *testing.T) {
	_, err := Small(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "go tool -modfile=tools/go.mod task kernel") {
		t.Fatalf("Small() error = %v, want one naming `go tool -modfile=tools/go.mod task kernel`", err)
	}
}

func TestSmallRejectsGarbage(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "kernel", "small")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "vmlinux"), []byte("not a kernel"), 0o644)
	if _, err := Small(data); err == nil || !strings.Contains(err.Error(), "go tool -modfile=tools/go.mod task kernel") {
		t.Fatalf("Small() error = %v, want unusable naming the task", err)
	}
	// Resolve falls back to the stock kernel rather than booting garbage.
	k, err := Resolve(data)
	if err != nil || k.Kind != KindStock {
		t.Fatalf("Resolve() = %v, %v; want the stock kernel", k.Kind, err)
	}
}

func TestSmallInstalled(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "kernel", "small")
	os.MkdirAll(dir, 0o755)
	self, _ := os.Executable() // any x86-64 ELF executable passes the check
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "vmlinux"), b, 0o644)
	os.WriteFile(filepath.Join(dir, "release"), []byte("6.1.192-sbx\n"), 0o644)
	k, err := Resolve(data)
	if err != nil {
		t.Fatal(err)
	}
	if k.Kind != KindSmall || k.Release != "6.1.192-sbx" || len(k.Modules) != 0 {
		t.Fatalf("Resolve() = %+v, want the small kernel 6.1.192-sbx without modules", k)
	}
}

// A fake modules tree exercises the resolver's rules one by one.
func TestResolveModules(t *testing.T) {
	root := t.TempDir()
	rel := filepath.Join(root, "6.1.0-9-amd64")
	os.MkdirAll(rel, 0o755)
	write := func(name, s string) { os.WriteFile(filepath.Join(rel, name), []byte(s), 0o644) }
	write("modules.dep", `kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko
kernel/lib/crc16.ko:
kernel/fs/mbcache.ko:
kernel/fs/jbd2/jbd2.ko:
kernel/crypto/crc32c_generic.ko:
kernel/arch/x86/crypto/crc32c-intel.ko:
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/a.ko: kernel/b.ko
kernel/b.ko: kernel/a.ko
kernel/broken.ko: kernel/gone.ko
`)
	write("modules.builtin", "kernel/drivers/virtio/virtio_mmio.ko\n")
	write("modules.softdep", "# comment\nsoftdep ext4 pre: crypto-crc32c\nsoftdep jbd2 pre: crypto-crc32c post: nothing\n")
	write("modules.alias", "alias crypto-crc32c crc32c_intel\nalias crypto-crc32c crc32c_generic\nalias pci:v*d* virtio_net\n")
	h := Host{Modules: root}
	base := func(ps []string) (out []string) {
		for _, p := range ps {
			out = append(out, modName(p))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		mods    []string
		want    []string
		wantErr string
	}{
		{"deps first, soft dep, generic crc", []string{"ext4"}, []string{"crc32c_generic", "crc16", "mbcache", "jbd2", "ext4"}, ""},
		{"transitive deps once", []string{"virtio_net", "net_failover"}, []string{"failover", "net_failover", "virtio_net"}, ""},
		{"builtin skipped", []string{"virtio_mmio", "crc16"}, []string{"crc16"}, ""},
		{"dash and underscore", []string{"crc32c-intel"}, []string{"crc32c_intel"}, ""},
		{"unknown module", []string{"nope"}, nil, "module nope not in"},
		{"missing dependency", []string{"broken"}, nil, "module gone (needed by broken)"},
		{"cycle", []string{"a"}, nil, "cycle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h.ResolveModules("6.1.0-9-amd64", tc.mods)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(base(got), tc.want) {
				t.Fatalf("got %v, want %v", base(got), tc.want)
			}
			for _, p := range got {
				if !strings.HasPrefix(p, rel+"/kernel/") {
					t.Errorf("path %s not under %s", p, rel)
				}
			}
		})
	}
	if _, err := h.ResolveModules("6.1.0-404-amd64", []string{"ext4"}); err == nil {
		t.Error("missing release dir: no error")
	}
}

func TestCompareRelease(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"6.1.0-9-amd64", "6.1.0-10-amd64"},
		{"6.9.0-1-amd64", "6.10.0-1-amd64"},
		{"5.10.0-30-amd64", "6.1.0-1-amd64"},
		{"6.1.0-57-amd64", "6.1.0-57-cloud-amd64"},
	} {
		if compareRelease(tc.a, tc.b) >= 0 || compareRelease(tc.b, tc.a) <= 0 {
			t.Errorf("want %s < %s", tc.a, tc.b)
		}
	}
	if compareRelease("6.1.0-1-amd64", "6.1.0-1-amd64") != 0 {
		t.Error("equal releases compare unequal")
	}
}

// A bzImage-like file: setup junk, a compressed ELF, then trailing bytes.
// Every supported packing must yield the ELF byte for byte.
func TestExtractFormats(t *testing.T) {
	self, _ := os.Executable()
	payload, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte("MZ\x1f\x8b\x08junk"), 64) // includes a false gzip magic
	tail := []byte("trailing-data-after-the-stream")
	for _, tc := range []struct {
		name string
		pack func([]byte) ([]byte, error)
	}{
		{"gzip", func(b []byte) ([]byte, error) {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(b)
			err := zw.Close()
			return buf.Bytes(), err
		}},
		{"xz", tool("xz", "-c", "--check=crc32", "--x86", "--lzma2=preset=1")},
		{"zstd", tool("zstd", "-c", "-q", "-1")},
		{"plain ELF", func(b []byte) ([]byte, error) { return b, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			packed, err := tc.pack(payload)
			if err != nil {
				t.Fatalf("pack: %v", err)
			}
			img := packed
			if tc.name != "plain ELF" {
				img = slices.Concat(junk, packed, tail)
			}
			in := filepath.Join(t.TempDir(), "vmlinuz")
			out := filepath.Join(t.TempDir(), "vmlinux")
			os.WriteFile(in, img, 0o644)
			if err := extractFile(in, out); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(out)
			if !bytes.Equal(got, payload) {
				t.Fatalf("extracted %d bytes, want the %d-byte ELF", len(got), len(payload))
			}
		})
	}
	t.Run("no ELF inside", func(t *testing.T) {
		in := filepath.Join(t.TempDir(), "vmlinuz")
		out := filepath.Join(t.TempDir(), "vmlinux")
		os.WriteFile(in, junk, 0o644)
		if err := extractFile(in, out); err == nil || !strings.Contains(err.Error(), "no compressed ELF payload found") {
			t.Fatalf("err = %v, want no payload", err)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatal("a failed extraction left a file behind")
		}
	})
}

func tool(argv ...string) func([]byte) ([]byte, error) {
	return func(b []byte) ([]byte, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdin = bytes.NewReader(b)
		return cmd.Output()
	}
}

// FuzzExtract feeds arbitrary images to the extractor: it must fail cleanly
// (never panic, never install a non-ELF) on anything that is not a kernel.
func FuzzExtract(f *testing.F) {
	f.Add([]byte("MZ\x1f\x8b\x08\x00\x00"))
	f.Add([]byte("\xfd7zXZ\x00garbage"))
	f.Add([]byte("BZh91AY&SY"))
	f.Add([]byte("\x7fELF"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, img []byte) {
		in := filepath.Join(dir, "vmlinuz")
		out := filepath.Join(dir, "vmlinux")
		os.Remove(out)
		os.WriteFile(in, img, 0o644)
		if err := extractFile(in, out); err == nil {
			if err := checkELF(out); err != nil {
				t.Fatalf("installed a non-ELF: %v", err)
			}
		}
	})
}

// TestSmallInstallFinished: only a finished install (key written last, every file
// non-empty) counts; a half-copied one does not.
func TestSmallInstallFinished(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  bool
	}{
		{"none", nil, false},
		{"vmlinux only", map[string]string{"vmlinux": "x"}, false},
		{"all but key", map[string]string{"vmlinux": "x", "release": "6.1", "config": "C"}, false},
		{"empty vmlinux", map[string]string{"vmlinux": "", "release": "6.1", "config": "C", "key": "k"}, false},
		{"complete", map[string]string{"vmlinux": "x", "release": "6.1", "config": "C", "key": "k"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			kdir := filepath.Join(dir, "kernel", "small")
			if err := os.MkdirAll(kdir, 0o755); err != nil {
				t.Fatal(err)
			}
			for f, body := range tc.files {
				if err := os.WriteFile(filepath.Join(kdir, f), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := SmallInstalled(dir); got != tc.want {
				t.Errorf("SmallInstalled = %v, want %v", got, tc.want)
			}
		})
	}
}
