// Package giteatest starts a real Gitea server for tests: the binary
// hack/gitea/build.sh builds once from the Go module proxy into
// ${SBX_CACHE:-~/.cache/sbx}/gitea/VERSION, on a loopback port, with SQLite
// in the test's temporary directory, an admin user and an access token of
// every scope. Tests drive it through its REST API and with the real git
// client over HTTP (the token as the password, any user name).
//
//	srv := giteatest.New(t)
//	repo := srv.CreateRepo(t, "widget", map[string]string{"README.md": "hi\n"})
//	url := srv.CloneURL(repo) // http://127.0.0.1:PORT/sbxadmin/widget.git
package giteatest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/fleet/gittest"
)

// Server is one running Gitea.
type Server struct {
	// URL is the base URL, http://127.0.0.1:PORT (no trailing slash).
	URL string
	// Admin is the administrator's user name; Token is its API token, with
	// every scope.
	Admin string
	Token string

	bin, dir, conf string
	client         *http.Client
}

// adminName and the password are fixed: every server is its own world.
const (
	adminName = "sbxadmin"
	password  = "giteatest-password-1"
)

// startTimeout bounds a start: migrating a fresh database takes a few
// seconds on an idle machine, longer on a loaded one.
const startTimeout = 90 * time.Second

// New starts a Gitea that stops when the test ends. It fails the test with
// Gitea's log when the binary cannot be built or the server cannot start.
func New(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("giteatest: git is required (apt-get install git): %v", err)
	}
	bin := binary(t)
	dir := t.TempDir()
	s := &Server{Admin: adminName, bin: bin, dir: dir, conf: filepath.Join(dir, "app.ini"), client: &http.Client{Timeout: 60 * time.Second}}

	// Gitea binds a port chosen here: another process may take it between
	// the two, so a start that fails for that is tried on another port.
	// (Handing Gitea the listener as a systemd socket, LISTEN_FDS, does not
	// do: Gitea takes that for a graceful restart and SIGTERMs its parent.)
	for _, d := range []string{"home", "log", "custom"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatalf("giteatest: %v", err)
		}
	}
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := s.start(t)
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(s.logs(), "address already in use") {
			t.Fatalf("giteatest: Gitea (%s) did not start: %v\n%s", bin, err, s.logs())
		}
	}
	web := time.Since(start)
	s.Token = s.createAdmin(t)
	t.Logf("giteatest: Gitea at %s ready in %v (web %v, then the admin)", s.URL, time.Since(start).Round(time.Millisecond), web.Round(time.Millisecond))
	return s
}

