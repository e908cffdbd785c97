package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/qemu/host"
)

// Checkpoints live in the box's directory, so Destroy removes them with it:
//
//	checkpoints/<id>/checkpoint.json  the vm.Checkpoint
//	checkpoints/<id>/workspace.ext4   copies of the box's disks, taken with
//	checkpoints/<id>/root.qcow2       the machine paused (QMP stop flushes them)
//
// A checkpoint is written under checkpoints/.<id>.tmp and renamed into place
// once complete. Copies are reflinks where the filesystem has them, else
// sparse copies: a 1 GiB workspace that holds 30 MiB copies 30 MiB.

const (
	checkpointDir  = "checkpoints"
	checkpointMeta = "checkpoint.json"
	// diskReserve is the host disk space a checkpoint or a fork leaves free
	// beyond its own copies.
	diskReserve = 512 << 20
)

var _ vm.Snapshotter = (*Backend)(nil)

// diskFiles are the box disks a checkpoint keeps (the ones bx has).
func diskFiles(dir string) []string {
	out := []string{workspaceFile}
	if fileExists(filepath.Join(dir, rootFile)) {
		out = append(out, rootFile)
	}
	return out
}

// copyDisk copies a disk image, as a reflink where the filesystem can and
// sparse otherwise; dst must not exist.
func copyDisk(ctx context.Context, src, dst string) error {
	out, err := exec.CommandContext(ctx, "cp", "--reflink=auto", "--sparse=always", "--", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copy %s: %w: %s", filepath.Base(src), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// copyDisks copies files from dir srcDir into dstDir, made mode 700.
func copyDisks(ctx context.Context, srcDir, dstDir string, files []string) (int64, error) {
	if err := os.MkdirAll(dstDir, 0o700); err != nil {
		return 0, err
	}
	var n int64
	for _, f := range files {
		dst := filepath.Join(dstDir, f)
		if err := copyDisk(ctx, filepath.Join(srcDir, f), dst); err != nil {
			return 0, err
		}
		n += allocated(dst)
	}
	return n, nil
}

// checkSpace refuses a copy of files (from dir) that would leave the
// host's disk under diskReserve.
func checkSpace(dir string, files []string) error {
	var need int64
	for _, f := range files {
		need += allocated(filepath.Join(dir, f))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("host disk space: %w", err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free < need+diskReserve {
		return fmt.Errorf("host disk has %d MiB free; the copy needs %d MiB and %d MiB must stay free: %w",
			free>>20, need>>20, diskReserve>>20, errkind.Limit)
	}
	return nil
}

// paused runs fn with the box's machine, if one runs, paused: QMP stop
// drains and flushes the disks, so the files are consistent until cont.
func (b *Backend) paused(ctx context.Context, bx *box, fn func() error) error {
	b.mu.Lock()
	p := bx.proc
	b.mu.Unlock()
	if p == nil || !p.alive() {
		return fn()
	}
	q, err := b.qmpOf(ctx, bx, p)
	if err != nil {
		return fmt.Errorf("pause the machine: %w", err)
	}
	defer q.Close()
	if _, err := q.run(ctx, "stop", nil); err != nil {
		return fmt.Errorf("pause the machine: %w", err)
	}
	ferr := fn()
	if _, err := q.run(context.WithoutCancel(ctx), "cont", nil); err != nil {
		return errors.Join(ferr, fmt.Errorf("resume the machine: %w", err))
	}
	return ferr
}

// SaveCheckpoint copies the box's disks into checkpoints/<cp.ID>.
func (b *Backend) SaveCheckpoint(ctx context.Context, name string, cp vm.Checkpoint) (vm.Checkpoint, error) {
	if err := vm.ValidCheckpointID(cp.ID); err != nil {
		return vm.Checkpoint{}, err
	}
	bx, err := b.get(name)
	if err != nil {
		return vm.Checkpoint{}, err
	}
	root := filepath.Join(bx.dir, checkpointDir)
	final := filepath.Join(root, cp.ID)
	if fileExists(final) {
		return vm.Checkpoint{}, fmt.Errorf("checkpoint %s: %w", cp.ID, vm.ErrExists)
	}
	tmp := filepath.Join(root, "."+cp.ID+".tmp")
	files := diskFiles(bx.dir)
	if err := checkSpace(bx.dir, files); err != nil {
		return vm.Checkpoint{}, err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return vm.Checkpoint{}, err
	}
	os.RemoveAll(tmp)
	err = b.paused(ctx, bx, func() error {
		n, err := copyDisks(ctx, bx.dir, tmp, files)
		cp.Bytes = n
		return err
	})
	if err == nil {
		var data []byte
		if data, err = json.Marshal(cp); err == nil {
			err = host.WriteFileAtomic(filepath.Join(tmp, checkpointMeta), append(data, '\n'), 0o600)
		}
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return vm.Checkpoint{}, err
	}
	return cp, nil
}

// Checkpoints reads the box's complete checkpoints.
func (b *Backend) Checkpoints(ctx context.Context, name string) ([]vm.Checkpoint, error) {
	bx, err := b.get(name)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(filepath.Join(bx.dir, checkpointDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []vm.Checkpoint
	for _, e := range ents {
		if !e.IsDir() || vm.ValidCheckpointID(e.Name()) != nil {
			continue // a copy in progress (.<id>.tmp) or a stray
		}
		data, err := os.ReadFile(filepath.Join(bx.dir, checkpointDir, e.Name(), checkpointMeta))
		var cp vm.Checkpoint
		if err == nil {
			err = json.Unmarshal(data, &cp)
		}
		if err != nil || cp.ID != e.Name() {
			b.log.Warn("skipping an unreadable checkpoint", "box", name, "checkpoint", e.Name(), "err", err)
			continue
		}
		out = append(out, cp)
	}
	return out, nil
}

// Restore replaces the box's disks by checkpoint id's copies; the machine
// is stopped, and its memory snapshot (of the disks being replaced) goes.
func (b *Backend) Restore(ctx context.Context, name, id string) error {
	if err := vm.ValidCheckpointID(id); err != nil {
		return err
	}
	bx, err := b.get(name)
	if err != nil {
		return err
	}
	if b.PID(name) != 0 {
		return fmt.Errorf("box %q: %w: its machine is running", name, vm.ErrState)
	}
	from := filepath.Join(bx.dir, checkpointDir, id)
	if !fileExists(filepath.Join(from, checkpointMeta)) {
		return fmt.Errorf("box %q: checkpoint %q: %w", name, id, vm.ErrNoCheckpoint)
	}
	files := diskFiles(from)
	if err := checkSpace(bx.dir, files); err != nil {
		return err
	}
	os.Remove(filepath.Join(bx.dir, snapFile))
	os.Remove(filepath.Join(bx.dir, ramFile))
	for _, f := range files {
		tmp := filepath.Join(bx.dir, "."+f+".restore")
		os.Remove(tmp)
		if err := copyDisk(ctx, filepath.Join(from, f), tmp); err != nil {
			os.Remove(tmp)
			return err
		}
		if err := os.Rename(tmp, filepath.Join(bx.dir, f)); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	return nil
}

// DeleteCheckpoint removes checkpoints/<id>: renamed aside first, so a
// removal cut short leaves no half checkpoint that lists.
func (b *Backend) DeleteCheckpoint(ctx context.Context, name, id string) error {
	if err := vm.ValidCheckpointID(id); err != nil {
		return err
	}
	bx, err := b.get(name)
	if err != nil {
		return err
	}
	dir := filepath.Join(bx.dir, checkpointDir, id)
	gone := filepath.Join(bx.dir, checkpointDir, "."+id+".rm")
	if err := os.Rename(dir, gone); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("box %q: checkpoint %q: %w", name, id, vm.ErrNoCheckpoint)
		}
		return err
	}
	return os.RemoveAll(gone)
}

// Fork provisions dst with copies of src's disks (now, or at checkpoint
// id): its own directory, sockets and record; nothing of src's is shared
// but the read-only base image under root.qcow2.
func (b *Backend) Fork(ctx context.Context, src, id string, dst vm.Box) error {
	srcBox, err := b.get(src)
	if err != nil {
		return err
	}
	from := srcBox.dir
	if id != "" {
		if err := vm.ValidCheckpointID(id); err != nil {
			return err
		}
		from = filepath.Join(srcBox.dir, checkpointDir, id)
		if !fileExists(filepath.Join(from, checkpointMeta)) {
			return fmt.Errorf("box %q: checkpoint %q: %w", src, id, vm.ErrNoCheckpoint)
		}
	}
	files := diskFiles(from)
	if err := checkSpace(srcBox.dir, files); err != nil {
		return err
	}
	b.mu.Lock()
	root := srcBox.rec.Root
	b.mu.Unlock()
	return b.provision(dst, func(bx *box) error {
		copyIn := func() error { _, err := copyDisks(ctx, from, bx.dir, files); return err }
		if id == "" {
			err = b.paused(ctx, srcBox, copyIn)
		} else {
			err = copyIn()
		}
		if err != nil {
			return fmt.Errorf("fork %q: %w", src, err)
		}
		if fileExists(filepath.Join(bx.dir, rootFile)) {
			bx.rec.Root = root
		}
		return nil
	})
}
