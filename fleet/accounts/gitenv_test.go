package accounts_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet/gittest"
)

// TestGitEnvClonesWithoutLeavingTheToken: a clone made with GitEnv works
// against the real git server, and the token is nowhere in the clone (not
// in .git/config, not in the remote URL).
func TestGitEnvClonesWithoutLeavingTheToken(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.svc.Add(ctx, alice, "alice", "work", tokA, repo("acme/a")); err != nil {
		t.Fatal(err)
	}
	_, tok, err := e.svc.ForRepo(ctx, "alice", repo("acme/a"))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "a")
	run := func(dir string, env []string, args ...string) error {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(gittest.Env(t.TempDir()), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("git %s: %s", strings.Join(args, " "), out)
		}
		return err
	}
	if err := run(t.TempDir(), e.svc.GitEnv(tok), "clone", "-q", e.svc.CloneURL(repo("acme/a")), dst); err != nil {
		t.Fatal("clone with GitEnv failed")
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "README")); string(b) != "a" {
		t.Fatalf("README = %q", b)
	}
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(tok)) || bytes.Contains(b, []byte("x-access-token")) {
			t.Errorf("%s holds the token", p)
		}
		return nil
	})
	// Without the env the same clone is refused: the env is what carried it.
	if err := run(t.TempDir(), nil, "clone", "-q", e.svc.CloneURL(repo("acme/a")), filepath.Join(t.TempDir(), "b")); err == nil {
		t.Fatal("clone without GitEnv succeeded")
	}
}
