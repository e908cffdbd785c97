// Package initramfs generates a box's initramfs (cpio newc): the sbx binary
// as /init, optionally busybox with its applet links, and kernel modules for
// the stock kernel. The output is deterministic (sorted, zero timestamps), so
// Build can name it by its content and reuse it.
package initramfs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Options say what goes into the archive.
type Options struct {
	// Init is the static sbx binary placed at /init.
	Init string
	// Busybox, when set, is a static busybox copied to /bin/busybox with a
	// link for every applet it lists.
	Busybox string
	// Modules are kernel module files (.ko), copied to /lib/modules/<base
	// name>; the init loads the ones named by sbx.modules= in that order.
	Modules []string
	// Extra maps a path inside the archive to a host file to copy there. It
	// may replace the built-in /etc/passwd and /etc/group, nothing else.
	Extra map[string]string
}

// ModuleDir is where modules are placed inside the archive.
const ModuleDir = "/lib/modules"

// Dirs created in every archive (mount points and the basics).
var baseDirs = []string{
	"bin", "dev", "etc", "lib", "lib/modules", "mnt", "proc", "root", "run", "sbin",
	"sys", "tmp", "usr", "usr/bin", "usr/sbin", "workspace",
}

type entry struct {
	name     string // no leading slash
	mode     uint32 // type and permission bits, as in st_mode
	src      string // host file for regular files
	data     []byte // contents for links and inline files
	rdevMj   uint32
	rdevMn   uint32
	fallback bool // a built-in default that Extra may replace
}

const (
	modeDir  = 0o040000
	modeReg  = 0o100000
	modeLink = 0o120000
	modeChr  = 0o020000
)

// Write writes the archive for opts to w.
func Write(w io.Writer, opts Options) error {
	entries, err := plan(opts)
	if err != nil {
		return err
	}
	cw := &cpioWriter{w: bufio.NewWriterSize(w, 1<<20)}
	for i, e := range entries {
		if err := cw.add(uint32(i+1), e); err != nil {
			return fmt.Errorf("initramfs: add %s: %w", e.name, err)
		}
	}
	if err := cw.add(0, entry{name: "TRAILER!!!"}); err != nil {
		return fmt.Errorf("initramfs: trailer: %w", err)
	}
	return cw.w.Flush()
}

func plan(opts Options) ([]entry, error) {
	if opts.Init == "" {
		return nil, fmt.Errorf("initramfs: Options.Init (the sbx binary) is required")
	}
	byName := map[string]entry{}
	add := func(e entry) error {
		e.name = strings.TrimPrefix(path.Clean("/"+e.name), "/")
		if e.name == "" || e.name == "." {
			return fmt.Errorf("initramfs: bad archive path %q", e.name)
		}
		if old, ok := byName[e.name]; ok && old.mode&modeDir == 0 && !old.fallback {
			return fmt.Errorf("initramfs: %s added twice", e.name)
		}
		byName[e.name] = e
		for d := path.Dir(e.name); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := byName[d]; !ok {
				byName[d] = entry{name: d, mode: modeDir | 0o755}
			}
		}
		return nil
	}
	regular := func(name, src string, perm uint32) error {
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("initramfs: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("initramfs: %s is not a regular file", src)
		}
		return add(entry{name: name, mode: modeReg | perm, src: src})
	}
	for _, d := range baseDirs {
		if err := add(entry{name: d, mode: modeDir | 0o755}); err != nil {
			return nil, err
		}
	}
	byName["tmp"] = entry{name: "tmp", mode: modeDir | 0o1777}
	// The kernel opens /dev/console for init's stdio before devtmpfs exists.
	// When that fails (console=hvc0 and virtio_console is still a module),
	// init starts with fds 0-2 closed and the Go runtime aborts unless it can
	// open /dev/null in their place.
	if err := add(entry{name: "dev/console", mode: modeChr | 0o600, rdevMj: 5, rdevMn: 1}); err != nil {
		return nil, err
	}
	if err := add(entry{name: "dev/null", mode: modeChr | 0o666, rdevMj: 1, rdevMn: 3}); err != nil {
		return nil, err
	}
	// Just enough identity for tools that look up uid 0 (id, git, ssh).
	for name, data := range map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":  "root:x:0:\n",
	} {
		if err := add(entry{name: name, mode: modeReg | 0o644, data: []byte(data), fallback: true}); err != nil {
			return nil, err
		}
	}
	if err := regular("init", opts.Init, 0o755); err != nil {
		return nil, err
	}
	if opts.Busybox != "" {
		if err := regular("bin/busybox", opts.Busybox, 0o755); err != nil {
			return nil, err
		}
		applets, err := busyboxApplets(opts.Busybox)
		if err != nil {
			return nil, err
		}
		for _, a := range applets {
			name := "bin/" + a
			if _, taken := byName[name]; taken {
				continue
			}
			if err := add(entry{name: name, mode: modeLink | 0o777, data: []byte("busybox")}); err != nil {
				return nil, err
			}
		}
	}
	for _, m := range opts.Modules {
		if err := regular(path.Join(ModuleDir, filepath.Base(m)), m, 0o644); err != nil {
			return nil, err
		}
	}
	extra := make([]string, 0, len(opts.Extra))
	for k := range opts.Extra {
		extra = append(extra, k)
	}
	slices.Sort(extra)
	for _, k := range extra {
		fi, err := os.Stat(opts.Extra[k])
		if err != nil {
			return nil, fmt.Errorf("initramfs: extra %s: %w", k, err)
		}
		if err := regular(k, opts.Extra[k], uint32(fi.Mode().Perm())); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names) // a parent sorts before everything under it
	out := make([]entry, len(names))
	for i, n := range names {
		out[i] = byName[n]
	}
	return out, nil
}

