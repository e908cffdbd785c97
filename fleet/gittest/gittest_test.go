package gittest

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const token = "ghp_gittestTOKEN0123456789"

func TestCloneAndPushWithToken(t *testing.T) {
	srv := New(t, Options{Token: token})
	first := srv.CreateRepo("acme", "widget", map[string]string{"README.md": "hello\n"})

	work := filepath.Join(t.TempDir(), "clone")
	Git(t, t.TempDir(), "clone", "-q", srv.AuthURL("acme", "widget", token), work)
	if got, _ := os.ReadFile(filepath.Join(work, "README.md")); string(got) != "hello\n" {
		t.Fatalf("cloned README = %q", got)
	}
	if head := Git(t, work, "rev-parse", "HEAD"); head != first {
		t.Fatalf("cloned HEAD %s, want %s", head, first)
	}

	os.WriteFile(filepath.Join(work, "fix.txt"), []byte("fixed\n"), 0o644)
	Git(t, work, "add", "fix.txt")
	Git(t, work, "commit", "-q", "-m", "fix the flaky test")
	Git(t, work, "push", "-q", "origin", "HEAD:refs/heads/fix")
	pushed := Git(t, work, "rev-parse", "HEAD")

	refs := srv.Refs("acme", "widget")
	if refs["refs/heads/fix"] != pushed || refs["refs/heads/main"] != first {
		t.Fatalf("refs after push = %v", refs)
	}
	if log := srv.Log("acme", "widget", "fix"); len(log) != 2 || log[0] != "fix the flaky test" || log[1] != "initial commit" {
		t.Fatalf("log = %q", log)
	}
	if got := srv.Show("acme", "widget", "fix", "fix.txt"); got != "fixed" {
		t.Fatalf("fix.txt on server = %q", got)
	}
	// The user name is free when the password is the token.
	other := filepath.Join(t.TempDir(), "c2")
	url := strings.Replace(srv.RepoURL("acme", "widget"), "://", "://anyone:"+token+"@", 1)
	Git(t, t.TempDir(), "clone", "-q", url, other)
}

func TestNoTokenIs401(t *testing.T) {
	srv := New(t, Options{Token: token})
	srv.CreateRepo("acme", "widget", map[string]string{"a": "1"})

	for name, url := range map[string]string{
		"no credentials": srv.RepoURL("acme", "widget"),
		"wrong token":    srv.AuthURL("acme", "widget", "ghp_wrong"),
		"empty password": strings.Replace(srv.RepoURL("acme", "widget"), "://", "://x-access-token:@", 1),
	} {
		t.Run(name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "c")
			_, err := TryGit(t.TempDir(), "clone", "-q", url, dst)
			if err == nil {
				t.Fatal("clone succeeded without a valid token")
			}
			if _, statErr := os.Stat(dst); !os.IsNotExist(statErr) {
				t.Fatal("failed clone left a directory")
			}
		})
	}
	// The status itself, as a probe sees it.
	resp, err := http.Get(srv.RepoURL("acme", "widget") + "/info/refs?service=git-upload-pack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
		t.Fatalf("no-auth info/refs: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	// A push without the token changes nothing.
	work := filepath.Join(t.TempDir(), "w")
	Git(t, t.TempDir(), "clone", "-q", srv.AuthURL("acme", "widget", token), work)
	Git(t, work, "commit", "-q", "--allow-empty", "-m", "sneaky")
	before := srv.Refs("acme", "widget")
	if _, err := TryGit(work, "push", "-q", srv.RepoURL("acme", "widget"), "HEAD:refs/heads/main"); err == nil {
		t.Fatal("push without token succeeded")
	}
	if after := srv.Refs("acme", "widget"); after["refs/heads/main"] != before["refs/heads/main"] {
		t.Fatal("unauthenticated push moved main")
	}
	var saw401 bool
	for _, r := range srv.Requests() {
		saw401 = saw401 || r.Status == http.StatusUnauthorized
	}
	if !saw401 {
		t.Fatal("request log shows no 401")
	}
}

func TestScopedTokenSeesOnlyItsRepos(t *testing.T) {
	srv := New(t, Options{Tokens: map[string][]string{"tok-a": {"acme/a"}}})
	srv.CreateRepo("acme", "a", map[string]string{"f": "a"})
	srv.CreateRepo("acme", "b", map[string]string{"f": "b"})
	Git(t, t.TempDir(), "clone", "-q", srv.AuthURL("acme", "a", "tok-a"), filepath.Join(t.TempDir(), "a"))
	probe := func(repo string) int {
		req, _ := http.NewRequest("GET", srv.URL+"/acme/"+repo+".git/info/refs?service=git-upload-pack", nil)
		req.SetBasicAuth("x-access-token", "tok-a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := probe("a"); got != http.StatusOK {
		t.Fatalf("own repo: %d", got)
	}
	if got := probe("b"); got != http.StatusNotFound {
		t.Fatalf("other repo: %d, want 404", got)
	}
	if got := probe("missing"); got != http.StatusNotFound {
		t.Fatalf("missing repo: %d, want 404", got)
	}
}

func TestPathOutsideRootRefused(t *testing.T) {
	srv := New(t, Options{})
	srv.CreateRepo("acme", "a", map[string]string{"f": "a"})
	for _, p := range []string{"/../etc/passwd", "/acme/a.git/../../x", "/acme", "/info/refs"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%s: %d, want 404", p, resp.StatusCode)
		}
	}
}

func TestEmptyRepoAndSecondCommit(t *testing.T) {
	srv := New(t, Options{Token: token})
	if id := srv.CreateRepo("acme", "empty", nil); id != "" {
		t.Fatalf("empty repo has commit %s", id)
	}
	if refs := srv.Refs("acme", "empty"); len(refs) != 0 {
		t.Fatalf("empty repo refs %v", refs)
	}
	srv.CreateRepo("acme", "w", map[string]string{"a": "1"})
	id := srv.Commit("acme", "w", "main", "second", map[string]string{"b": "2"})
	if srv.Refs("acme", "w")["refs/heads/main"] != id || srv.Show("acme", "w", "main", "a") != "1" {
		t.Fatal("second commit lost the first's files or did not land")
	}
}
