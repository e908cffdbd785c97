package boxnet

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/base64"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet/gittest"
)

const gitToken = "ghp_boxnetTestToken0123456789abcdefXYZ"

// gitRun runs the real git client with gittest's hermetic environment plus
// extra variables, and returns stdout, stderr and the error.
func gitRun(t *testing.T, dir string, extra []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(gittest.Env(t.TempDir()), extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return strings.TrimSpace(stdout.String()), stderr.String(), err
}

func mustGit(t *testing.T, dir string, extra []string, args ...string) string {
	t.Helper()
	out, stderr, err := gitRun(t, dir, extra, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

type gitFixture struct {
	srv   *gittest.Server
	pol   *testPolicy
	base  string   // http://ADDR/git/box1/
	trace string   // GIT_TRACE_CURL output of every client run
	env   []string // client environment additions
}

func newGitFixture(t *testing.T) *gitFixture {
	t.Helper()
	srv := gittest.New(t, gittest.Options{Token: gitToken})
	srv.CreateRepo("acme", "widget", map[string]string{"README.md": "hi\n"})
	srv.CreateRepo("acme", "other", map[string]string{"README.md": "other\n"})
	// gittest buffers a push body for git http-backend but leaves the
	// request marked chunked, and net/http/cgi refuses that with 400; git
	// (for pushes over http.postBuffer) and the gateway (for decompressed
	// bodies) send chunked, as GitHub accepts. This front buffers the body
	// so such pushes reach http-backend with a length.
	srvURL, _ := url.Parse(srv.URL)
	front := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(srvURL)
		b, err := io.ReadAll(pr.In.Body)
		if err != nil {
			t.Errorf("front: %v", err)
		}
		pr.Out.Body, pr.Out.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		pr.Out.TransferEncoding = nil
	}})
	t.Cleanup(front.Close)
	up := func(name string) *url.URL {
		u, err := url.Parse(front.URL + "/acme/" + name + ".git")
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	pol := newPolicy()
	pol.set("box1", BoxPolicy{Repos: map[string]GitRoute{
		"acme/widget": {Upstream: up("widget"), Token: gitToken, PushBranches: []string{"sbx/box1", "box1/*"}},
	}})
	pol.set("box2", BoxPolicy{Repos: map[string]GitRoute{
		"acme/other": {Upstream: up("other"), Token: gitToken, PushBranches: []string{"sbx/box2"}},
	}})
	s := newTestServer(Config{Policy: pol, PrivateUpstreams: trust(t, front.URL)})
	addr := serveBox(t, s, "box1")
	serveBox(t, s, "box2")
	trace := filepath.Join(t.TempDir(), "trace")
	return &gitFixture{srv: srv, pol: pol, base: "http://" + addr + "/git/box1/", trace: trace,
		env: []string{"GIT_TRACE_CURL=" + trace}}
}

// The real git client clones, fetches and pushes to a delegated branch
// through the endpoint; pushes elsewhere are refused with a message git
// shows; the token is nowhere the box can see.
func TestGitEndpoint(t *testing.T) {
	f := newGitFixture(t)
	work := filepath.Join(t.TempDir(), "widget")
	mustGit(t, ".", f.env, "clone", "-q", f.base+"acme/widget.git", work)
	if b, err := os.ReadFile(filepath.Join(work, "README.md")); err != nil || string(b) != "hi\n" {
		t.Fatalf("clone content %q %v", b, err)
	}

	// Push to the delegated branch, and to one below its prefix.
	os.WriteFile(filepath.Join(work, "a.txt"), []byte("a\n"), 0o644)
	mustGit(t, work, f.env, "add", "a.txt")
	mustGit(t, work, f.env, "commit", "-q", "-m", "box work")
	head := mustGit(t, work, f.env, "rev-parse", "HEAD")
	mustGit(t, work, f.env, "push", "-q", "origin", "HEAD:sbx/box1", "HEAD:refs/heads/box1/feature")
	refs := f.srv.Refs("acme", "widget")
	if refs["refs/heads/sbx/box1"] != head || refs["refs/heads/box1/feature"] != head {
		t.Fatalf("pushed refs = %v, want %s", refs, head)
	}
	mainBefore := refs["refs/heads/main"]

	// Forbidden: main, a tag, and a mix (refused whole: the allowed ref is
	// not created either).
	for _, tc := range []struct {
		refspecs []string
		shown    []string
	}{
		{[]string{"HEAD:main"}, []string{"remote: sbx: box box1 may not push to refs/heads/main in acme/widget", "remote: sbx: allowed branches: sbx/box1, box1/*", "! [remote rejected] HEAD -> main (sbx: not a branch this box may push to)"}},
		{[]string{"HEAD:refs/tags/v1"}, []string{"may not push to refs/tags/v1", "[remote rejected]"}},
		{[]string{"HEAD:box1/other", "HEAD:sbx/box2"}, []string{"may not push to refs/heads/sbx/box2", "box1/other (another ref in this push was refused)"}},
	} {
		_, stderr, err := gitRun(t, work, f.env, append([]string{"push", "origin"}, tc.refspecs...)...)
		if err == nil {
			t.Fatalf("push %v succeeded", tc.refspecs)
		}
		for _, want := range tc.shown {
			if !strings.Contains(stderr, want) {
				t.Fatalf("push %v: git showed\n%s\nwant %q", tc.refspecs, stderr, want)
			}
		}
	}
	refs = f.srv.Refs("acme", "widget")
	if refs["refs/heads/main"] != mainBefore || refs["refs/tags/v1"] != "" || refs["refs/heads/box1/other"] != "" || refs["refs/heads/sbx/box2"] != "" {
		t.Fatalf("a refused push changed the remote: %v", refs)
	}
	var denied *Decision
	for _, d := range f.pol.audited(KindGit) {
		if d.Verdict == Deny && strings.Contains(d.Detail, "refs/heads/main") {
			denied = &d
		}
	}
	if denied == nil || denied.Box != "box1" || denied.Host != "127.0.0.1" || !strings.Contains(denied.Reason, "delegated branches") {
		t.Fatalf("no deny decision for the push to main: %+v", f.pol.audited(KindGit))
	}

	// Fetch sees new upstream work.
	upstreamHead := f.srv.Commit("acme", "widget", "main", "upstream work", map[string]string{"b.txt": "b\n"})
	mustGit(t, work, f.env, "fetch", "-q", "origin")
	if got := mustGit(t, work, f.env, "rev-parse", "origin/main"); got != upstreamHead {
		t.Fatalf("origin/main = %s, want %s", got, upstreamHead)
	}

	// A large push (streamed, chunked, after git's probe request).
	big := make([]byte, 3<<20)
	rand.Read(big)
	os.WriteFile(filepath.Join(work, "big.bin"), big, 0o644)
	mustGit(t, work, f.env, "add", "big.bin")
	mustGit(t, work, f.env, "commit", "-q", "-m", "big")
	mustGit(t, work, f.env, "push", "-q", "origin", "HEAD:sbx/box1")
	if got := f.srv.Refs("acme", "widget")["refs/heads/sbx/box1"]; got != mustGit(t, work, f.env, "rev-parse", "HEAD") {
		t.Fatalf("big push: remote at %s", got)
	}

	// With the box's proxy settings and the gateway's address in the
	// remote URL, as in a box: the proxy serves the git endpoint itself.
	addr := strings.TrimSuffix(strings.TrimPrefix(f.base, "http://"), "/git/box1/")
	if out := mustGit(t, work, f.env, "-c", "http.proxy=http://"+addr, "ls-remote", "http://"+GatewayHost+"/git/box1/acme/widget.git", "main"); !strings.HasSuffix(out, "refs/heads/main") {
		t.Fatalf("ls-remote through the proxy: %q", out)
	}

	// The box's own Authorization never reaches the remote: the gateway's
	// credential replaces it.
	evil := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("attacker:stolen"))
	mustGit(t, work, f.env, "-c", "http.extraHeader="+evil, "ls-remote", "origin")
	reqs := f.srv.Requests()
	if last := reqs[len(reqs)-1]; last.User != "x-access-token" || last.Status != http.StatusOK {
		t.Fatalf("upstream saw %+v", last)
	}

	// The token is in no file of the clone and in no byte the box received.
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + gitToken))
	trace, err := os.ReadFile(f.trace)
	if err != nil || len(trace) == 0 {
		t.Fatalf("trace: %v", err)
	}
	if bytes.Contains(trace, []byte(gitToken)) || bytes.Contains(trace, []byte(basic)) {
		t.Fatal("the token reached the git client")
	}
	if !bytes.Contains(trace, []byte("<= Recv header: HTTP/1.1 200 OK")) {
		t.Fatal("the trace holds no responses: the check above proves nothing")
	}
	filepath.WalkDir(work, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(gitToken)) || bytes.Contains(b, []byte(basic)) {
			t.Errorf("token in %s", p)
		}
		return nil
	})
}

