package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/gateway/config"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/vm/kube/kubetest"
	"sbx.dev/sbx/vm/vmtest"
)

// The test cluster of hack/cluster (go tool -modfile=tools/go.mod task cluster-up).
const (
	clusterBoxImage = "sbx.local/box:dev"
	// clusterAgentImage is the Debian agent image (`go tool -modfile=tools/go.mod task image`)
	// with this checkout's sbx, as cluster-up imports it.
	clusterAgentImage   = "sbx.local/agent:dev"
	clusterStorageClass = "sbx-test-hostpath"
)

// testCluster is the throwaway cluster and PostgreSQL, with a namespace and
// a database of this test's own.
type testCluster struct {
	dir                        string // SBX_CLUSTER_DIR: its state
	adminKubeconfig            string // cluster-admin
	kubeconfig, namespace, dsn string // kubeconfig: as the gateway's service account
	sealKey                    string // every gateway's SBX_SEAL_KEY
}

// clusterUp returns the test cluster, or skips saying why.
func clusterUp(t *testing.T) testCluster {
	t.Helper()
	testutil.SkipShort(t, "needs the test cluster")
	dir := os.Getenv("SBX_CLUSTER_DIR")
	if dir == "" {
		dir = "/tmp/sbx-cluster"
	}
	kc := os.Getenv("SBX_KUBECONFIG")
	if kc == "" {
		kc = filepath.Join(dir, "kubeconfig")
	}
	dsn := os.Getenv("SBX_POSTGRES_DSN")
	if dsn == "" {
		b, err := os.ReadFile(filepath.Join(dir, "postgres.dsn"))
		if err != nil {
			t.Skipf("no test cluster: %v (run `go tool -modfile=tools/go.mod task cluster-up`)", err)
		}
		dsn = strings.TrimSpace(string(b))
	}
	if _, err := os.Stat(kc); err != nil {
		t.Skipf("no test cluster: %v (run `go tool -modfile=tools/go.mod task cluster-up`)", err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		t.Skipf("no test cluster: the API server of %s does not answer: %v", kc, err)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Skipf("no test cluster: PostgreSQL at %s does not answer: %v", dsn, err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })

	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	ns := "sbx-gw-" + suffix
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	gatewayRBAC(t, cs, ns)
	db := "sbx_gw_" + suffix
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP DATABASE "+db+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", db, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return testCluster{dir: dir, adminKubeconfig: kc, kubeconfig: gatewayKubeconfig(t, kc), namespace: ns, dsn: u.String(), sealKey: base64.StdEncoding.EncodeToString(key)}
}

// gatewayRBAC grants the gateway's service account in ns exactly what
// deploy/rbac.yaml grants it in sbx-boxes, and waits for the namespace's
// default service account (Pods are refused until it exists).
func gatewayRBAC(t *testing.T, cs kubernetes.Interface, ns string) {
	kubetest.ApplyRBAC(t, cs, ns, "../deploy/rbac.yaml")
}

// gatewayKubeconfig writes a copy of the admin kubeconfig that impersonates
// the gateway's service account (deploy/rbac.yaml), so the gateways run
// with the verbs the manifests grant and no more.
func gatewayKubeconfig(t *testing.T, admin string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctxName := cfg.CurrentContext
	kctx := cfg.Contexts[ctxName]
	if kctx == nil || cfg.AuthInfos[kctx.AuthInfo] == nil {
		t.Fatalf("%s: no current context with a user", admin)
	}
	ai := cfg.AuthInfos[kctx.AuthInfo]
	ai.Impersonate = "system:serviceaccount:sbx:sbx-gateway"
	ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:sbx", "system:authenticated"}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// clusterGateway is one `sbx serve` process of the cluster.
type clusterGateway struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	done chan error
	port string
	log  *testutil.SyncBuffer
}

// startClusterGateway runs the real binary against the cluster's database
// and namespace.
func startClusterGateway(t *testing.T, bin string, c testCluster, name, data, adminPub string, extra ...string) *clusterGateway {
	t.Helper()
	_ = os.Remove(filepath.Join(data, AddrFile))
	cmd := exec.Command(bin, append([]string{"serve", "--data", data, "--ssh-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, extra...)...)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"SBX_ADMIN_KEYS=" + adminPub,
		"SBX_SEAL_KEY=" + c.sealKey,
		"SBX_STORE_DSN=" + c.dsn,
		"SBX_VM_BACKEND=kubernetes",
		"SBX_VM_KUBERNETES_KUBECONFIG=" + c.kubeconfig,
		"SBX_VM_KUBERNETES_NAMESPACE=" + c.namespace,
		"SBX_VM_KUBERNETES_IMAGE=" + clusterBoxImage,
		"SBX_VM_KUBERNETES_STORAGE_CLASS=" + clusterStorageClass,
		"SBX_VM_MEMORY_MIB=256", "SBX_VM_WORKSPACE_MIB=64",
		"SBX_LOG_FORMAT=json",
	}
	g := &clusterGateway{t: t, name: name, cmd: cmd, done: make(chan error, 1), log: &testutil.SyncBuffer{}}
	cmd.Stdout, cmd.Stderr = g.log, g.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.done <- cmd.Wait() }()
	t.Cleanup(func() {
		g.kill()
		if t.Failed() {
			t.Logf("gateway %s log:\n%s", name, g.log.String())
		}
	})
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if addrs, ok := testutil.ReadAddrFile(filepath.Join(data, AddrFile), "ssh", "pid"); ok && addrs["pid"] == strconv.Itoa(cmd.Process.Pid) {
			_, g.port, _ = net.SplitHostPort(addrs["ssh"])
			return g
		}
		select {
		case err := <-g.done:
			g.done <- err
			t.Fatalf("gateway %s exited before listening: %v\n%s", name, err, g.log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("gateway %s did not listen within a minute:\n%s", name, g.log.String())
	return nil
}

// kill ends the process at once (SIGKILL): a gateway that dies mid-run.
func (g *clusterGateway) kill() {
	if g.cmd.ProcessState != nil {
		return
	}
	_ = g.cmd.Process.Kill()
	err := <-g.done
	g.done <- err
}

// ssh runs the real OpenSSH client against the gateway; it returns the
// output and the exit status.
func (g *clusterGateway) ssh(key, stdin string, args ...string) (string, int) {
	g.t.Helper()
	cmd := g.sshCmd(key, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		g.t.Fatalf("ssh %v: %v", args, err)
	}
	return string(out), code
}

func (g *clusterGateway) sshCmd(key string, args ...string) *exec.Cmd {
	argv := append([]string{"-i", key, "-p", g.port, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "admin@127.0.0.1"}, args...)
	return exec.Command("ssh", argv...)
}

// newScriptBox delegates task to the script agent and returns the box's
// name from new --json (without it, new's steps go to stderr, which ssh
// here combines with stdout).
func (g *clusterGateway) newScriptBox(key, task string) string {
	g.t.Helper()
	out := g.must(key, "new", "--json", "--agent", "script", task)
	var b struct{ Name string }
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.Name == "" {
		g.t.Fatalf("new --json printed %q (%v)", out, err)
	}
	return b.Name
}

func (g *clusterGateway) must(key string, args ...string) string {
	g.t.Helper()
	out, code := g.ssh(key, "", args...)
	if code != 0 {
		g.t.Fatalf("gateway %s: ssh %s: exit %d: %s", g.name, strings.Join(args, " "), code, out)
	}
	return out
}

// state reads a box's state through the gateway.
func (g *clusterGateway) state(key, box string) string {
	g.t.Helper()
	var st struct {
		State string `json:"state"`
	}
	out := g.must(key, "status", "--json", box)
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		g.t.Fatalf("status %s: %v: %s", box, err, out)
	}
	return st.State
}

func (g *clusterGateway) waitState(key, box, want string, within time.Duration) {
	g.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := g.state(key, box)
		if st == want {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("box %s is %s through gateway %s after %v, want %s", box, st, g.name, within, want)
		}
		time.Sleep(time.Second)
	}
}

// TestClusterTwoGateways runs two real gateway processes on the test
// cluster's PostgreSQL and Kubernetes backend, driven by OpenSSH: a box
// delegated through A is listed, exec'd and attached through B; A is killed
// mid-turn and B follows the turn to its end, with the whole log; an idle
// timer both gateways see puts each box to sleep exactly once.
func TestClusterTwoGateways(t *testing.T) {
	c := clusterUp(t)
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no OpenSSH client: ", err)
	}
	dir := t.TempDir()
	bin, key, pub := clusterTools(t, dir)
	// Long enough for every step before the timer part, short enough to
	// wait for.
	const idle = 50 * time.Second
	idleFlag := "fleet.idle_sleep=" + idle.String()
	dataA, dataB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	a := startClusterGateway(t, bin, c, "A", dataA, pub, "--set", idleFlag)
	b := startClusterGateway(t, bin, c, "B", dataB, pub, "--set", idleFlag)

	// Delegated through A: a turn that says one line, waits, says another.
	// (ssh sends one command line: the task is quoted to stay one word.)
	box := a.newScriptBox(key, `"!say first line`+"\n!sleep 15\n"+`!say second line"`)

	// A client of B follows the log live while A runs the turn.
	follow := b.sshCmd(key, "logs", "-f", box)
	var followed testutil.SyncBuffer
	follow.Stdout, follow.Stderr = &followed, &followed
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	followDone := make(chan error, 1)
	go func() { followDone <- follow.Wait() }()
	t.Cleanup(func() {
		_ = follow.Process.Kill()
		<-followDone
	})

	// Listed, exec'd and attached through B.
	if ls := b.must(key, "ls"); !strings.Contains(ls, box) {
		t.Fatalf("B does not list %s:\n%s", box, ls)
	}
	if got := b.must(key, "exec", box, "--", "cat", "/proc/1/cmdline"); !strings.Contains(got, "pod-agent") {
		t.Fatalf("exec through B ran elsewhere: %q", got)
	}
	att, code := b.ssh(key, "echo attached-via-b\nexit 3\n", "-tt", "attach", box)
	if code != 3 || !strings.Contains(att, "attached-via-b") {
		t.Fatalf("attach through B: exit %d, output %q", code, att)
	}
	// B's copy of the log has what the turn printed so far.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.must(key, "logs", box), "first line") {
		if time.Now().After(deadline) {
			t.Fatalf("B's log of %s lacks the first line", box)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// A dies mid-turn: nothing is lost. B takes the turn over and ends it.
	if st := a.state(key, box); st != "running" {
		t.Fatalf("box %s is %s before A is killed, want running", box, st)
	}
	a.kill()
	if ls := b.must(key, "ls"); !strings.Contains(ls, box) {
		t.Fatalf("B does not list %s after A died:\n%s", box, ls)
	}
	b.waitState(key, box, "done", 90*time.Second)
	logs := b.must(key, "logs", box)
	for _, w := range []string{"first line", "second line", "turn 1 ended: exit 0"} {
		if strings.Count(logs, w) != 1 {
			t.Fatalf("B's log of %s holds %q %d times, want once:\n%s", box, w, strings.Count(logs, w), logs)
		}
	}
	if got := b.must(key, "exec", "--root", box, "--", "cat", "/var/lib/sbx/turns/1.out"); !strings.Contains(got, "second line") {
		t.Fatalf("exec through B after A died: %q", got)
	}

	// A comes back; a second box through B. The idle timer fires on both
	// gateways' ticks, and each box goes to sleep once.
	a = startClusterGateway(t, bin, c, "A2", dataA, pub, "--set", idleFlag)
	// A question asked in a turn B follows is answered through A, which
	// then follows the next turn.
	box2 := b.newScriptBox(key, `"!say starting`+"\n!ask Which word?\n!write README.md {answer}\n"+`!say finished"`)
	a.waitState(key, box2, "waiting", time.Minute)
	// Two users answer at once, one through each gateway: one answer is
	// taken, the other refused (the box's lock holds across gateways).
	type answered struct {
		word string
		out  string
		code int
	}
	res := make(chan answered, 2)
	for g, word := range map[*clusterGateway]string{a: "banana", b: "cherry"} {
		go func() {
			out, code := g.ssh(key, "", "answer", box2, word)
			res <- answered{word, out, code}
		}()
	}
	r1, r2 := <-res, <-res
	if (r1.code == 0) == (r2.code == 0) {
		t.Fatalf("two answers at once through two gateways: %+v and %+v, want exactly one taken", r1, r2)
	}
	word := r1.word
	if r2.code == 0 {
		word = r2.word
	}
	want := map[*clusterGateway][]string{a: {"starting", "Which word?", "finished"}, b: {"starting", "Which word?", "finished"}}
	// The answer's echo is in the log of the gateway it went through.
	if word == "banana" {
		want[a] = append(want[a], "> banana")
	} else {
		want[b] = append(want[b], "> cherry")
	}
	b.waitState(key, box2, "done", time.Minute)
	for g, want := range want {
		logs := g.must(key, "logs", box2)
		for _, w := range want {
			if strings.Count(logs, w) < 1 {
				t.Fatalf("gateway %s's log of %s lacks %q:\n%s", g.name, box2, w, logs)
			}
		}
		if n := strings.Count(logs, "starting"); n != 1 {
			t.Fatalf("gateway %s's log of %s starts %d times:\n%s", g.name, box2, n, logs)
		}
	}
	if got := b.must(key, "exec", box2, "--", "cat", "README.md"); !strings.Contains(got, word) {
		t.Fatalf("the answered turn did not write README.md: %q", got)
	}
	for _, bx := range []string{box, box2} {
		a.waitState(key, bx, "sleeping", idle+time.Minute)
	}
	time.Sleep(12 * time.Second) // two more ticks of each gateway
	var rows []struct {
		Action, Target string
	}
	if err := json.Unmarshal([]byte(b.must(key, "audit", "--json", "--since", "1h")), &rows); err != nil {
		t.Fatal(err)
	}
	for _, bx := range []string{box, box2} {
		n := 0
		for _, r := range rows {
			if r.Action == "box.sleep" && r.Target == bx {
				n++
			}
		}
		if n != 1 {
			t.Errorf("box %s went to sleep %d times, want once", bx, n)
		}
	}
	// Woken through the other gateway, it runs commands again.
	if got := a.must(key, "exec", box, "--", "echo", "awake"); !strings.Contains(got, "awake") {
		t.Fatalf("exec after wake: %q", got)
	}
	// Destroyed through A: the follower on B ends too.
	for _, bx := range []string{box, box2} {
		a.must(key, "rm", bx)
	}
	// Each gateway has its own session with a box's agent: neither cut the
	// other's streams (a follower retrying would hide it).
	for _, g := range []*clusterGateway{a, b} {
		if l := g.log.String(); strings.Contains(l, "connection lost before exit") {
			t.Errorf("gateway %s lost agent connections it did not close:\n%s", g.name, l)
		}
	}
	// The live follower on B saw the whole turn, each line once, and
	// ended with the box (destroyed through the other gateway).
	select {
	case <-followDone:
		followDone <- nil
	case <-time.After(time.Minute):
		t.Fatalf("logs -f through B still runs a minute after rm; so far:\n%s", followed.String())
	}
	for _, w := range []string{"first line", "second line"} {
		if n := strings.Count(followed.String(), w); n != 1 {
			t.Errorf("logs -f through B showed %q %d times, want once:\n%s", w, n, followed.String())
		}
	}
}

// clusterTools builds the real sbx binary and an SSH key in dir; it
// returns the binary, the key and its public half.
func clusterTools(t *testing.T, dir string) (bin, key, pub string) {
	t.Helper()
	bin = filepath.Join(dir, "sbx")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sbx: %v\n%s", err, out)
	}
	key = filepath.Join(dir, "id")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	b, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return bin, key, string(b)
}

// TestClusterMaxDurationOnce: both gateways arm a box's max-duration
// timer; one kills its Pod and the box fails once, seen through both.
func TestClusterMaxDurationOnce(t *testing.T) {
	c := clusterUp(t)
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no OpenSSH client: ", err)
	}
	dir := t.TempDir()
	bin, key, pub := clusterTools(t, dir)
	const maxDur = 20 * time.Second
	flag := "fleet.max_duration=" + maxDur.String()
	a := startClusterGateway(t, bin, c, "A", filepath.Join(dir, "a"), pub, "--set", flag)
	b := startClusterGateway(t, bin, c, "B", filepath.Join(dir, "b"), pub, "--set", flag)
	box := a.newScriptBox(key, `"!sleep 300"`)
	b.waitState(key, box, "failed", maxDur+time.Minute)
	a.waitState(key, box, "failed", 10*time.Second)
	time.Sleep(6 * time.Second) // a tick of each gateway more
	var rows []struct {
		Action, Target, Detail string
	}
	if err := json.Unmarshal([]byte(a.must(key, "audit", "--json", "--since", "1h")), &rows); err != nil {
		t.Fatal(err)
	}
	var fails []string
	for _, r := range rows {
		if r.Action == "box.fail" && r.Target == box {
			fails = append(fails, r.Detail)
		}
	}
	if len(fails) != 1 || !strings.Contains(fails[0], "max duration") {
		t.Fatalf("box %s failed %d times (%q), want once for its max duration", box, len(fails), fails)
	}
	b.must(key, "rm", box)
}

