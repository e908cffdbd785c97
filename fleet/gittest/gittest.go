// Package gittest serves bare git repositories over real smart HTTP for
// tests: `git http-backend` behind net/http/cgi, with basic auth that checks
// a token the way GitHub does for HTTPS git (`x-access-token:<token>`, or any
// user name with the token as password). Tests clone, fetch and push with the
// real git client and read the result back from the bare repositories.
//
//	srv := gittest.New(t, gittest.Options{Token: "ghp_test"})
//	srv.CreateRepo("acme", "widget", map[string]string{"README.md": "hi\n"})
//	url := srv.RepoURL("acme", "widget") // http://127.0.0.1:PORT/acme/widget.git
package gittest

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure a Server.
type Options struct {
	// Token is accepted for every repository. Empty, with no Tokens, means
	// no authentication at all.
	Token string
	// Tokens are further tokens, each reaching only the listed repositories
	// ("owner/name"). A valid token asking for another repository gets 404,
	// as GitHub answers for a private repository the token cannot see.
	Tokens map[string][]string
	// Identities are what the API's GET /api/v3/user (GitHub Enterprise's
	// path for github.com's api.github.com/user) answers for a token. A
	// token of Token or Tokens with no entry is user "gittest" with no
	// scopes header and no expiry; any other token gets 401.
	Identities map[string]Identity
}

// Identity is one token's answer from GET /api/v3/user.
type Identity struct {
	Login string
	// Scopes is the X-OAuth-Scopes header as a classic token's; nil sends
	// no header, as for a fine-grained token.
	Scopes []string
	// Expires is sent as GitHub-Authentication-Token-Expiration when set.
	Expires time.Time
}

// Request is one HTTP request the server answered.
type Request struct {
	Method string
	Path   string // URL path, e.g. /acme/widget.git/info/refs
	Query  string
	User   string // basic-auth user name, "" when none was sent
	Status int
}

// Server is a smart-HTTP git server on a loopback port.
type Server struct {
	// URL is the base URL, http://127.0.0.1:PORT (no trailing slash).
	URL string
	// Root holds the bare repositories as Root/owner/name.git.
	Root string

	t    testing.TB
	opts Options
	git  string
	home string

	mu       sync.Mutex
	requests []Request
}

// maxBody bounds a buffered request body (a push of a test repository).
const maxBody = 64 << 20

var repoPath = regexp.MustCompile(`^/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)\.git(/|$)`)

// New starts a server that stops when the test ends. It fails the test when
// git is not installed: tests here use the real client.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("gittest: git is required (apt-get install git): %v", err)
	}
	s := &Server{Root: t.TempDir(), t: t, opts: opts, git: gitPath, home: t.TempDir()}
	hs := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// Env is a hermetic environment for the git client and for http-backend: no
// user or system config, no prompts, fixed identity.
func Env(home string) []string {
	return []string{
		"HOME=" + home,
		"PATH=" + os.Getenv("PATH"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=/bin/false",
		"SSH_ASKPASS=/bin/false",
		"GIT_AUTHOR_NAME=gittest", "GIT_AUTHOR_EMAIL=gittest@example.invalid",
		"GIT_COMMITTER_NAME=gittest", "GIT_COMMITTER_EMAIL=gittest@example.invalid",
		"LC_ALL=C",
	}
}

// Git runs the real git client in dir with a hermetic environment and
// returns its trimmed standard output; it fails the test on error.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := TryGit(dir, args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return out
}

