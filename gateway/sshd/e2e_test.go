package sshd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// TestBoxCommands runs the commands of issue 5 through the real OpenSSH
// client against a real box.
func TestBoxCommands(t *testing.T) {
	g := newGateway(t)
	const task = "!say hello from the box\n!ask Which word?\n!say got {answer}"
	name := g.newBox("alice", task)

	// The question shows in ls and status; answer answers it.
	if out := g.must("alice", "ls"); !strings.Contains(out, name) || !strings.Contains(out, "NAME") || !strings.Contains(out, "waiting ?") {
		t.Fatalf("ls:\n%s", out)
	}
	var boxes []struct{ Name, Owner, State, Task, Question string }
	if err := json.Unmarshal([]byte(g.must("alice", "ls", "--json")), &boxes); err != nil || len(boxes) != 1 ||
		boxes[0].Name != name || boxes[0].Owner != "alice" || boxes[0].Task != task || strings.TrimSpace(boxes[0].Question) != "Which word?" {
		t.Fatalf("ls --json: %v %+v", err, boxes)
	}
	if out := g.must("alice", "status", name); !strings.Contains(out, "state:") || !strings.Contains(out, "!say hello") ||
		!strings.Contains(out, "question:\nWhich word?") {
		t.Fatalf("status:\n%s", out)
	}
	if out := g.must("alice", "answer", name, "banana"); !strings.Contains(out, "answered") {
		t.Fatalf("answer: %q", out)
	}
	g.waitState("alice", name, fleet.Done)
	out := g.must("alice", "logs", name)
	if !strings.Contains(out, "hello from the box") || !strings.Contains(out, "got banana") {
		t.Fatalf("logs:\n%s", out)
	}
	// --from resumes at a byte offset (a line's start; inside a line the
	// core starts at that line).
	second := strings.Index(out, "\n") + 1
	if from := g.must("alice", "logs", "--from", fmt.Sprint(second), name); from != out[second:] {
		t.Fatalf("logs --from %d: %q, want %q", second, from, out[second:])
	}
	// --json: one object a line, whose texts make the log and whose last
	// resume_from is where the log ends.
	var text strings.Builder
	var last int64 = -1
	for line := range strings.Lines(g.must("alice", "logs", "--json", name)) {
		var rec struct {
			Text       *string `json:"text"`
			ResumeFrom *int64  `json:"resume_from"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Text == nil || rec.ResumeFrom == nil || *rec.ResumeFrom <= last {
			t.Fatalf("logs --json line %q: %v", line, err)
		}
		text.WriteString(*rec.Text)
		last = *rec.ResumeFrom
	}
	if text.String() != out {
		t.Fatalf("logs --json texts %q, want the log %q", text.String(), out)
	}
	if rest := g.must("alice", "logs", "--from", fmt.Sprint(last), name); rest != "" {
		t.Fatalf("logs --from the last resume_from: %q", rest)
	}
	// answer without a question: a one-line conflict, exit 5.
	r := g.run("alice", "", "answer", name, "yes")
	if r.code != 5 || !strings.HasPrefix(r.stderr, "error: ") || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--follow-up") {
		t.Fatalf("answer without question: %+v", r)
	}
	// A follow-up to a finished agent starts a turn; ask is a side question.
	if out := g.must("alice", "answer", "--follow-up", name, "more please"); !strings.Contains(out, "resumed") {
		t.Fatalf("answer --follow-up: %q", out)
	}
	g.waitState("alice", name, fleet.Done)
	if out := g.must("alice", "ask", name, "what is here?"); strings.TrimSpace(out) == "" {
		t.Fatal("ask printed nothing")
	}
	if out := g.must("alice", "keep", name); !strings.Contains(out, "(kept)") {
		t.Fatalf("keep: %q", out)
	}
	if out := g.must("alice", "unkeep", name); strings.Contains(out, "(kept)") {
		t.Fatalf("unkeep: %q", out)
	}
	if out := g.must("alice", "allow", name, "example.com"); !strings.Contains(out, "example.com") {
		t.Fatalf("allow: %q", out)
	}
	if out := g.must("alice", "inbox", name); out != "" {
		t.Fatalf("inbox: %q", out)
	}
	if out := g.must("alice", "diff", "--stat", name); !strings.Contains(out, "file(s)") {
		t.Fatalf("diff --stat: %q", out)
	}

	// logs -f follows until the box is destroyed.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	follow := g.sshCmd(ctx, "alice", nil, "logs", "-f", name)
	var fo bytes.Buffer
	follow.Stdout = &fo
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if out := g.must("alice", "sleep", name); !strings.Contains(out, "sleeping") {
		t.Fatalf("sleep: %q", out)
	}
	if out := g.must("alice", "wake", name); strings.Contains(out, "sleeping") {
		t.Fatalf("wake: %q", out)
	}
	var destroyed struct {
		OK     bool
		Action string
		Box    string
	}
	if err := json.Unmarshal([]byte(g.must("alice", "rm", "--json", name)), &destroyed); err != nil ||
		!destroyed.OK || destroyed.Action != "destroyed" || destroyed.Box != name {
		t.Fatalf("rm --json: %v %+v", err, destroyed)
	}
	if err := follow.Wait(); err != nil {
		t.Fatalf("logs -f after rm: %v", err)
	}
	if !strings.Contains(fo.String(), "hello from the box") {
		t.Fatalf("logs -f printed %q", fo.String())
	}
	r = g.run("alice", "", "status", name)
	if r.code != 3 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("status after rm: %+v", r)
	}
}

// TestBadInput: every refusal is one line on stderr and the exit code of
// its kind (README's "Exit codes": 2 invalid, 3 not found, 4 forbidden),
// and nothing is created.
func TestBadInput(t *testing.T) {
	g := newGateway(t)
	const invalid, notFound, forbidden = 2, 3, 4
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"new", "--agent", "script"}, invalid},        // empty task
		{[]string{"new", "--agent", "gpt", "x"}, invalid},      // unknown profile
		{[]string{"new", "--repo", "acme/nope", "x"}, invalid}, // unknown repo
		{[]string{"new", "--repo", "../../etc", "x"}, invalid}, // bad repo
		{[]string{"new", "--repo", "acme/widget", "--ref", "no-such-branch", "--agent", "script", "x"}, invalid},
		{[]string{"new", "--ref", "main", "x"}, invalid},     // ref without repo
		{[]string{"status", "Bad_Name!"}, invalid},           // outside the box-name rule
		{[]string{"status", "nobox"}, notFound},              // not found
		{[]string{"logs", "--from", "-1", "nobox"}, invalid}, // bad offset
		{[]string{"inbox", "rm", "nobox", "x"}, invalid},     // bad id
		{[]string{"attach", "nobox"}, invalid},               // no terminal
		{[]string{"exec", "nobox"}, invalid},                 // no command
		{[]string{"pool"}, forbidden},                        // admins only
		{[]string{"account", "add", "work"}, invalid},        // no token on stdin
	}
	for _, c := range cases {
		r := g.run("alice", "", c.args...)
		if r.code != c.code || !strings.HasPrefix(r.stderr, "error: ") || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("%v: exit %d stdout %q stderr %q; want one error line and exit %d", c.args, r.code, r.stdout, r.stderr, c.code)
		}
	}
	// A setup script read from stdin that is too large.
	if r := g.run("alice", strings.Repeat("x", fleet.MaxSetupBytes+1), "new", "--agent", "script", "--setup", "-", "x"); r.code != 2 || !strings.Contains(r.stderr, "setup script is") {
		t.Errorf("new --setup - with a large script: %+v", r)
	}
	if boxes, _ := g.fleet.List(context.Background(), g.actors["root"]); len(boxes) != 0 {
		t.Fatalf("bad input created %d box(es)", len(boxes))
	}
}

// TestAccounts: the token goes in on stdin, never on the command line, and
// comes back masked.
func TestAccounts(t *testing.T) {
	g := newGateway(t)
	r := g.run("alice", g.token+"\n", "account", "add", "work", "--probe", "acme/widget")
	if r.code != 0 || strings.Contains(r.stdout+r.stderr, g.token) {
		t.Fatalf("account add: %+v", r)
	}
	out := g.must("alice", "account", "ls")
	if !strings.Contains(out, "work") || strings.Contains(out, g.token) || !strings.Contains(out, g.token[len(g.token)-4:]) {
		t.Fatalf("account ls:\n%s", out)
	}
	g.must("alice", "account", "default", "work")
	if out := g.must("bob", "account", "ls", "--json"); out != "[]\n" {
		t.Fatalf("bob sees alice's accounts: %q", out)
	}
	g.must("alice", "account", "rm", "work")
	if out := g.must("alice", "account", "ls", "--json"); out != "[]\n" {
		t.Fatalf("after rm: %q", out)
	}
	if out := g.must("root", "pool", "--json"); !strings.Contains(out, "target") {
		t.Fatalf("pool: %q", out)
	}
}

// TestOwnership runs every box command, attach, exec, sftp and scp as a
// second user against the first user's box: not-found every time, worded
// exactly like a box that does not exist.
func TestOwnership(t *testing.T) {
	g := newGateway(t)
	name := g.newBox("alice", "!say mine")
	cmds := [][]string{
		{"status", name}, {"logs", name}, {"logs", "-f", name}, {"answer", name, "x"},
		{"answer", "--follow-up", name, "x"}, {"answer", "--force", name, "x"}, {"ask", name, "q"},
		{"inbox", name}, {"inbox", "rm", name, "1"}, {"diff", name}, {"diff", "--stat", name},
		{"sleep", name}, {"wake", name}, {"keep", name}, {"unkeep", name}, {"rm", name},
		{"allow", name}, {"allow", name, "example.com"}, {"exec", name, "--", "true"}, {"extend", name, "1h"},
		{"-tt", "attach", name},
	}
	for _, c := range cmds {
		mine := g.run("bob", "", c...)
		nobody := g.run("bob", "", replace(c, name, "no-such-box")...)
		if mine.code != 3 || !strings.Contains(mine.stderr, "not found") ||
			strings.ReplaceAll(mine.stderr, name, "no-such-box") != nobody.stderr {
			t.Errorf("bob %v: exit %d stderr %q; a missing box says %q", c, mine.code, mine.stderr, nobody.stderr)
		}
	}
	// Files: sftp and scp see nothing of alice's box.
	dst := t.TempDir()
	for _, mode := range [][]string{{}, {"-O"}} {
		args := append(append(g.sshOpts("bob"), "-P", g.port), mode...)
		args = append(args, "127.0.0.1:"+name+"/README.md", dst)
		out, err := exec.Command("scp", args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "not found") && !strings.Contains(strings.ToLower(string(out)), "no such file") {
			t.Errorf("scp %v as bob: %v %s", mode, err, out)
		}
	}
	if out := sftpBatch(t, g, "bob", "ls /\n"); strings.Contains(out, name) {
		t.Errorf("bob's sftp root lists alice's box:\n%s", out)
	}
	// And alice still has it, untouched.
	if b := g.waitState("alice", name, fleet.Done); b.Keep || len(b.Allow) != 0 {
		t.Fatalf("bob changed alice's box: %+v", b)
	}
}

func replace(args []string, from, to string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, from, to)
	}
	return out
}

func sftpBatch(t *testing.T, g *gateway, user, batch string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "batch")
	if err := os.WriteFile(f, []byte(batch), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append(append(g.sshOpts(user), "-P", g.port, "-b", f), "127.0.0.1")
	out, _ := exec.Command("sftp", args...).CombinedOutput()
	return string(out)
}

// TestExec: pipes for scripts, the exit status, stdin's half-close.
func TestExec(t *testing.T) {
	g := newGateway(t)
	name := g.newBox("alice", "!say x")
	if r := g.run("alice", "", "exec", name, "--", "sh", "-c", "'echo out; echo err >&2; exit 7'"); r.code != 7 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("exec exit 7: %+v", r)
	}
	// stdin to EOF: the process sees the client's half-close.
	in := strings.Repeat("line\n", 10000)
	if r := g.run("alice", in, "exec", name, "--", "wc", "-l"); r.code != 0 || strings.TrimSpace(r.stdout) != "10000" {
		t.Fatalf("exec wc -l: %+v", r)
	}
	// tar out of the box, as the script does.
	g.must("alice", "exec", name, "--", "sh", "-c", "'echo hi > /workspace/a.txt'")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := g.sshCmd(ctx, "alice", nil, "exec", name, "--", "tar", "c", "-C", "/workspace", ".")
	tarball, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	list, err := runWithInput(tarball, "tar", "t")
	if err != nil || !strings.Contains(list, "a.txt") {
		t.Fatalf("tar t: %v %s", err, list)
	}
}

// TestExecUser: exec and attach run as the box's unprivileged agent user;
// --root asks for root, and the audit row says who the process ran as.
func TestExecUser(t *testing.T) {
	g := newGateway(t)
	name := g.newBox("alice", "!say x")
	if got := g.must("alice", "exec", name, "--", "id", "-u"); got != "1000\n" {
		t.Errorf("exec runs as uid %q, want the agent user's 1000", got)
	}
	if got := g.must("alice", "exec", name, "--", "sh", "-c", "'grep -E \"^(CapBnd|NoNewPrivs)\" /proc/self/status'"); !strings.Contains(got, "CapBnd:\t0000000000000000") || !strings.Contains(got, "NoNewPrivs:\t1") {
		t.Errorf("exec as the agent user:\n%s", got)
	}
	if got := g.must("alice", "exec", "--root", name, "--", "id", "-u"); got != "0\n" {
		t.Errorf("exec --root runs as uid %q, want 0", got)
	}
	if r := g.run("alice", "", "exec", name, "--", "sh", "-c", "'echo x > /etc/claude-code/managed-settings.json'"); r.code == 0 {
		t.Errorf("exec (the agent user) wrote the managed settings: %+v", r)
	}
	rows, err := g.audit.List(context.Background(), audit.Filter{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Action == "box.exec" && r.Target == name {
			seen[r.Detail] = true
		}
	}
	if !seen["id as root"] || !seen["id as agent"] {
		t.Errorf("audit rows of exec: %v, want \"id as agent\" and \"id as root\"", seen)
	}
}

func runWithInput(in []byte, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestFiles: scp (SFTP mode) and scp -O of a 50 MB file out of a box with
// equal checksums, sftp batch listing and upload, traversal refused.
func TestFiles(t *testing.T) {
	g := newGateway(t)
	name := g.newBox("alice", "!say files")
	g.must("alice", "exec", name, "--", "sh", "-c", "'head -c 50000000 /dev/urandom > /workspace/big.bin && mkdir -p /workspace/sub && echo nested > /workspace/sub/n.txt && ln -s /etc /workspace/etclink && ln -s /etc/passwd /workspace/pw'")
	sum := strings.Fields(g.must("alice", "exec", name, "--", "sha256sum", "/workspace/big.bin"))[0]
	dst := t.TempDir()
	for _, mode := range []string{"sftp", "legacy"} {
		args := append(g.sshOpts("alice"), "-P", g.port)
		if mode == "legacy" {
			args = append(args, "-O")
		}
		local := filepath.Join(dst, mode+".bin")
		args = append(args, "127.0.0.1:"+name+"/big.bin", local)
		if out, err := exec.Command("scp", args...).CombinedOutput(); err != nil {
			t.Fatalf("scp %s: %v %s", mode, err, out)
		}
		if got := fileSum(t, local); got != sum {
			t.Fatalf("scp %s: checksum %s, box has %s", mode, got, sum)
		}
	}
	// Upload with scp -O and a glob download.
	up := filepath.Join(dst, "up.txt")
	if err := os.WriteFile(up, []byte("uploaded\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(append(g.sshOpts("alice"), "-P", g.port, "-O"), up, "127.0.0.1:"+name+"/sub/")
	if out, err := exec.Command("scp", args...).CombinedOutput(); err != nil {
		t.Fatalf("scp -O upload: %v %s", err, out)
	}
	globDir := t.TempDir()
	args = append(append(g.sshOpts("alice"), "-P", g.port, "-O"), "127.0.0.1:"+name+"/sub/*.txt", globDir)
	if out, err := exec.Command("scp", args...).CombinedOutput(); err != nil {
		t.Fatalf("scp -O glob: %v %s", err, out)
	}
	for _, f := range []string{"n.txt", "up.txt"} {
		if _, err := os.Stat(filepath.Join(globDir, f)); err != nil {
			t.Errorf("glob download: %v", err)
		}
	}
	// sftp batch: list the root and a box, upload, read back.
	out := sftpBatch(t, g, "alice", "ls /\nls /"+name+"/sub\nput "+up+" /"+name+"/sftp-up.txt\nget /"+name+"/sftp-up.txt "+filepath.Join(dst, "back.txt")+"\n")
	if !strings.Contains(out, name) || !strings.Contains(out, "n.txt") {
		t.Fatalf("sftp batch:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "back.txt")); err != nil || string(b) != "uploaded\n" {
		t.Fatalf("sftp round trip: %q %v\n%s", b, err, out)
	}
	if got := g.must("alice", "exec", name, "--", "cat", "/workspace/sftp-up.txt"); got != "uploaded\n" {
		t.Fatalf("sftp upload in the box: %q", got)
	}
	// Traversal: none of these may yield the host's or the guest's /etc/passwd.
	for _, p := range []string{name + "/../../etc/passwd", name + "/etclink/passwd", name + "/pw", "/etc/passwd", "../etc/passwd"} {
		for _, mode := range []string{"sftp", "legacy"} {
			local := filepath.Join(t.TempDir(), "x")
			args := append(g.sshOpts("alice"), "-P", g.port)
			if mode == "legacy" {
				args = append(args, "-O")
			}
			args = append(args, "127.0.0.1:"+p, local)
			out, err := exec.Command("scp", args...).CombinedOutput()
			if b, _ := os.ReadFile(local); err == nil || bytes.Contains(b, []byte("root:")) {
				t.Errorf("scp %s %q: err %v, got %d bytes: %s", mode, p, err, len(b), out)
			}
		}
	}
	// And an upload that tries to leave the workspace.
	args = append(append(g.sshOpts("alice"), "-P", g.port, "-O"), up, "127.0.0.1:"+name+"/etclink/evil")
	if out, err := exec.Command("scp", args...).CombinedOutput(); err == nil {
		t.Errorf("scp -O upload through a symlink to /etc succeeded: %s", out)
	}
	if r := g.run("alice", "", "exec", name, "--", "test", "-e", "/etc/evil"); r.code == 0 {
		t.Error("/etc/evil exists in the box")
	}
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestRegressionIdleTimeoutCutsFollow: the idle timeout counts traffic, so
// a quiet `logs -f` was cut after IdleTimeout; a follow keeps its
// connection alive.
func TestRegressionIdleTimeoutCutsFollow(t *testing.T) {
	g := newGatewayWith(t, func(o *Options) { o.IdleTimeout = 2 * time.Second })
	name := g.newBox("alice", "!say quiet")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	follow := g.sshCmd(ctx, "alice", nil, "logs", "-f", name)
	var fo, fe bytes.Buffer
	follow.Stdout, follow.Stderr = &fo, &fe
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- follow.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("logs -f on a quiet box ended after less than 3 idle timeouts: %v %q %q", err, fo.String(), fe.String())
	case <-time.After(7 * time.Second):
	}
	g.must("alice", "rm", name)
	if err := <-exited; err != nil {
		t.Fatalf("logs -f after rm: %v %q", err, fe.String())
	}
	if !strings.Contains(fo.String(), "quiet") {
		t.Fatalf("logs -f printed %q", fo.String())
	}
}

// TestNewSetupFromStdin: `new --setup -` reads the operator's setup script
// from ssh's stdin; it runs as root before the agent, its output in logs.
func TestNewSetupFromStdin(t *testing.T) {
	g := newGateway(t)
	r := g.run("alice", "echo set up by $(id -un)\n", "new", "--agent", "script", "--setup", "-", `"!say agent here"`)
	name := strings.TrimSpace(r.stdout)
	if r.code != 0 || name == "" {
		t.Fatalf("new --setup -: %+v", r)
	}
	g.waitState("alice", name, fleet.Done)
	out := g.must("alice", "logs", name)
	if !strings.Contains(out, "set up by root") || strings.Index(out, "set up by root") > strings.Index(out, "agent here") {
		t.Errorf("logs: the setup's output before the agent's, want:\n%s", out)
	}
}