// busyboxApplets asks busybox for its applet list (a static binary, so it
// runs on any host).
func busyboxApplets(bin string) ([]string, error) {
	out, err := exec.Command(bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("initramfs: %s --list: %w", bin, err)
	}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a != "" && !strings.Contains(a, "/") && a != "busybox" {
			applets = append(applets, a)
		}
	}
	return applets, nil
}

type cpioWriter struct {
	w   *bufio.Writer
	off int64
}

func (c *cpioWriter) write(p []byte) error {
	n, err := c.w.Write(p)
	c.off += int64(n)
	return err
}

func (c *cpioWriter) pad() error {
	if r := c.off % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

func (c *cpioWriter) add(ino uint32, e entry) error {
	var size int64
	var f *os.File
	if e.src != "" {
		var err error
		if f, err = os.Open(e.src); err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		size = fi.Size()
	} else {
		size = int64(len(e.data))
	}
	if size > 0xffffffff {
		return fmt.Errorf("%s is %d bytes, too large for cpio newc", e.name, size)
	}
	nlink := uint32(1)
	if e.mode&modeDir != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, e.mode, 0, 0, nlink, 0, size, 0, 0, e.rdevMj, e.rdevMn, len(e.name)+1, 0)
	if err := c.write([]byte(hdr)); err != nil {
		return err
	}
	if err := c.write(append([]byte(e.name), 0)); err != nil {
		return err
	}
	if err := c.pad(); err != nil {
		return err
	}
	if f != nil {
		n, err := io.CopyN(c.w, f, size)
		c.off += n
		if err != nil {
			return fmt.Errorf("copy %s: %w", e.src, err)
		}
	} else if err := c.write(e.data); err != nil {
		return err
	}
	return c.pad()
}

// Build writes the archive into dir as initramfs-<content hash>.cpio and
// returns its path; an identical existing file is reused. The file appears
// atomically (temp file, fsync, rename).
func Build(ctx context.Context, dir string, opts Options) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".initramfs-*.tmp")
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	defer tmp.Close()
	h := sha256.New()
	if err := Write(io.MultiWriter(tmp, h), opts); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	final := filepath.Join(dir, "initramfs-"+hex.EncodeToString(h.Sum(nil))[:16]+".cpio")
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("initramfs: sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return final, nil
}

// Entry is one member of an archive, as read back by Read.
type Entry struct {
	Name     string
	Mode     uint32 // st_mode: type and permission bits
	Data     []byte // file contents or link target
	RdevMaj  uint32
	RdevMin  uint32
	FileSize int64
}

// Read parses a cpio newc archive (up to the trailer). Tests and `sbx
// doctor` use it to check what Write produced.
func Read(r io.Reader) ([]Entry, error) {
	br := bufio.NewReader(r)
	var off int64
	// Grow with the data actually present, so a lying size cannot make
	// Read allocate gigabytes.
	read := func(n int64) ([]byte, error) {
		var b bytes.Buffer
		m, err := io.CopyN(&b, br, n)
		off += m
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return b.Bytes(), err
	}
	skipPad := func() error {
		if p := off % 4; p != 0 {
			_, err := read(4 - p)
			return err
		}
		return nil
	}
	var out []Entry
	for {
		hdr, err := read(110)
		if err != nil {
			return out, fmt.Errorf("cpio header at %d: %w", off, err)
		}
		if !bytes.HasPrefix(hdr, []byte("070701")) {
			return out, fmt.Errorf("cpio header at %d: bad magic %q", off-110, hdr[:6])
		}
		var f [13]uint32
		for i := range f {
			var v uint32
			if _, err := fmt.Sscanf(string(hdr[6+8*i:14+8*i]), "%08X", &v); err != nil {
				return out, fmt.Errorf("cpio header at %d field %d: %w", off-110, i, err)
			}
			f[i] = v
		}
		nameLen := int64(f[11])
		if nameLen == 0 || nameLen > 4096 {
			return out, fmt.Errorf("cpio header at %d: name length %d", off-110, nameLen)
		}
		nb, err := read(nameLen)
		if err != nil {
			return out, err
		}
		name := string(bytes.TrimRight(nb, "\x00"))
		if err := skipPad(); err != nil {
			return out, err
		}
		if name == "TRAILER!!!" {
			return out, nil
		}
		data, err := read(int64(f[6]))
		if err != nil {
			return out, fmt.Errorf("cpio %s data: %w", name, err)
		}
		if err := skipPad(); err != nil {
			return out, err
		}
		out = append(out, Entry{Name: name, Mode: f[1], Data: data, RdevMaj: f[9], RdevMin: f[10], FileSize: int64(f[6])})
	}
}
