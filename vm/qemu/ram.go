package qemu

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Where a running box's guest RAM lives.
//
// A box's memory is a shared file so that a sleep saves only device state
// (x-ignore-shared) and a wake maps the memory back. On the data dir's disk
// filesystem every first write of a guest page allocates a block in a
// sparse file (page_mkwrite, the journal): measured here, a bare kernel boot
// took ~70 ms longer than with anonymous memory and 20 boots in parallel
// 6.0 s instead of 3.6 s. On tmpfs a first write is only a page allocation,
// as fast as anonymous memory. So a cold boot maps its RAM from a tmpfs
// directory (RAMDir), and a sleep copies the written parts of it to the
// box's directory before the snapshot is declared good; a wake maps that
// disk copy (its blocks exist already, so faults are cheap reads).

// tmpRAMFile is a new tmpfs RAM file name for a machine of box name: one
// per machine, so removing a dead machine's file can never hit the next
// machine's.
func (b *Backend) tmpRAMFile(name string) string {
	return filepath.Join(b.ramDir, name+"."+rand.Text()[:10]+".ram")
}

// ramFileFor picks the RAM file of a cold boot of bx: on tmpfs when the
// backend has a RAM dir with room for this box's whole memory beside what
// the other boxes there may still write (a full tmpfs would kill a guest
// with SIGBUS), else in the box's directory.
//
// The file is created here, mode 600 (guest memory), under ramMu: the dir
// is removed when its last file goes (dropTmpRAMAfter), and a created file
// keeps it from going between this choice and QEMU's start.
func (b *Backend) ramFileFor(bx *box) string {
	onDisk := filepath.Join(bx.dir, ramFile)
	if b.ramDir == "" {
		return onDisk
	}
	b.ramMu.Lock()
	defer b.ramMu.Unlock()
	if err := os.MkdirAll(b.ramDir, 0o700); err != nil {
		b.log.Warn("guest RAM on disk: cannot create the tmpfs RAM dir", "dir", b.ramDir, "err", err)
		return onDisk
	}
	var st unix.Statfs_t
	if err := unix.Statfs(b.ramDir, &st); err != nil {
		return onDisk
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	need := int64(bx.rec.Box.Spec.MemoryMiB) << 20
	b.mu.Lock()
	for _, o := range b.boxes {
		if o == bx || o.proc == nil || !o.proc.alive() || !b.onTmpfs(o.rec.Machine.RAMFile) {
			continue
		}
		need += max(0, int64(o.rec.Machine.MemoryMiB)<<20-allocated(o.rec.Machine.RAMFile))
	}
	b.mu.Unlock()
	if free < need {
		b.log.Info("guest RAM on disk: the tmpfs RAM dir is short of room", "box", bx.rec.Box.Name,
			"free_mib", free>>20, "need_mib", need>>20)
		os.Remove(b.ramDir) // when empty
		return onDisk
	}
	p := b.tmpRAMFile(bx.rec.Box.Name)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		b.log.Warn("guest RAM on disk: cannot create its tmpfs file", "file", p, "err", err)
		os.Remove(b.ramDir)
		return onDisk
	}
	f.Close()
	return p
}

// onTmpfs reports whether path is one of this backend's tmpfs RAM files.
func (b *Backend) onTmpfs(path string) bool {
	return b.ramDir != "" && path != "" && filepath.Dir(path) == b.ramDir
}

// allocated is the space a sparse file really uses.
func allocated(path string) int64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// dropTmpRAMAfter removes a machine's tmpfs RAM file once the machine
// has ended: without it the memory is worthless (a sleep has copied what it
// needs before the machine quits), and it would hold host RAM.
func (b *Backend) dropTmpRAMAfter(p *proc, path string) {
	if !b.onTmpfs(path) {
		return
	}
	go func() {
		<-p.done
		b.dropTmpRAM(path)
	}()
}

// dropTmpRAM removes a tmpfs RAM file, and the RAM dir with it when that
// was its last file (no box leaves an empty /dev/shm/sbx-* behind).
func (b *Backend) dropTmpRAM(path string) {
	b.ramMu.Lock()
	defer b.ramMu.Unlock()
	os.Remove(path)
	os.Remove(b.ramDir) // fails, harmlessly, while other files are there
}

// copySparse copies the data regions of src into a new dst (holes stay
// holes: a 256 MiB guest that touched 40 MiB writes 40 MiB) and fsyncs it.
func copySparse(dst, src string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy guest memory: %w", err)
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return fmt.Errorf("copy guest memory: %w", err)
	}
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("copy guest memory: %w", err)
	}
	defer func() {
		if err != nil {
			out.Close()
			os.Remove(tmp)
		}
	}()
	size := info.Size()
	if err := out.Truncate(size); err != nil {
		return fmt.Errorf("copy guest memory: %w", err)
	}
	fd := int(in.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("copy guest memory: seek data: %w", err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("copy guest memory: seek hole: %w", err)
		}
		if _, err := io.Copy(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, hole-data)); err != nil {
			return fmt.Errorf("copy guest memory: %w", err)
		}
		off = hole
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("copy guest memory: fsync: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy guest memory: %w", err)
	}
	return os.Rename(tmp, dst)
}

// sweepRAMDir removes tmpfs RAM files of boxes with no running machine
// (left by a crash, or by a host whose boxes were not re-adopted).
func (b *Backend) sweepRAMDir() {
	if b.ramDir == "" {
		return
	}
	ents, err := os.ReadDir(b.ramDir)
	if err != nil {
		return
	}
	b.mu.Lock()
	live := map[string]bool{}
	for _, bx := range b.boxes {
		if bx.proc != nil && bx.proc.alive() {
			live[bx.rec.Machine.RAMFile] = true
		}
	}
	b.mu.Unlock()
	for _, e := range ents {
		p := filepath.Join(b.ramDir, e.Name())
		if !live[p] && strings.HasSuffix(e.Name(), ".ram") {
			b.log.Warn("recover: removing guest RAM of a box with no machine", "file", p)
			b.dropTmpRAM(p)
		}
	}
}
