// Package image finds the root filesystem images boxes boot, such as the
// Debian agent image built by `go tool -modfile=tools/go.mod task image`.
package image

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Image is a root filesystem image: an ext4 file the host shares read-only
// between boxes, each box writing to its own overlay.
type Image struct {
	Name string
	Path string // ext4 file
	Size int64  // bytes
}

// Agent is the name of the Debian image with git, Node.js and Claude Code.
const Agent = "agent"

// validName is [a-z0-9][a-z0-9_-]{0,63}, without a package-level regexp:
// every sbx process, including each box's init and hook, would compile it
// at start (0.2 ms on the host, ~10x that under TCG).
func validName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Resolve returns the image called name installed under <dataDir>/images/.
func Resolve(dataDir, name string) (Image, error) {
	if !validName(name) {
		return Image{}, fmt.Errorf("image name %q: want [a-z0-9][a-z0-9_-]{0,63}", name)
	}
	path := filepath.Join(dataDir, "images", name+".ext4")
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if name == Agent {
				return Image{}, fmt.Errorf("image %q not built (%s missing): run `go tool -modfile=tools/go.mod task image`", name, path)
			}
			return Image{}, fmt.Errorf("image %q not found: %s missing", name, path)
		}
		return Image{}, fmt.Errorf("image %q: %w", name, err)
	}
	if err := checkExt4(path); err != nil {
		hint := ""
		if name == Agent {
			hint = " (rebuild with `go tool -modfile=tools/go.mod task image`)"
		}
		return Image{}, fmt.Errorf("image %q at %s is unusable%s: %w", name, path, hint, err)
	}
	return Image{Name: name, Path: path, Size: st.Size()}, nil
}

// checkExt4 reads the superblock magic (0xEF53 at byte 1080).
func checkExt4(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [2]byte
	if _, err := f.ReadAt(b[:], 1024+56); err != nil {
		return fmt.Errorf("read ext4 superblock: %w", err)
	}
	if m := binary.LittleEndian.Uint16(b[:]); m != 0xEF53 {
		return fmt.Errorf("no ext4 superblock (magic %#04x, want 0xef53)", m)
	}
	return nil
}
