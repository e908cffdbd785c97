package giteatest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet/forge/giteatest"
	"sbx.dev/sbx/fleet/gittest"
)

// TestServer starts a real Gitea and checks what the harness promises:
// a repository with files on main, git over HTTP with the token as the
// password under any user name (sbx sends x-access-token), refusal of a
// wrong token and of another user's token, statuses and branch heads.
func TestServer(t *testing.T) {
	srv := giteatest.New(t)
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") || srv.Admin == "" || srv.Token == "" {
		t.Fatalf("server %+v: want a loopback URL, an admin and a token", srv)
	}
	repo := srv.CreateRepo(t, "widget", map[string]string{"README.md": "hi\n", "src/main.go": "package main\n"})
	if got, want := srv.CloneURL(repo), srv.URL+"/"+srv.Admin+"/widget.git"; got != want {
		t.Fatalf("CloneURL = %q, want %q", got, want)
	}
	sha := srv.BranchSHA(t, repo, "main")

	for _, user := range []string{"x-access-token", "anything", srv.Admin} {
		dir := filepath.Join(t.TempDir(), "clone")
		gittest.Git(t, t.TempDir(), "clone", "-q", srv.AuthCloneURL(repo, user, srv.Token), dir)
		if b, err := os.ReadFile(filepath.Join(dir, "src", "main.go")); err != nil || string(b) != "package main\n" {
			t.Fatalf("clone as %s: src/main.go = %q, %v", user, b, err)
		}
		if head := gittest.Git(t, dir, "rev-parse", "HEAD"); head != sha {
			t.Fatalf("clone as %s: HEAD %s, BranchSHA %s", user, head, sha)
		}
		if branch := gittest.Git(t, dir, "symbolic-ref", "--short", "HEAD"); branch != "main" {
			t.Fatalf("default branch %q, want main", branch)
		}
	}

	// Pushing a branch with the token moves it; BranchSHA sees the push.
	dir := filepath.Join(t.TempDir(), "push")
	gittest.Git(t, t.TempDir(), "clone", "-q", srv.AuthCloneURL(repo, "x-access-token", srv.Token), dir)
	gittest.Git(t, dir, "checkout", "-q", "-b", "sbx/box1")
	if err := os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, dir, "add", "new.txt")
	gittest.Git(t, dir, "commit", "-q", "-m", "new")
	gittest.Git(t, dir, "push", "-q", "origin", "sbx/box1")
	if got, want := srv.BranchSHA(t, repo, "sbx/box1"), gittest.Git(t, dir, "rev-parse", "HEAD"); got != want {
		t.Fatalf("BranchSHA(sbx/box1) = %s, want %s", got, want)
	}

	// A wrong token, and another user's token, get nothing of a private
	// repository.
	other := srv.NewUserToken(t, "mallory")
	if other == "" || other == srv.Token {
		t.Fatalf("NewUserToken = %q", other)
	}
	for name, tok := range map[string]string{"wrong token": "0123456789abcdef0123456789abcdef01234567", "other user": other} {
		if _, err := gittest.TryGit(t.TempDir(), "ls-remote", srv.AuthCloneURL(repo, "x-access-token", tok)); err == nil {
			t.Errorf("%s: ls-remote of a private repository worked", name)
		}
	}

	// Statuses land on the commit.
	srv.SetStatus(t, repo, sha, "pending", "ci/build")
	srv.SetStatus(t, repo, sha, "success", "ci/build")
	var combined struct {
		State    string `json:"state"`
		Statuses []struct {
			Context string `json:"context"`
			Status  string `json:"status"`
		} `json:"statuses"`
	}
	srv.API(t, "GET", "/repos/"+repo.Owner+"/"+repo.Name+"/commits/"+sha+"/status", nil, &combined)
	if combined.State != "success" || len(combined.Statuses) != 1 || combined.Statuses[0].Context != "ci/build" {
		t.Fatalf("combined status = %+v, want one success of ci/build", combined)
	}
}
