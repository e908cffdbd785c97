package main

// The fault suite's harness: a real `sbx serve` (this test binary run as
// sbx, with the test clock), real QEMU boxes running the script agent, the
// real OpenSSH client, and the faults made the way they happen to an
// operator: signals to processes, a locked database file, a full disk, a
// moved clock. See faults_test.go for the faults and what each asserts.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/gateway/config"
	"sbx.dev/sbx/internal/testutil"
)

// faultGateway is one `sbx serve` of the suite and the state it keeps
// between its restarts (data dir, admin key, clock file).
type faultGateway struct {
	t     *testing.T
	dir   string // keys, logs, the clock file
	data  string
	key   string // the admin's private key
	env   []string
	cmd   *exec.Cmd
	done  chan error
	port  string
	url   string // the web console's base URL
	pid   int
	start int // how many times it started
}

// newFaultGateway prepares a gateway with the agent image and starts it.
func newFaultGateway(t *testing.T) *faultGateway {
	t.Helper()
	if _, err := exec.LookPath("sbx"); err != nil {
		t.Fatalf("sbx (this test binary, put on PATH by TestMain) is missing: %v", err)
	}
	g := &faultGateway{t: t, dir: t.TempDir()}
	// A short data dir: box sockets live under it and a unix socket path
	// has 108 bytes (the subtests' names make t.TempDir long).
	images := testutil.DataDirWithImages(t, ".")
	short, err := os.MkdirTemp("", "sbxf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	ents, _ := os.ReadDir(images)
	for _, e := range ents {
		if err := os.Symlink(filepath.Join(images, e.Name()), filepath.Join(short, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	g.data = short
	g.key = filepath.Join(g.dir, "admin")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "admin", "-f", g.key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(g.key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	set := func(key, value string) { g.env = append(g.env, config.EnvName(key)+"="+value) }
	set("fleet.warm_pool", "0")   // every box boots: the boot is a step faults hit
	set("fleet.idle_sleep", "0")  // boxes sleep when a fault says so
	set("fleet.sleep_ttl", "30m") // the clock fault steps past it
	set("vm.memory_mib", "512")
	set("vm.workspace_mib", "128") // the disk-full fault fills it
	set("log.level", "debug")
	g.env = append(g.env,
		"PATH="+os.Getenv("PATH"), "HOME="+g.dir, "TMPDIR="+os.TempDir(),
		"SBXTEST_GUEST_BINARY="+testutil.GuestBinary(t))
	g.run("SBX_ADMIN_KEYS=" + string(pub))
	t.Cleanup(g.cleanup)
	return g
}

// run starts `sbx serve` and waits until it listens.
func (g *faultGateway) run(extraEnv ...string) {
	g.t.Helper()
	if g.cmd != nil {
		g.t.Fatal("faults: the gateway is already running")
	}
	g.start++
	addrFile := filepath.Join(g.data, "sbx.addr")
	_ = os.Remove(addrFile)
	logf, err := os.OpenFile(g.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		g.t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== start %d\n", g.start)
	cmd := exec.Command("sbx", "serve", "--data", g.data, "--ssh-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--test-clock-file", filepath.Join(g.dir, "clock"))
	cmd.Env = append(append([]string{}, g.env...), extraEnv...)
	cmd.Dir = g.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	g.cmd, g.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for {
		if addrs, ok := testutil.ReadAddrFile(addrFile, "ssh", "url", "pid"); ok && addrs["pid"] == strconv.Itoa(cmd.Process.Pid) {
			_, g.port, _ = net.SplitHostPort(addrs["ssh"])
			g.url = addrs["url"]
			g.pid = cmd.Process.Pid
			return
		}
		select {
		case err := <-done:
			g.cmd = nil
			g.t.Fatalf("sbx serve exited before listening: %v\n%s", err, g.logTail(40))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("sbx serve did not listen within 60 s\n%s", g.logTail(40))
		}
	}
}

// signal sends sig to the gateway; a SIGKILL or SIGTERM also waits for it
// to end.
func (g *faultGateway) signal(sig syscall.Signal) {
	g.t.Helper()
	if g.cmd == nil {
		g.t.Fatal("faults: no gateway running")
	}
	if err := g.cmd.Process.Signal(sig); err != nil {
		g.t.Fatal(err)
	}
	if sig != syscall.SIGKILL && sig != syscall.SIGTERM {
		return
	}
	select {
	case <-g.done:
	case <-time.After(60 * time.Second):
		g.t.Fatalf("the gateway did not end within 60 s of %v", sig)
	}
	g.cmd = nil
}

// cleanup stops the gateway and every machine it left, so a failed fault
// does not leave QEMU behind for the next (the assertions ran before).
func (g *faultGateway) cleanup() {
	if g.cmd != nil {
		_ = g.cmd.Process.Signal(syscall.SIGCONT)
		_ = g.cmd.Process.Kill()
		<-g.done
		g.cmd = nil
	}
	for _, pid := range g.machines() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if g.t.Failed() {
		g.t.Logf("gateway log (tail):\n%s", g.logTail(120))
	}
	// SBX_FAULTS_LOGS keeps every gateway's whole log, for a replay.
	if dir := os.Getenv("SBX_FAULTS_LOGS"); dir != "" {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(g.t.Name()) + ".log"
		_ = os.WriteFile(filepath.Join(dir, name), []byte(g.log()), 0o644)
	}
}

func (g *faultGateway) logPath() string { return filepath.Join(g.dir, "serve.log") }

func (g *faultGateway) log() string {
	b, _ := os.ReadFile(g.logPath())
	return string(b)
}

// logTail is the log's last n lines, without the suite's own SSH sessions.
func (g *faultGateway) logTail(n int) string {
	var lines []string
	for l := range strings.SplitSeq(strings.TrimRight(g.log(), "\n"), "\n") {
		if !strings.Contains(l, `"msg":"ssh session"`) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitLog waits until the gateway's log matches re (after offset from).
func (g *faultGateway) waitLog(from int, re string, within time.Duration) {
	g.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(within)
	for !rx.MatchString(g.log()[from:]) {
		if time.Now().After(deadline) {
			g.t.Fatalf("the gateway log never matched %q within %s\n%s", re, within, g.logTail(40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sshArgs are OpenSSH's arguments as the admin, then args.
func (g *faultGateway) sshArgs(args ...string) []string {
	return append([]string{"-F", "none", "-i", g.key, "-p", g.port, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-T", "127.0.0.1"}, args...)
}

// ssh runs one command over OpenSSH and returns its stdout, stderr and
// exit status (255: ssh itself failed).
func (g *faultGateway) ssh(args ...string) (string, string, int) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", g.sshArgs(args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		g.t.Fatalf("ssh %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// must is ssh that must succeed.
func (g *faultGateway) must(args ...string) string {
	g.t.Helper()
	out, errOut, code := g.ssh(args...)
	if code != 0 {
		g.t.Fatalf("ssh %v: exit %d\n%s%s", args, code, out, errOut)
	}
	return out
}

// faultBox is what the suite reads of a box (`ls --json`).
type faultBox struct {
	Name    string `json:"name"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
	LogSize int64  `json:"log_size"`
	Turns   int    `json:"turns"`
}

// boxes lists every box as the admin sees them.
func (g *faultGateway) boxes() map[string]faultBox {
	g.t.Helper()
	var list []faultBox
	out := g.must("ls", "--json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		g.t.Fatalf("ls --json: %v\n%s", err, out)
	}
	m := map[string]faultBox{}
	for _, b := range list {
		m[b.Name] = b
	}
	return m
}

// box is one box's record; ok is false when it does not exist.
func (g *faultGateway) box(name string) (faultBox, bool) {
	b, ok := g.boxes()[name]
	return b, ok
}

// waitState waits until the box is in one of states and returns it.
func (g *faultGateway) waitState(name string, within time.Duration, states ...string) faultBox {
	g.t.Helper()
	deadline := time.Now().Add(within)
	var b faultBox
	for {
		b, _ = g.box(name)
		for _, s := range states {
			if b.State == s {
				return b
			}
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("box %s: want %v within %s, have %q (%s)\n%s", name, states, within, b.State, b.Reason, g.logTail(40))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// machines are the QEMU processes of this gateway's boxes (their command
// line names a disk under its data dir).
func (g *faultGateway) machines() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	mark := []byte(filepath.Join(g.data, "boxes") + "/")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte("qemu-system")) || !bytes.Contains(b, mark) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// ramDir is where this gateway keeps guest RAM (its log says at start).
func (g *faultGateway) ramDir() string {
	m := regexp.MustCompile(`ram_dir=(\S+)`).FindAllStringSubmatch(g.log(), -1)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1][1]
}

// audit returns the audit rows of action about target.
func (g *faultGateway) audit(action, target string) []map[string]any {
	g.t.Helper()
	out := g.must("audit", "--json", "--limit", "1000")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		g.t.Fatalf("audit --json: %v\n%s", err, out)
	}
	var hit []map[string]any
	for _, r := range rows {
		if r["action"] == action && r["target"] == target {
			hit = append(hit, r)
		}
	}
	return hit
}

// assertNoOrphans destroys every box and checks nothing of theirs is left:
// no QEMU process, no guest RAM file, no box directory.
func (g *faultGateway) assertNoOrphans() {
	g.t.Helper()
	for name, b := range g.boxes() {
		if b.State == "destroyed" {
			continue
		}
		if out, errOut, code := g.ssh("rm", name); code != 0 {
			g.t.Errorf("rm %s after the fault: exit %d %s%s", name, code, out, errOut)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []string
		if pids := g.machines(); len(pids) > 0 {
			left = append(left, fmt.Sprintf("QEMU processes %v", pids))
		}
		if dir := g.ramDir(); dir != "" {
			if ents, _ := os.ReadDir(dir); len(ents) > 0 {
				left = append(left, fmt.Sprintf("%d guest RAM files in %s", len(ents), dir))
			}
		}
		if ents, _ := os.ReadDir(filepath.Join(g.data, "boxes")); len(ents) > 0 {
			left = append(left, fmt.Sprintf("%d box directories", len(ents)))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			g.t.Errorf("orphans after every box was destroyed: %s", strings.Join(left, "; "))
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// transcript is the scripted turn of the suite: n lines, each with its
// number and a checksum of (seed, number), written pause seconds apart.
type transcript struct {
	seed  uint64
	n     int
	pause float64
}

func (tr transcript) sum(i int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%d/%d", tr.seed, i))
	return hex.EncodeToString(h[:6])
}

// task is the script agent's task that writes the transcript.
func (tr transcript) task() string {
	var b strings.Builder
	for i := 1; i <= tr.n; i++ {
		fmt.Fprintf(&b, "!say fault-line %d %s\n", i, tr.sum(i))
		if tr.pause > 0 && i < tr.n {
			fmt.Fprintf(&b, "!sleep %g\n", tr.pause)
		}
	}
	return b.String()
}

var transcriptLine = regexp.MustCompile(`^fault-line (\d+) ([0-9a-f]+)$`)

// check reads log text and returns how many transcript lines it holds; it
// fails the test on a duplicate, a gap, a line out of order or a wrong
// checksum.
func (tr transcript) check(t *testing.T, log string) int {
	t.Helper()
	next := 1
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := transcriptLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		i, _ := strconv.Atoi(m[1])
		switch {
		case i < next:
			t.Fatalf("transcript line %d again after line %d (a duplicate)\n%s", i, next-1, log)
		case i > next:
			t.Fatalf("transcript line %d after line %d (a gap)\n%s", i, next-1, log)
		case m[2] != tr.sum(i):
			t.Fatalf("transcript line %d has checksum %s, want %s", i, m[2], tr.sum(i))
		}
		next++
	}
	return next - 1
}

// delegate starts a box running tr and returns its name.
func (g *faultGateway) delegate(tr transcript) string {
	g.t.Helper()
	out := g.must("new", "--agent", "script", "--json", shellQuote(tr.task()))
	var b faultBox
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.Name == "" {
		g.t.Fatalf("new --json: %v\n%s", err, out)
	}
	return b.Name
}

// faultRNG is the suite's one source of chance, from the printed seed.
func faultRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x5bd1e995)) }

// shellQuote quotes s for the command line OpenSSH sends: it joins its
// arguments with spaces and the server splits them again, so a multi-line
// script must travel quoted.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
