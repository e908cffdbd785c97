package kernel

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Host names where the host keeps its kernels. The zero value means the real
// /boot and /lib/modules; tests point it elsewhere.
type Host struct {
	Boot    string // directory with vmlinuz-<release>; "" means /boot
	Modules string // directory with <release>/modules.dep; "" means /lib/modules
}

// stockPackage is the Debian package that provides the stock kernel.
const stockPackage = "linux-image-amd64"

func (h Host) boot() string {
	if h.Boot == "" {
		return "/boot"
	}
	return h.Boot
}

func (h Host) modules() string {
	if h.Modules == "" {
		return "/lib/modules"
	}
	return h.Modules
}

// Stock returns the newest vmlinuz under h.Boot as an uncompressed vmlinux
// cached under <dataDir>/kernel/stock/, with GuestModules resolved.
func (h Host) Stock(dataDir string) (Kernel, error) {
	vmlinuz, release, err := h.newest()
	if err != nil {
		return Kernel{}, err
	}
	mods, err := h.ResolveModules(release, GuestModules)
	if err != nil {
		return Kernel{}, err
	}
	out := filepath.Join(dataDir, "kernel", "stock", "vmlinux-"+release)
	if checkELF(out) != nil {
		if err := extractFile(vmlinuz, out); err != nil {
			return Kernel{}, err
		}
	}
	return Kernel{Kind: KindStock, Path: out, Release: release, Modules: mods}, nil
}

// newest finds the vmlinuz with the highest release that has a modules dir.
func (h Host) newest() (path, release string, err error) {
	matches, _ := filepath.Glob(filepath.Join(h.boot(), "vmlinuz-*"))
	var releases []string
	for _, m := range matches {
		rel := strings.TrimPrefix(filepath.Base(m), "vmlinuz-")
		if _, err := os.Stat(filepath.Join(h.modules(), rel, "modules.dep")); err == nil {
			releases = append(releases, rel)
		}
	}
	if len(releases) == 0 {
		return "", "", fmt.Errorf("no stock kernel: no %s/vmlinuz-* with %s/<release>/modules.dep; install the Debian package %s (`go tool -modfile=tools/go.mod task deps`)",
			h.boot(), h.modules(), stockPackage)
	}
	slices.SortFunc(releases, compareRelease)
	rel := releases[len(releases)-1]
	return filepath.Join(h.boot(), "vmlinuz-"+rel), rel, nil
}

// compareRelease orders kernel releases by their numeric fields, so that
// 6.10.0 sorts after 6.9.0.
func compareRelease(a, b string) int {
	fa, fb := releaseFields(a), releaseFields(b)
	for i := range min(len(fa), len(fb)) {
		na, errA := strconv.Atoi(fa[i])
		nb, errB := strconv.Atoi(fb[i])
		switch {
		case errA == nil && errB == nil && na != nb:
			return na - nb
		case (errA != nil || errB != nil) && fa[i] != fb[i]:
			return strings.Compare(fa[i], fb[i])
		}
	}
	return len(fa) - len(fb)
}

func releaseFields(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' || r == '+' || r == '~' })
}

// compression is one way a bzImage payload may be packed, recognised by its
// magic as in the kernel's scripts/extract-vmlinux.
type compression struct {
	name  string
	magic []byte
	tool  []string // external decompressor reading stdin, when Go has none
}

var compressions = []compression{
	{name: "gzip", magic: []byte{0x1f, 0x8b, 0x08}},
	{name: "xz", magic: []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}, tool: []string{"xz", "-dcq"}},
	{name: "bzip2", magic: []byte("BZh")},
	{name: "lzma", magic: []byte{0x5d, 0x00, 0x00, 0x00}, tool: []string{"xz", "-dcq", "--format=lzma"}},
	{name: "lzo", magic: []byte{0x89, 'L', 'Z', 'O', 0x00}, tool: []string{"lzop", "-dcq"}},
	{name: "lz4", magic: []byte{0x02, 0x21, 0x4c, 0x18}, tool: []string{"lz4", "-dcq"}},
	{name: "zstd", magic: []byte{0x28, 0xb5, 0x2f, 0xfd}, tool: []string{"zstd", "-dcq"}},
}