// A repository not delegated to the calling box, or another box's path,
// is not found; nothing reaches the upstream.
func TestGitEndpointRefusesOtherRepos(t *testing.T) {
	f := newGitFixture(t)
	other := strings.Replace(f.base, "/git/box1/", "/git/box2/", 1)
	before := len(f.srv.Requests())
	for _, u := range []string{
		f.base + "acme/other.git",   // delegated to box2, not box1
		other + "acme/other.git",    // box2's path, called by box1
		f.base + "acme/nothere.git", // delegated to nobody
		f.base + "acme/widget.git/../other.git",
	} {
		_, stderr, err := gitRun(t, ".", f.env, "ls-remote", u)
		if err == nil || !strings.Contains(stderr, "not found") {
			t.Fatalf("ls-remote %s: %v\n%s", u, err, stderr)
		}
	}
	work := t.TempDir()
	mustGit(t, work, nil, "init", "-q")
	mustGit(t, work, nil, "commit", "-q", "--allow-empty", "-m", "x")
	if _, stderr, err := gitRun(t, work, f.env, "push", f.base+"acme/other.git", "HEAD:sbx/box1"); err == nil || !strings.Contains(stderr, "not found") {
		t.Fatalf("push to a non-delegated repo: %v\n%s", err, stderr)
	}
	if n := len(f.srv.Requests()); n != before {
		t.Fatalf("%d requests reached the upstream", n-before)
	}
	for _, d := range f.pol.audited(KindGit) {
		if d.Verdict != Deny {
			t.Fatalf("decision %+v", d)
		}
	}
	// Dumb HTTP and other paths under a delegated repo are not served.
	for _, p := range []string{"acme/widget.git/HEAD", "acme/widget.git/objects/info/packs", "acme/widget.git/info/refs"} {
		resp, err := http.Get(f.base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("GET %s: %d", p, resp.StatusCode)
		}
	}
}