// TestClusterNeedsSharedSealKey: on a shared database a gateway without
// SBX_SEAL_KEY refuses to start, saying why, instead of sealing secrets
// with a key file no other gateway has.
func TestClusterNeedsSharedSealKey(t *testing.T) {
	c := clusterUp(t)
	t.Setenv("SBX_SEAL_KEY", "")
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.SSH.Listen, cfg.HTTP.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.VM.Backend = "none"
	cfg.Store.DSN = c.dsn
	s, err := NewServer(context.Background(), cfg, Options{HomeDir: t.TempDir()})
	if err == nil {
		_ = s.Shutdown(context.Background())
		t.Fatal("started without SBX_SEAL_KEY on a shared database")
	}
	if !strings.Contains(err.Error(), "SBX_SEAL_KEY") || !strings.Contains(err.Error(), "store.dsn") {
		t.Fatalf("error %q does not say what to set", err)
	}
}

// TestClusterClaude: the claude agent in a box Pod (the Debian agent image
// as an OCI image) works as in a QEMU box: the real Claude Code CLI talks to
// the scripted Messages API through the gateway's model endpoint, the guard
// hook sees every tool call, a denied call does not run.
func TestClusterClaude(t *testing.T) {
	c := clusterUp(t)
	sock := filepath.Join(c.dir, "containerd", "containerd.sock")
	if out, err := exec.Command("ctr", "--address", sock, "-n", "k8s.io", "images", "ls", "-q", "name=="+clusterAgentImage).Output(); err != nil || !strings.Contains(string(out), clusterAgentImage) {
		t.Fatalf("the test cluster has no %s (%v): run `go tool -modfile=tools/go.mod task image` and `go tool -modfile=tools/go.mod task cluster-up` (it imports the agent image when one is built)", clusterAgentImage, err)
	}
	g := newBoxGatewayWith(t, claudeScript, func(cfg *config.Config) {
		cfg.VM.Backend = "kubernetes"
		cfg.VM.Kubernetes = config.Kubernetes{Kubeconfig: c.kubeconfig, Namespace: c.namespace,
			StorageClass: clusterStorageClass, Image: clusterAgentImage}
	})
	claudeEndToEnd(t, g)
}