// extractFile unpacks the vmlinux inside vmlinuz into out (atomically).
func extractFile(vmlinuz, out string) error {
	img, err := os.ReadFile(vmlinuz)
	if err != nil {
		return fmt.Errorf("read stock kernel: %w", err)
	}
	if isELF(img) {
		return writeAtomic(out, func(w io.Writer) error { _, err := w.Write(img); return err })
	}
	var tried []string
	ntried := 0
	for _, c := range compressions {
		// A false magic costs a process start for the external tools, a
		// header parse for the Go decompressors: bound the former tighter.
		limit := 4096
		if c.tool != nil {
			limit = 16
		}
		for off, n := 0, 0; n < limit; n++ {
			i := bytes.Index(img[off:], c.magic)
			if i < 0 {
				break
			}
			off += i
			err := writeAtomic(out, func(w io.Writer) error { return decompress(c, img[off:], w) })
			if err == nil {
				return nil
			}
			if ntried++; len(tried) < 6 {
				tried = append(tried, fmt.Sprintf("%s@%d: %v", c.name, off, err))
			}
			off++
		}
	}
	if ntried == 0 {
		return fmt.Errorf("extract vmlinux from %s: no compressed payload (no gzip/xz/bzip2/lzma/lzo/lz4/zstd magic)", vmlinuz)
	}
	return fmt.Errorf("extract vmlinux from %s: no compressed ELF payload found in %d candidates (%s…)", vmlinuz, ntried, strings.Join(tried, "; "))
}

// decompress writes the payload to w; a payload that does not unpack to an
// ELF is an error. Trailing bytes after the stream are expected and ignored,
// as extract-vmlinux does: the ELF check on the result decides.
func decompress(c compression, payload []byte, w io.Writer) error {
	head := &headCheck{w: w}
	var r io.Reader
	switch c.name {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(payload))
		if err != nil {
			return err
		}
		zr.Multistream(false)
		r = zr
	case "bzip2":
		r = bzip2.NewReader(bytes.NewReader(payload))
	default:
		if _, err := exec.LookPath(c.tool[0]); err != nil {
			return fmt.Errorf("%s payload needs the %q tool: %w", c.name, c.tool[0], err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, c.tool[0], c.tool[1:]...)
		cmd.Stdin = bytes.NewReader(payload)
		cmd.Stdout = head
		_ = cmd.Run() // trailing data makes the tool fail after a complete stream
		if !head.elf {
			return errors.New("not an ELF")
		}
		return nil
	}
	if _, err := io.Copy(head, r); err != nil && !head.elf {
		return err
	} else if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	if !head.elf {
		return errors.New("not an ELF")
	}
	return nil
}

// headCheck passes bytes through once the first four are the ELF magic, and
// fails fast otherwise so a false magic match costs little.
type headCheck struct {
	w    io.Writer
	buf  []byte
	elf  bool
	fail bool
}

func (h *headCheck) Write(p []byte) (int, error) {
	if h.fail {
		return 0, errors.New("not an ELF")
	}
	if !h.elf {
		h.buf = append(h.buf, p...)
		if len(h.buf) < len(elfMagic) {
			return len(p), nil
		}
		if !isELF(h.buf) {
			h.fail = true
			return 0, errors.New("not an ELF")
		}
		h.elf = true
		if _, err := h.w.Write(h.buf); err != nil {
			return 0, err
		}
		h.buf = nil
		return len(p), nil
	}
	return h.w.Write(p)
}

