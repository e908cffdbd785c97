package agent

import (
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Workspace is the path the host names the confined root by.
const Workspace = "/workspace"

// Rel turns a host path (relative to /workspace, or absolute under it) into a
// clean relative path, or fails with ErrEscape. It does not touch the disk;
// symlinks are caught when the path is opened.
func Rel(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte: %w", p, fs.ErrInvalid)
	}
	if strings.HasPrefix(p, "/") {
		rest, ok := strings.CutPrefix(p, Workspace)
		if !ok || (rest != "" && rest[0] != '/') {
			return "", fmt.Errorf("%q: %w", p, ErrEscape)
		}
		p = strings.TrimLeft(rest, "/")
	}
	if p == "" {
		return ".", nil
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q: %w", p, ErrEscape)
	}
	return c, nil
}

// TarName checks one tar entry name: relative, no "..", no NUL; it returns
// the cleaned name.
func TarName(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("tar entry %q contains a NUL byte: %w", name, fs.ErrInvalid)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("tar entry %q is absolute: %w", name, ErrEscape)
	}
	for _, comp := range strings.Split(name, "/") {
		if comp == ".." {
			return "", fmt.Errorf("tar entry %q has a '..': %w", name, ErrEscape)
		}
	}
	c := path.Clean(name)
	if c == "." {
		return ".", nil
	}
	return c, nil
}