// start runs `gitea web` on a free port and waits until it is healthy; it
// stops it when the test ends, or now when it does not get healthy.
func (s *Server) start(t testing.TB) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := os.WriteFile(s.conf, []byte(config(s.dir, filepath.Dir(s.bin), port)), 0o600); err != nil {
		return err
	}
	out, err := os.OpenFile(filepath.Join(s.dir, "gitea.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(s.bin, "web", "--config", s.conf, "--work-path", s.dir, "--custom-path", filepath.Join(s.dir, "custom"))
	cmd.Env = s.env()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := s.waitHealthy(exited); err != nil {
		stop(cmd, exited)
		return err
	}
	t.Cleanup(func() {
		stop(cmd, exited)
		if t.Failed() {
			t.Logf("giteatest: Gitea's output:\n%s", s.logs())
		}
	})
	return nil
}

// config is app.ini: loopback only, no mail, registration, SSH, LFS,
// indexers, cron, actions, packages or OAuth2 (each costs start-up time or
// reaches out), logs in dir/log.
func config(dir, static string, port int) string {
	secret := fmt.Sprintf("giteatest-%d-%d", port, time.Now().UnixNano())
	return fmt.Sprintf(`APP_NAME = giteatest
RUN_MODE = prod
WORK_PATH = %[1]s
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[3]d
ROOT_URL = http://127.0.0.1:%[3]d/
DOMAIN = 127.0.0.1
STATIC_ROOT_PATH = %[2]s
APP_DATA_PATH = %[1]s/data
DISABLE_SSH = true
START_SSH_SERVER = false
LFS_START_SERVER = false
OFFLINE_MODE = true

[database]
DB_TYPE = sqlite3
PATH = %[1]s/data/gitea.db
; Gitea appends this to its SQLite DSN as _journal_mode=...: the rest
; turns off fsync (mattn/go-sqlite3's _sync), a throwaway database's
; migration at start then takes a fraction of the time.
SQLITE_JOURNAL_MODE = WAL&_sync=OFF
LOG_SQL = false

[repository]
ROOT = %[1]s/repos
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = %[4]s
INTERNAL_TOKEN = %[4]s-internal-token-long-enough-for-gitea
PASSWORD_COMPLEXITY = off
MIN_PASSWORD_LENGTH = 8
PASSWORD_CHECK_PWN = false

[service]
DISABLE_REGISTRATION = true
ENABLE_NOTIFY_MAIL = false
REGISTER_EMAIL_CONFIRM = false
DEFAULT_ALLOW_CREATE_ORGANIZATION = true

[mailer]
ENABLED = false

[oauth2]
ENABLED = false

[openid]
ENABLE_OPENID_SIGNIN = false
ENABLE_OPENID_SIGNUP = false

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[queue]
TYPE = channel

[cache]
ADAPTER = memory

[session]
PROVIDER = memory

[cron]
ENABLED = false

[cron.update_checker]
ENABLED = false

[cron.archive_cleanup]
ENABLED = false

[cron.check_repo_stats]
ENABLED = false

[cron.repo_health_check]
ENABLED = false

[actions]
ENABLED = false

[packages]
ENABLED = false

[mirror]
ENABLED = false

[federation]
ENABLED = false

[other]
SHOW_FOOTER_VERSION = false

[log]
MODE = file
LEVEL = Info
ROOT_PATH = %[1]s/log
`, dir, static, port, secret)
}

// env is Gitea's environment: its own HOME (git writes a .gitconfig
// there), no user or system git config.
func (s *Server) env() []string {
	return []string{
		"HOME=" + filepath.Join(s.dir, "home"),
		"PATH=" + os.Getenv("PATH"),
		"GITEA_WORK_DIR=" + s.dir,
		"GIT_CONFIG_NOSYSTEM=1",
		"LC_ALL=C",
	}
}

// binary finds or builds the cached Gitea through hack/gitea/build.sh,
// which pins the version.
func binary(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("giteatest: %v", err)
	}
	script := filepath.Join(root, "hack", "gitea", "build.sh")
	if exec.Command(script, "uptodate").Run() != nil {
		t.Logf("giteatest: building Gitea once with %s (~10 min cold; `go tool -modfile=tools/go.mod task gitea` does it ahead of the tests)", script)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("giteatest: %s: %v\n%s", script, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("%s", strings.TrimSpace(stderr.String()))
	}
	bin := strings.TrimSpace(stdout.String())
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		t.Fatalf("giteatest: %s printed %q, not a binary: %v", script, bin, err)
	}
	return bin
}

// repoRoot is the directory of sbx's go.mod above the working directory
// (a test runs in its package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module sbx.dev/sbx\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no sbx.dev/sbx go.mod above the working directory")
		}
		dir = parent
	}
}

func (s *Server) waitHealthy(exited <-chan error) error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("gitea web exited: %v", err)
		default:
		}
		resp, err := s.client.Get(s.URL + "/api/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /api/healthz: %s", resp.Status)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not healthy after %v: %v", startTimeout, last)
}

// stop ends Gitea: SIGTERM (a graceful stop), then SIGKILL to its process
// group after 10s.
func stop(cmd *exec.Cmd, exited <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// logs is the tail of Gitea's output and log files.
func (s *Server) logs() string {
	var b strings.Builder
	for _, f := range []string{filepath.Join(s.dir, "gitea.out"), filepath.Join(s.dir, "log", "gitea.log")} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		const max = 16 << 10
		if len(data) > max {
			data = data[len(data)-max:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, data)
	}
	return b.String()
}

// createAdmin creates the administrator with `gitea admin user create`
// against the running server's config, and returns its token.
func (s *Server) createAdmin(t testing.TB) string {
	t.Helper()
	cmd := exec.Command(s.bin, "admin", "user", "create", "--config", s.conf, "--work-path", s.dir, "--custom-path", filepath.Join(s.dir, "custom"),
		"--username", adminName, "--password", password, "--email", adminName+"@example.invalid", "--admin",
		"--must-change-password=false", "--access-token", "--access-token-name", "giteatest", "--access-token-scopes", "all")
	cmd.Env = s.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("giteatest: gitea admin user create: %v\n%s\n%s", err, out, s.logs())
	}
	const marker = "Access token was successfully created... "
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if tok, ok := strings.CutPrefix(sc.Text(), marker); ok {
			return strings.TrimSpace(tok)
		}
	}
	t.Fatalf("giteatest: gitea admin user create printed no token:\n%s", out)
	return ""
}

// API calls Gitea's REST API (/api/v1 + path) as the admin, sending body
// as JSON when not nil and decoding the answer into out when not nil. It
// fails the test unless the status is 2xx.
func (s *Server) API(t testing.TB, method, path string, body, out any) {
	t.Helper()
	s.APIAs(t, s.Token, method, path, body, out)
}