// writeAtomic writes path through a temp file in the same directory: fill,
// fsync, verify it is an x86-64 ELF, rename, fsync the directory. A crash
// leaves either the old file or the new one, never a torn one.
func writeAtomic(path string, fill func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("create temp for %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := fill(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := checkELF(tmp.Name()); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("install %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ResolveModules returns the absolute .ko paths for names and everything they
// depend on (modules.dep, plus "pre:" soft dependencies from modules.softdep
// resolved through modules.alias), dependencies first, each once. Modules
// built into the kernel (modules.builtin) are skipped.
func (h Host) ResolveModules(release string, names []string) ([]string, error) {
	root := filepath.Join(h.modules(), release)
	idx, err := loadModuleIndex(root)
	if err != nil {
		return nil, err
	}
	var (
		order []string
		state = map[string]int{} // 1 visiting, 2 done
		visit func(name, from string) error
	)
	visit = func(name, from string) error {
		name = modName(name)
		if idx.builtin[name] {
			return nil
		}
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s (from %s)", name, from)
		case 2:
			return nil
		}
		rel, ok := idx.path[name]
		if !ok {
			if from != "" {
				return fmt.Errorf("module %s (needed by %s) not in %s/modules.dep", name, from, root)
			}
			return fmt.Errorf("module %s not in %s/modules.dep and not built in", name, root)
		}
		state[name] = 1
		for _, pre := range idx.softPre[name] {
			mod, ok := idx.pickAlias(pre)
			if !ok {
				continue // a soft dependency may be absent; the kernel copes
			}
			if err := visit(mod, name); err != nil {
				return err
			}
		}
		for _, dep := range idx.deps[name] {
			if err := visit(dep, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, filepath.Join(root, rel))
		return nil
	}
	for _, n := range names {
		if err := visit(n, ""); err != nil {
			return nil, err
		}
	}
	return order, nil
}

type moduleIndex struct {
	path    map[string]string   // name → path relative to the release dir
	deps    map[string][]string // name → dependency names
	builtin map[string]bool
	softPre map[string][]string // name → aliases or names to load first
	alias   map[string][]string // alias → module names
}

// modName turns a path or name into the kernel's canonical module name:
// kernel/fs/ext4/ext4.ko → ext4, crc32c-intel → crc32c_intel.
func modName(s string) string {
	s = filepath.Base(s)
	if i := strings.Index(s, ".ko"); i >= 0 {
		s = s[:i]
	}
	return strings.ReplaceAll(s, "-", "_")
}

func loadModuleIndex(root string) (*moduleIndex, error) {
	idx := &moduleIndex{path: map[string]string{}, deps: map[string][]string{}, builtin: map[string]bool{},
		softPre: map[string][]string{}, alias: map[string][]string{}}
	if err := eachLine(filepath.Join(root, "modules.dep"), true, func(n int, line string) error {
		mod, deps, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("modules.dep line %d: no colon in %q", n, line)
		}
		name := modName(mod)
		idx.path[name] = mod
		for _, d := range strings.Fields(deps) {
			idx.deps[name] = append(idx.deps[name], modName(d))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	_ = eachLine(filepath.Join(root, "modules.builtin"), false, func(_ int, line string) error {
		idx.builtin[modName(line)] = true
		return nil
	})
	_ = eachLine(filepath.Join(root, "modules.softdep"), false, func(_ int, line string) error {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "softdep" {
			return nil
		}
		name, pre := modName(f[1]), false
		for _, w := range f[2:] {
			switch w {
			case "pre:":
				pre = true
			case "post:":
				pre = false
			default:
				if pre {
					idx.softPre[name] = append(idx.softPre[name], w)
				}
			}
		}
		return nil
	})
	_ = eachLine(filepath.Join(root, "modules.alias"), false, func(_ int, line string) error {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "alias" && !strings.ContainsAny(f[1], "*?[") {
			idx.alias[f[1]] = append(idx.alias[f[1]], modName(f[2]))
		}
		return nil
	})
	return idx, nil
}

// pickAlias resolves a soft dependency to one module. For a crypto alias
// with several providers it prefers the portable *_generic one: it needs no
// CPU feature, so it works under any accelerator.
func (idx *moduleIndex) pickAlias(a string) (string, bool) {
	if name := modName(a); idx.builtin[name] || idx.path[name] != "" {
		return name, true
	}
	mods := idx.alias[a]
	if len(mods) == 0 {
		return "", false
	}
	for _, m := range mods {
		if idx.builtin[m] {
			return m, true
		}
	}
	for _, m := range mods {
		if strings.HasSuffix(m, "_generic") {
			return m, true
		}
	}
	return mods[0], true
}

func eachLine(path string, required bool, fn func(n int, line string) error) error {
	f, err := os.Open(path)
	if err != nil {
		if !required && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read module index: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(n, line); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}
