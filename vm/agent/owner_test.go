package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"sbx.dev/sbx/vm/agent"
)

// TestRegressionUploadOwnedByRoot: an owner's upload (WriteFile, MkdirAll)
// into the agent's repo was root's, so the agent could not edit or remove
// what it was given. What the gateway writes now belongs to the owner of
// the directory it lands in; at the workspace's root-owned top it stays
// root's.
func TestRegressionUploadOwnedByRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own files as another user")
	}
	c, root := newClient(t)
	ctx := context.Background()
	repo := filepath.Join(root, "repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(repo, agent.AgentUID, agent.AgentGID); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "repo/data.csv", 0o644, strings.NewReader("a,b\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.MkdirAll(ctx, "repo/x/y", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "repo/x/y/z.txt", 0o600, strings.NewReader("z")); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "top.txt", 0o644, strings.NewReader("top")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]uint32{
		"repo/data.csv": agent.AgentUID, "repo/x": agent.AgentUID, "repo/x/y": agent.AgentUID, "repo/x/y/z.txt": agent.AgentUID,
		"top.txt": uint32(os.Geteuid()),
	} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != want {
			t.Errorf("%s: owned by %d, want %d", p, st.Uid, want)
		}
	}
}