// APIAs is API with another user's token.
func (s *Server) APIAs(t testing.TB, token, method, path string, body, out any) {
	t.Helper()
	if status, data, err := s.do(method, path, "token "+token, body, out); err != nil || status/100 != 2 {
		t.Fatalf("giteatest: %s %s: status %d, %v: %s", method, path, status, err, data)
	}
}

func (s *Server) do(method, path, auth string, body, out any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+"/api/v1"+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, nil, err
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, data, fmt.Errorf("decode: %w", err)
		}
	}
	return resp.StatusCode, data, nil
}

// CreateRepo creates a private repository owned by Admin with default
// branch main, and pushes one commit holding files (path → content; an
// empty commit when there are none) with the real git client.
func (s *Server) CreateRepo(t testing.TB, name string, files map[string]string) forge.Repo {
	t.Helper()
	s.API(t, "POST", "/user/repos", map[string]any{"name": name, "private": true, "default_branch": "main", "auto_init": false}, nil)
	r := forge.Repo{Owner: s.Admin, Name: name}
	work := t.TempDir()
	gittest.Git(t, work, "init", "-q", "-b", "main")
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		full := filepath.Join(work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatalf("giteatest: %v", err)
		}
		if err := os.WriteFile(full, []byte(files[p]), 0o644); err != nil {
			t.Fatalf("giteatest: %v", err)
		}
	}
	gittest.Git(t, work, "add", "-A")
	gittest.Git(t, work, "commit", "-q", "--allow-empty", "-m", "initial commit")
	gittest.Git(t, work, "push", "-q", s.AuthCloneURL(r, "x-access-token", s.Token), "main")
	// Gitea marks a repository created empty as not empty after the push's
	// hooks; until then its API answers for branches fail.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var info struct {
			Empty bool `json:"empty"`
		}
		s.API(t, "GET", "/repos/"+r.Owner+"/"+r.Name, nil, &info)
		if !info.Empty {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("giteatest: %s still empty 30s after the push", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CloneURL is r's clone URL without credentials:
// http://127.0.0.1:PORT/owner/name.git.
func (s *Server) CloneURL(r forge.Repo) string {
	return s.URL + "/" + r.Owner + "/" + r.Name + ".git"
}

// AuthCloneURL is CloneURL with user and token as its credentials (Gitea
// takes a token as the password with any user name).
func (s *Server) AuthCloneURL(r forge.Repo, user, token string) string {
	u, err := url.Parse(s.CloneURL(r))
	if err != nil {
		panic(err) // s.URL is ours
	}
	u.User = url.UserPassword(user, token)
	return u.String()
}

// SetStatus sets commit status context on sha to state (pending, success,
// failure, error, warning) as the admin.
func (s *Server) SetStatus(t testing.TB, r forge.Repo, sha, state, context string) {
	t.Helper()
	s.API(t, "POST", "/repos/"+r.Owner+"/"+r.Name+"/statuses/"+sha, map[string]string{
		"state": state, "context": context, "description": context + " is " + state, "target_url": s.URL + "/ci/" + context,
	}, nil)
}

// BranchSHA is the commit branch of r points at.
func (s *Server) BranchSHA(t testing.TB, r forge.Repo, branch string) string {
	t.Helper()
	var b struct {
		Commit struct {
			ID string `json:"id"`
		} `json:"commit"`
	}
	s.API(t, "GET", "/repos/"+r.Owner+"/"+r.Name+"/branches/"+url.PathEscape(branch), nil, &b)
	if b.Commit.ID == "" {
		t.Fatalf("giteatest: branch %s of %s has no commit", branch, r)
	}
	return b.Commit.ID
}

// NewUserToken creates user, a plain (not admin) user, and returns a token
// of every scope for it: for tests of what another account may not do.
func (s *Server) NewUserToken(t testing.TB, user string) string {
	t.Helper()
	s.API(t, "POST", "/admin/users", map[string]any{
		"username": user, "email": user + "@example.invalid", "password": password, "must_change_password": false,
	}, nil)
	// Gitea creates tokens only with the user's password (basic auth).
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	req := map[string]any{"name": "giteatest", "scopes": []string{"all"}}
	basic := "Basic " + basicAuth(user, password)
	status, data, err := s.do("POST", "/users/"+url.PathEscape(user)+"/tokens", basic, req, &tok)
	if err != nil || status != http.StatusCreated || tok.SHA1 == "" {
		t.Fatalf("giteatest: token for %s: status %d, %v: %s", user, status, err, data)
	}
	return tok.SHA1
}

func basicAuth(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}