// TestClusterBoxNetwork: a box Pod's one way out is the gateway, as a QEMU
// box's: its delegated repo over the git endpoint (the token added on the
// way out), the egress proxy with its allow-list, the model endpoint with
// the key the box never holds — and nothing else (busybox tools: the test
// image has no curl or git).
func TestClusterBoxNetwork(t *testing.T) {
	c := clusterUp(t)
	g := newBoxGatewayWith(t, nil, func(cfg *config.Config) {
		cfg.VM.Backend = "kubernetes"
		cfg.VM.Kubernetes = config.Kubernetes{Kubeconfig: c.kubeconfig, Namespace: c.namespace,
			StorageClass: clusterStorageClass, Image: clusterBoxImage}
		cfg.VM.MemoryMiB = 256
	})
	ctx := context.Background()
	port := helloUpstream(t)

	b, err := g.f.Delegate(ctx, g.alice, fleet.DelegateRequest{Agent: "script", Task: "!say ready",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget"}}, Allow: []string{fmt.Sprintf("allowed.test:%d", port)}})
	if err != nil {
		t.Fatal(err)
	}
	box := b.Name
	g.waitState(box, fleet.Done)
	sh := func(script string) (string, int) {
		t.Helper()
		p, err := g.f.Exec(ctx, g.alice, box, fleet.ExecRequest{Argv: []string{"sh", "-c", script + " 2>&1"}})
		if err != nil {
			t.Fatal(err)
		}
		p.Stdin().Close()
		out, _ := io.ReadAll(p.Stdout())
		st, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return string(out), st.Code
	}

	// Git: the box's remote is the gateway's endpoint, which answers for
	// the delegated repo only.
	remote, _ := sh("sed -n 's/^[[:space:]]*url = //p' /workspace/widget/.git/config")
	remote = strings.TrimSpace(remote)
	if !strings.HasPrefix(remote, "http://10.0.2.100/git/") || strings.Contains(remote, g.token) {
		t.Fatalf("the box's remote: %q", remote)
	}
	if out, code := sh("wget -q -O- '" + remote + "/info/refs?service=git-upload-pack'"); code != 0 || !strings.Contains(out, "refs/heads/main") {
		t.Errorf("git endpoint: exit %d: %q", code, out)
	}
	other := strings.Replace(remote, "acme/widget", "acme/other", 1)
	if out, code := sh("wget -q -O- '" + other + "/info/refs?service=git-upload-pack'"); code == 0 {
		t.Errorf("an undelegated repo answered: %q", out)
	}

	// The egress proxy: the allow-list decides.
	if out, code := sh(fmt.Sprintf("http_proxy=http://10.0.2.100:80 wget -q -O- http://allowed.test:%d/x", port)); code != 0 || !strings.Contains(out, "hello from allowed.test") {
		t.Errorf("allowed name through the proxy: exit %d: %q", code, out)
	}
	if out, code := sh(fmt.Sprintf("http_proxy=http://10.0.2.100:80 wget -q -O- http://denied.test:%d/x", port)); code == 0 || strings.Contains(out, "hello from") {
		t.Errorf("a name off the list through the proxy: exit %d: %q", code, out)
	}

	// The model endpoint adds the key. (Busybox wget ignores no_proxy and
	// sends a POST through a proxy as a GET: go direct.)
	out, code := sh(`unset http_proxy HTTP_PROXY; wget -q -O- --header 'content-type: application/json' --header 'anthropic-version: 2023-06-01' --header 'x-api-key: not-the-key' ` +
		`--post-data '{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}' http://10.0.2.100/model/v1/messages`)
	if code != 0 || !strings.Contains(out, `"type":"message"`) {
		t.Errorf("model endpoint: exit %d: %q", code, out)
	}
	if reqs := g.model.Requests(); len(reqs) == 0 || reqs[len(reqs)-1].APIKey != g.apiKey {
		t.Errorf("upstream saw %+v", reqs)
	}

	// Nothing else: no interface but loopback, no direct connection to the
	// host, no DNS.
	if out, _ := sh("ls /sys/class/net"); strings.TrimSpace(out) != "lo" {
		t.Errorf("interfaces in the box: %q", out)
	}
	for _, script := range []string{
		fmt.Sprintf("timeout 10 wget -q -O- http://127.0.0.1:%d/", port),
		fmt.Sprintf("timeout 10 wget -q -O- http://%s:%d/", vmtest.OutboundIP(t), port),
		"timeout 10 nslookup example.com",
	} {
		if out, code := sh(script); code == 0 || strings.Contains(out, "hello from") {
			t.Errorf("reachable from the box: %s → %q", script, out)
		}
	}
	// A root in the box cannot bring a network back: CAP_NET_ADMIN is out of
	// its bounding set.
	if out, code := sh("ip link add sbx0 type dummy && ip addr add 192.0.2.9/24 dev sbx0 && ip link set sbx0 up"); code == 0 {
		t.Errorf("the box made itself an interface: %q", out)
	}
	if out, _ := sh("sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status"); capBit(t, out, 12) {
		t.Errorf("CAP_NET_ADMIN in the box's bounding set: %q", out)
	}
	for _, secret := range []string{g.token, g.apiKey} {
		if out, _ := sh("grep -rl '" + secret + "' /workspace /etc /proc/1/environ 2>/dev/null; env | grep -c '" + secret + "'"); strings.TrimSpace(out) != "0" {
			t.Errorf("a secret is inside the box: %q", out)
		}
	}
}

// capBit reports whether capability bit n is set in a hex capability mask
// as /proc/PID/status prints it.
func capBit(t *testing.T, mask string, n uint) bool {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
	if err != nil {
		t.Fatalf("capability mask %q: %v", mask, err)
	}
	return v&(1<<n) != 0
}
