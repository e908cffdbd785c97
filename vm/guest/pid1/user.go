package pid1

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/hooks"
	"sbx.dev/sbx/vm/agent"
)

// ProvisionAgentUser makes the box's unprivileged user (agent.AgentUser)
// exist in the root filesystem at root before anything runs: its lines in
// etc/passwd and etc/group (and etc/shadow, etc/gshadow where the image has
// them: locked, no password), its HOME (owned by it, mode 700), and the
// workspace's top directory writable by it but root's (controlPlaneTop). The
// init does this at every boot, not the image build, so every root gets the
// same user: the Debian agent image (in its writable overlay) and the test
// initramfs alike, and a box made before the user existed gets it on its
// next boot. It is idempotent; an entry for the name or the uid that
// disagrees is an error rather than a user with someone else's identity.
// The agent user gets no sudo rule and no group but its own. The
// Kubernetes backend's pod agent calls it too, on its container's root.
func ProvisionAgentUser(root, workspace string) error {
	uid, gid := strconv.Itoa(agent.AgentUID), strconv.Itoa(agent.AgentGID)
	for _, f := range []struct {
		path, line string
		idField    int // the field holding the numeric id (-1: none)
		id         string
		optional   bool // only where the image has the file
	}{
		{"etc/passwd", agent.AgentUser + ":x:" + uid + ":" + gid + ":sbx agent:" + agent.AgentHome + ":" + agent.AgentShell, 2, uid, false},
		{"etc/group", agent.AgentUser + ":x:" + gid + ":", 2, gid, false},
		{"etc/shadow", agent.AgentUser + ":!:::::::", -1, "", true},
		{"etc/gshadow", agent.AgentUser + ":!::", -1, "", true},
	} {
		if err := ensureEntry(filepath.Join(root, f.path), f.line, f.idField, f.id, f.optional); err != nil {
			return fmt.Errorf("agent user: %w", err)
		}
	}
	home := filepath.Join(root, agent.AgentHome)
	if err := os.MkdirAll(filepath.Dir(home), 0o755); err != nil {
		return fmt.Errorf("agent user: %w", err)
	}
	if err := ownedDir(home, 0o700); err != nil {
		return fmt.Errorf("agent user: home: %w", err)
	}
	if err := controlPlaneTop(workspace); err != nil {
		return fmt.Errorf("agent user: workspace: %w", err)
	}
	return nil
}

// Files at the workspace's top that are root's: the task the gateway wrote
// and the hook broker's decision log.
var rootFiles = []string{".agent.task", hooks.LogFile}

// controlPlaneTop makes the workspace's top directory root's, mode 1777: the
// agent may create files and directories there (its repos, the question
// file), but, as in /tmp, may not rename or delete what is not its own —
// the task file and the decision log, which stay root's. A control file the
// agent made while it could (a box from before this rule, or a link) is
// removed, and the log is created root's so the agent cannot make it first.
func controlPlaneTop(dir string) error {
	if err := ownDir(dir, 0, 0, 0o777|os.ModeSticky); err != nil {
		return err
	}
	for _, name := range rootFiles {
		p := filepath.Join(dir, name)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err == nil && (st.Uid != 0 || st.Mode&unix.S_IFMT != unix.S_IFREG) {
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("remove the agent's %s: %w", p, err)
			}
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, hooks.LogFile), os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("decision log: %w", err)
	}
	return f.Close()
}

// ensureEntry adds line to the colon-separated database at path unless an
// entry for its name is there already. An existing entry for the name must
// carry id in field idField; an entry of another name with that id is a
// conflict.
func ensureEntry(path, line string, idField int, id string, optional bool) error {
	old, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && optional {
		return nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	name, _, _ := strings.Cut(line, ":")
	for _, l := range strings.Split(string(old), "\n") {
		f := strings.Split(l, ":")
		if len(f) < 2 {
			continue
		}
		sameName := f[0] == name
		sameID := idField >= 0 && len(f) > idField && f[idField] == id
		switch {
		case sameName && (idField < 0 || sameID):
			return nil // already there
		case sameName:
			return fmt.Errorf("%s: %q has id %q, want %s", path, name, f[idField], id)
		case sameID:
			return fmt.Errorf("%s: id %s belongs to %q, not %q", path, id, f[0], name)
		}
	}
	var b bytes.Buffer
	b.Write(old)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString(line + "\n")
	// The new file keeps the old one's mode and owner (Debian's shadow is
	// root:shadow 640).
	mode, uid, gid := os.FileMode(0o644), 0, 0
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err == nil {
		mode, uid, gid = os.FileMode(st.Mode&0o7777), int(st.Uid), int(st.Gid)
	}
	if err := replaceFile(path, b.Bytes(), mode); err != nil {
		return err
	}
	if err := unix.Lchown(path, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}

// ownedDir makes dir (created if missing, never a symlink) the agent user's
// with mode perm.
func ownedDir(dir string, perm os.FileMode) error {
	return ownDir(dir, agent.AgentUID, agent.AgentGID, perm)
}

// ownDir makes dir (created if missing, never a symlink) uid:gid's with mode
// perm.
func ownDir(dir string, uid, gid int, perm os.FileMode) error {
	if err := os.Mkdir(dir, perm.Perm()); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if err := unix.Lchown(dir, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	return os.Chmod(dir, perm)
}
