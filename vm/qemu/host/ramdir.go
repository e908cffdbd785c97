package host

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// tmpfsMagic is statfs's f_type for tmpfs.
const tmpfsMagic = 0x01021994

// RAMDir is where running boxes' guest RAM goes (see vm/qemu/ram.go):
// /dev/shm/sbx-<hash of the data dir> when /dev/shm is a writable tmpfs,
// else "" (the box directories), with why.
func RAMDir(dataDir string) (dir, why string) {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil {
		return "", fmt.Sprintf("guest RAM on disk: /dev/shm: %v", err)
	}
	if st.Type != tmpfsMagic {
		return "", "guest RAM on disk: /dev/shm is not a tmpfs"
	}
	if err := unix.Access("/dev/shm", unix.W_OK); err != nil {
		return "", fmt.Sprintf("guest RAM on disk: /dev/shm is not writable: %v", err)
	}
	h := sha256.Sum256([]byte(dataDir))
	dir = filepath.Join("/dev/shm", "sbx-"+hex.EncodeToString(h[:6]))
	return dir, fmt.Sprintf("%s (tmpfs, %d MiB free)", dir, int64(st.Bavail)*st.Bsize>>20)
}