// A gzip-encoded push is decompressed before its refs are checked and
// forwarded decompressed: a delete of an allowed branch goes through, a
// delete of main is refused.
func TestGitEndpointGzipPush(t *testing.T) {
	f := newGitFixture(t)
	head := f.srv.Refs("acme", "widget")["refs/heads/main"]
	f.srv.Commit("acme", "widget", "sbx/box1", "box branch", nil)
	branch := f.srv.Refs("acme", "widget")["refs/heads/sbx/box1"]
	push := func(old, ref string) string {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(pktLine(old + " " + zero + " " + ref + "\x00report-status delete-refs\n"))
		zw.Write([]byte("0000"))
		zw.Close()
		req, _ := http.NewRequest(http.MethodPost, f.base+"acme/widget.git/git-receive-pack", &z)
		req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if out := push(head, "refs/heads/main"); !strings.Contains(out, "ng refs/heads/main sbx: not a branch") {
		t.Fatalf("delete main: %q", out)
	}
	if out := push(branch, "refs/heads/sbx/box1"); !strings.Contains(out, "ok refs/heads/sbx/box1") {
		t.Fatalf("delete own branch: %q", out)
	}
	refs := f.srv.Refs("acme", "widget")
	if refs["refs/heads/main"] != head || refs["refs/heads/sbx/box1"] != "" {
		t.Fatalf("refs after the pushes: %v", refs)
	}
}