// TryGit is Git that returns the error (with git's stderr) instead of
// failing the test, for tests that expect git to fail.
func TryGit(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	home := filepath.Join(os.TempDir(), "gittest-home")
	cmd.Env = Env(home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("git %s (in %s): %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// RepoURL is the clone URL of owner/name, without credentials.
func (s *Server) RepoURL(owner, name string) string {
	return s.URL + "/" + owner + "/" + name + ".git"
}

// AuthURL is RepoURL with x-access-token:token as credentials.
func (s *Server) AuthURL(owner, name, token string) string {
	return strings.Replace(s.RepoURL(owner, name), "://", "://x-access-token:"+token+"@", 1)
}

// Dir is the bare repository's directory.
func (s *Server) Dir(owner, name string) string {
	return filepath.Join(s.Root, owner, name+".git")
}

// CreateRepo creates a bare repository whose branch main holds one commit
// with files (path → content), and returns that commit's id. No files means
// an empty repository with no commits ("").
func (s *Server) CreateRepo(owner, name string, files map[string]string) string {
	s.t.Helper()
	dir := s.Dir(owner, name)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		s.t.Fatal(err)
	}
	Git(s.t, s.Root, "init", "-q", "--bare", "-b", "main", dir)
	if len(files) == 0 {
		return ""
	}
	return s.Commit(owner, name, "main", "initial commit", files)
}

// Commit adds a commit with files to branch (created from main, or as the
// first commit) of a repository on the server and returns its id.
func (s *Server) Commit(owner, name, branch, message string, files map[string]string) string {
	s.t.Helper()
	work := s.t.TempDir()
	Git(s.t, work, "init", "-q", "-b", branch)
	if _, err := TryGit(work, "fetch", "-q", s.Dir(owner, name), branch); err == nil {
		Git(s.t, work, "reset", "-q", "--hard", "FETCH_HEAD")
	} else if _, err := TryGit(work, "fetch", "-q", s.Dir(owner, name), "main"); err == nil {
		Git(s.t, work, "reset", "-q", "--hard", "FETCH_HEAD")
	}
	for p, content := range files {
		full := filepath.Join(work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
	Git(s.t, work, "add", "-A")
	Git(s.t, work, "commit", "-q", "--allow-empty", "-m", message)
	Git(s.t, work, "push", "-q", s.Dir(owner, name), "HEAD:refs/heads/"+branch)
	return Git(s.t, work, "rev-parse", "HEAD")
}

// Refs returns the repository's refs (e.g. "refs/heads/main") and the
// commit ids they point at.
func (s *Server) Refs(owner, name string) map[string]string {
	s.t.Helper()
	refs := map[string]string{}
	out := Git(s.t, s.Dir(owner, name), "for-each-ref", "--format=%(refname) %(objectname)")
	for _, line := range strings.Split(out, "\n") {
		if ref, id, ok := strings.Cut(line, " "); ok {
			refs[ref] = id
		}
	}
	return refs
}

// Log returns the subjects of the commits reachable from ref, newest first.
func (s *Server) Log(owner, name, ref string) []string {
	s.t.Helper()
	out := Git(s.t, s.Dir(owner, name), "log", "--format=%s", ref)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// Show returns the content of path at ref.
func (s *Server) Show(owner, name, ref, path string) string {
	s.t.Helper()
	return Git(s.t, s.Dir(owner, name), "show", ref+":"+path)
}

// Requests returns the requests answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w}
	user, _, _ := r.BasicAuth()
	defer func() {
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, User: user, Status: rec.status})
		s.mu.Unlock()
	}()
	switch r.URL.Path {
	case "/api/v3/user":
		s.serveUser(rec, r)
		return
	case "/api/v3/user/repos":
		s.serveUserRepos(rec, r)
		return
	}
	m := repoPath.FindStringSubmatch(r.URL.Path)
	if m == nil || strings.Contains(r.URL.Path, "..") {
		http.NotFound(rec, r)
		return
	}
	repo := m[1] + "/" + m[2]
	switch s.authorize(r, repo) {
	case http.StatusUnauthorized:
		rec.Header().Set("WWW-Authenticate", `Basic realm="gittest"`)
		http.Error(rec, "authentication required", http.StatusUnauthorized)
		return
	case http.StatusNotFound:
		http.Error(rec, "Repository not found.", http.StatusNotFound)
		return
	}
	// Buffer the body so http-backend always gets CONTENT_LENGTH (net/http
	// strips Transfer-Encoding: chunked, which git uses for large pushes).
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(rec, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	// The body is whole now: without this net/http/cgi answers 400 to the
	// chunked requests real git sends for large pushes.
	r.TransferEncoding = nil
	r.ContentLength = int64(len(body))
	r.ContentLength = int64(len(body))
	h := &cgi.Handler{
		Path: s.git,
		Root: "/",
		Dir:  s.Root,
		Args: []string{"http-backend"},
		Env: append(Env(s.home),
			"GIT_PROJECT_ROOT="+s.Root,
			"GIT_HTTP_EXPORT_ALL=1",
			// http-backend refuses receive-pack without REMOTE_USER unless
			// the config enables it; the token check above is the gate.
			"REMOTE_USER="+user,
			"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.receivepack", "GIT_CONFIG_VALUE_0=true",
		),
	}
	h.ServeHTTP(rec, r)
}

// serveUser answers GET /api/v3/user as GitHub's REST API does: the
// token comes as "Authorization: Bearer" (or "token"), the login in JSON,
// the scopes and the expiry in headers.
func (s *Server) serveUser(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		tok, _ = strings.CutPrefix(auth, "token ")
	}
	id, known := s.opts.Identities[tok]
	if !known && tok != "" && (equal(tok, s.opts.Token) || s.opts.Tokens[tok] != nil) {
		id, known = Identity{Login: "gittest"}, true
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if !known {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}`)
		return
	}
	if id.Scopes != nil {
		w.Header().Set("X-OAuth-Scopes", strings.Join(id.Scopes, ", "))
	}
	if !id.Expires.IsZero() {
		w.Header().Set("GitHub-Authentication-Token-Expiration", id.Expires.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	json.NewEncoder(w).Encode(map[string]any{"login": id.Login, "id": 1, "type": "User"})
}

// serveUserRepos answers GET /api/v3/user/repos as GitHub's REST API
// does, on one page: the repositories the token reaches (every one for
// Token), each private with "main" as its default branch, most recently
// pushed first.
func (s *Server) serveUserRepos(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		tok, _ = strings.CutPrefix(auth, "token ")
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	reach, known := s.opts.Tokens[tok]
	all := tok != "" && s.opts.Token != "" && equal(tok, s.opts.Token)
	if !known && !all {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}`)
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(s.Root, "*", "*.git"))
	type repo struct {
		full    string
		updated time.Time
	}
	var found []repo
	for _, d := range dirs {
		full := filepath.Base(filepath.Dir(d)) + "/" + strings.TrimSuffix(filepath.Base(d), ".git")
		if !all && !slices.Contains(reach, full) {
			continue
		}
		fi, err := os.Stat(filepath.Join(d, "refs", "heads"))
		if err != nil {
			continue
		}
		found = append(found, repo{full, fi.ModTime()})
	}
	slices.SortFunc(found, func(a, b repo) int { return b.updated.Compare(a.updated) })
	out := []map[string]any{}
	for i, f := range found {
		owner, name, _ := strings.Cut(f.full, "/")
		out = append(out, map[string]any{
			"id": i + 1, "name": name, "full_name": f.full, "owner": map[string]any{"login": owner, "type": "Organization"},
			"private": true, "default_branch": "main", "description": "",
			"html_url": s.URL + "/" + f.full, "clone_url": s.URL + "/" + f.full + ".git",
			"updated_at": f.updated.UTC().Format(time.RFC3339), "pushed_at": f.updated.UTC().Format(time.RFC3339),
		})
	}
	json.NewEncoder(w).Encode(out)
}

// authorize returns 200, 401 (no or wrong token) or 404 (token valid but
// not for this repository).
func (s *Server) authorize(r *http.Request, repo string) int {
	if s.opts.Token == "" && len(s.opts.Tokens) == 0 {
		return http.StatusOK
	}
	_, pass, ok := r.BasicAuth()
	if !ok || pass == "" {
		return http.StatusUnauthorized
	}
	if s.opts.Token != "" && equal(pass, s.opts.Token) {
		return http.StatusOK
	}
	for tok, repos := range s.opts.Tokens {
		if equal(pass, tok) {
			if slices.Contains(repos, repo) {
				return http.StatusOK
			}
			return http.StatusNotFound
		}
	}
	return http.StatusUnauthorized
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
