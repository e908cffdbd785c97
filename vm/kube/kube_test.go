package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/kube/kubetest"
	"sbx.dev/sbx/vm/vmtest"
)

// The test cluster of `go tool -modfile=tools/go.mod task cluster-up` (hack/cluster/up.sh).
const (
	testImage        = "sbx.local/box:dev"
	testStorageClass = "sbx-test-hostpath"
	gatewayUser      = "system:serviceaccount:sbx:sbx-gateway"
)

func clusterDir() string {
	if d := os.Getenv("SBX_CLUSTER_DIR"); d != "" {
		return d
	}
	return "/tmp/sbx-cluster"
}

type testCluster struct {
	admin   *rest.Config
	cs      kubernetes.Interface
	gateway *rest.Config // the admin's credentials impersonating the gateway's service account
}

// cluster connects to the test cluster, or skips saying why.
func cluster(t testing.TB) *testCluster {
	t.Helper()
	testutil.SkipShort(t, "needs the test cluster")
	path := os.Getenv("SBX_KUBECONFIG")
	if path == "" {
		path = filepath.Join(clusterDir(), "kubeconfig")
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no test cluster: %s missing (run `go tool -modfile=tools/go.mod task cluster-up`)", path)
	}
	admin, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.Discovery().ServerVersion(); err != nil || ctx.Err() != nil {
		t.Skipf("no test cluster: %s is there but the API server does not answer: %v", path, err)
	}
	gw := rest.CopyConfig(admin)
	gw.Impersonate = rest.ImpersonationConfig{UserName: gatewayUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:sbx", "system:authenticated"}}
	return &testCluster{admin: admin, cs: cs, gateway: gw}
}

// namespace makes a namespace for one test with the gateway's Role and
// RoleBinding from deploy/rbac.yaml, so the backend runs with exactly the
// verbs the manifests grant. It is deleted when the test ends.
func (c *testCluster) namespace(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 4)
	rand.Read(b)
	ns := "sbx-test-" + hex.EncodeToString(b)
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	kubetest.ApplyRBAC(t, c.cs, ns, "../../deploy/rbac.yaml")
	return ns
}

func (c *testCluster) backend(t testing.TB, ns string, mod func(*Config)) *Backend {
	t.Helper()
	cfg := Config{REST: c.gateway, Namespace: ns, StorageClass: testStorageClass, Image: testImage, PullPolicy: corev1.PullNever}
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// crash kills the box container's PID 1 from the node, as kill -9 would:
// through this cluster's containerd when its socket is here, else by
// deleting the Pod behind sbx's back.
func (c *testCluster) crash(t *testing.T, ns, name string) {
	ctx := context.Background()
	p, err := c.cs.CoreV1().Pods(ns).Get(ctx, objectName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(clusterDir(), "containerd", "containerd.sock")
	var id string
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == ContainerName {
			id = strings.TrimPrefix(s.ContainerID, "containerd://")
		}
	}
	if _, err := os.Stat(sock); err == nil && id != "" {
		out, err := exec.Command("ctr", "--address", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr tasks kill: %v: %s", err, out)
		}
		return
	}
	t.Logf("no containerd socket at %s: deleting pod %s behind sbx's back instead", sock, p.Name)
	grace := int64(0)
	if err := c.cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
}

// leftovers lists the box's Pod, claim and volume still there. The volume is
// reclaimed by the PV controller after the claim goes; it gets 30 s.
func (c *testCluster) leftovers(t *testing.T, ns, name string) []string {
	ctx := context.Background()
	var left []string
	sel := metav1.ListOptions{LabelSelector: LabelBox + "=" + slug(name)}
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		left = append(left, "pod "+p.Name)
	}
	pvcs, err := c.cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pvcs.Items {
		left = append(left, "claim "+p.Name)
	}
	claimed := func(pv *corev1.PersistentVolume) bool {
		r := pv.Spec.ClaimRef
		return r != nil && r.Namespace == ns && r.Name == objectName(name)
	}
	pvs, err := c.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pv *corev1.PersistentVolume
	for i := range pvs.Items {
		if claimed(&pvs.Items[i]) {
			pv = &pvs.Items[i]
		}
	}
	if pv == nil {
		return left
	}
	w, err := c.cs.CoreV1().PersistentVolumes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pv.Name, ResourceVersion: pvs.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Deleted {
				if pv.Spec.HostPath != nil {
					if _, err := os.Stat(pv.Spec.HostPath.Path); err == nil {
						left = append(left, "directory "+pv.Spec.HostPath.Path)
					}
				}
				return left
			}
		case <-timeout:
			return append(left, "volume "+pv.Name)
		}
	}
}

// TestConformance runs the vm conformance suite on the test cluster, under
// the gateway's own RBAC (deploy/rbac.yaml). Skipped: WakeWithoutSnapshot and
// WakeWithBadSnapshot (no memory snapshots on Kubernetes: every wake is a
// cold boot on the same claim; SleepWake checks that, see NoMemorySnapshot).
func TestConformance(t *testing.T) {
	c := cluster(t)
	ns := c.namespace(t)
	s := vmtest.Setup{
		Backend:   func(t *testing.T) vm.Backend { return c.backend(t, ns, nil) },
		Crash:     func(t *testing.T, name string) { c.crash(t, ns, name) },
		Leftovers: func(t *testing.T, name string) []string { return c.leftovers(t, ns, name) },
		// A Pod recreated on its claim keeps the disk, not the processes.
		NoMemorySnapshot: true,
	}
	vmtest.Run(t, s)
}

// TestKataRuntimeClassFailsClearly: a box whose Pod asks for kata-qemu on a
// node without Kata fails at start with the runtime's own words, and leaves
// no Pod retrying behind.
func TestKataRuntimeClassFailsClearly(t *testing.T) {
	c := cluster(t)
	ns := c.namespace(t)
	ctx := context.Background()
	if _, err := c.cs.NodeV1().RuntimeClasses().Get(ctx, "kata-qemu", metav1.GetOptions{}); err != nil {
		t.Fatalf("RuntimeClass kata-qemu (deploy/runtimeclass.yaml, applied by cluster-up): %v", err)
	}
	m, err := vm.New(ctx, vm.Config{Backend: c.backend(t, ns, func(c *Config) { c.RuntimeClass = "kata-qemu" })})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Create(ctx, "kata", vm.Spec{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b, err := m.Start(ctx, "kata")
	if err == nil {
		t.Fatal("a kata-qemu box started on a node without Kata")
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if b.State != vm.Failed || !strings.Contains(b.Reason, `pod sandbox failed (runtime class "kata-qemu")`) || !strings.Contains(b.Reason, "kata-qemu") {
		t.Fatalf("box %+v, want failed with the sandbox error naming kata-qemu", b)
	}
	if _, err := c.cs.CoreV1().Pods(ns).Get(ctx, objectName("kata"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the failed box's pod is still there: %v", err)
	}
	if err := m.Destroy(ctx, "kata"); err != nil {
		t.Fatal(err)
	}
}

// TestSecondGatewayAttaches: a box started through one gateway is used
// through another (same namespace, its own backend and manager), and the
// work started through the first survives the first going away.
func TestSecondGatewayAttaches(t *testing.T) {
	c := cluster(t)
	ns := c.namespace(t)
	ctx := context.Background()
	m1, err := vm.New(ctx, vm.Config{Backend: c.backend(t, ns, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Create(WithOwner(ctx, "alice"), "Shared_Box.1", vm.Spec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Start(ctx, "Shared_Box.1"); err != nil {
		t.Fatal(err)
	}
	p, err := m1.Exec(ctx, "Shared_Box.1", agent.ExecRequest{Argv: []string{"sh", "-c", "sleep 2; echo done > /workspace/mid-run.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, p.Stdout())
	pod, err := c.cs.CoreV1().Pods(ns).Get(ctx, objectName("Shared_Box.1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Labels[LabelOwner] != "alice" || pod.Labels[LabelBox] != slug("Shared_Box.1") || pod.Annotations[AnnotName] != "Shared_Box.1" {
		t.Fatalf("pod labels %v annotations %v", pod.Labels, pod.Annotations)
	}
	m1.Close() // the first gateway goes away mid-run

	m2, err := vm.New(ctx, vm.Config{Backend: c.backend(t, ns, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if b, err := m2.Get("Shared_Box.1"); err != nil || b.State != vm.Running {
		t.Fatalf("second gateway sees %+v %v", b, err)
	}
	var out bytes.Buffer
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out.Reset()
		q, err := m2.Exec(ctx, "Shared_Box.1", agent.ExecRequest{Argv: []string{"cat", "/workspace/mid-run.txt"}})
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(&out, q.Stdout())
		if st, _ := q.Wait(); st.Code == 0 {
			break
		}
	}
	if out.String() != "done\n" {
		t.Fatalf("work started through the first gateway: %q", out.String())
	}
	if err := m2.Destroy(ctx, "Shared_Box.1"); err != nil {
		t.Fatal(err)
	}
}

// TestEgressAcrossGateways: a box's one way out reaches a gateway while any
// gateway is up — the one that attached last — each through its own network
// path for the box (Config.Egress), not the socket the record names.
func TestEgressAcrossGateways(t *testing.T) {
	c := cluster(t)
	ns := c.namespace(t)
	ctx := context.Background()
	gateway := func(name string) *vm.Manager {
		sock := filepath.Join(t.TempDir(), "gw.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s: %s", name, r.URL.Path)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		b := c.backend(t, ns, func(cfg *Config) {
			cfg.ClientID = name
			cfg.Egress = func(ctx context.Context, box string, _ vm.Spec) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			}
		})
		m, err := vm.New(ctx, vm.Config{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m1 := gateway("gw1")
	const box = "egress-2gw"
	// The record names a socket of the creating gateway only.
	if _, err := m1.Create(ctx, box, vm.Spec{Egress: "/nonexistent/gw1.sock"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Start(ctx, box); err != nil {
		t.Fatal(err)
	}
	sh := func(m *vm.Manager, script string) string {
		t.Helper()
		p, err := m.Exec(ctx, box, agent.ExecRequest{Argv: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		p.Stdin().Close()
		var out bytes.Buffer
		io.Copy(&out, p.Stdout())
		p.Wait()
		return out.String()
	}
	until := func(m *vm.Manager, want string) {
		t.Helper()
		var got string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if got = sh(m, "timeout 10 wget -q -O- http://"+vm.EgressHostname+"/hi 2>&1"); got == want {
				return
			}
		}
		t.Fatalf("the box's egress answers %q, want %q", got, want)
	}
	until(m1, "gw1: /hi")
	if got := strings.Fields(sh(m1, "ls /sys/class/net")); len(got) != 1 || got[0] != "lo" {
		t.Errorf("a box with egress has interfaces %q, want lo only", got)
	}
	m2 := gateway("gw2")
	defer m2.Close()
	until(m2, "gw2: /hi") // the newest gateway carries new connections
	m1.Close()
	until(m2, "gw2: /hi")
	// Sleep and wake through the second gateway: a new Pod, a new session.
	if _, err := m2.Sleep(ctx, box); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Wake(ctx, box); err != nil {
		t.Fatal(err)
	}
	until(m2, "gw2: /hi")
	if err := m2.Destroy(ctx, box); err != nil {
		t.Fatal(err)
	}
}

// TestDenyAllPolicy: the backend creates the box namespace's deny-all
// NetworkPolicy, puts its spec back when someone opened it, and
// deploy/networkpolicy.yaml is the same object.
func TestDenyAllPolicy(t *testing.T) {
	c := cluster(t)
	ns := c.namespace(t)
	ctx := context.Background()
	c.backend(t, ns, nil).Close()
	api := c.cs.NetworkingV1().NetworkPolicies(ns)
	got, err := api.Get(ctx, PolicyName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the backend left no NetworkPolicy: %v", err)
	}
	if !reflect.DeepEqual(got.Spec, DenyAllPolicy(ns).Spec) {
		t.Fatalf("policy spec %+v", got.Spec)
	}
	got.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}} // allow all egress
	if _, err := api.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.backend(t, ns, nil).Close()
	if got, err = api.Get(ctx, PolicyName, metav1.GetOptions{}); err != nil || len(got.Spec.Egress) != 0 {
		t.Fatalf("an opened policy was not put back: %+v %v", got.Spec, err)
	}
}

// TestCapsQuota: vm.max_boxes on a cluster is the namespace's quota: a box
// beyond it is refused with vm.ErrLimit naming the cap, a sleeping box does
// not count, and a gateway with no caps removes the quota.
func TestCapsQuota(t *testing.T) {
	c := cluster(t)
	ns := c.namespace(t)
	ctx := context.Background()
	m, err := vm.New(ctx, vm.Config{Backend: c.backend(t, ns, func(cfg *Config) { cfg.MaxBoxes, cfg.MaxMemoryMiB = 1, 1024 })})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, name := range []string{"one", "two"} {
		if _, err := m.Create(ctx, name, vm.Spec{MemoryMiB: 256}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Start(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	_, err = m.Start(ctx, "two")
	if !errors.Is(err, vm.ErrLimit) || !strings.Contains(err.Error(), "vm.max_boxes 1") || !strings.Contains(err.Error(), "exceeded quota") {
		t.Fatalf("a second box beyond vm.max_boxes 1: %v", err)
	}
	if _, err := m.Sleep(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, "two"); err != nil {
		t.Fatalf("with the first box asleep: %v", err)
	}
	q, err := c.cs.CoreV1().ResourceQuotas(ns).Get(ctx, QuotaName, metav1.GetOptions{})
	if err != nil || q.Spec.Hard.Pods().Value() != 1 || q.Spec.Hard.Name(corev1.ResourceLimitsMemory, resource.BinarySI).Value() != 1024<<20 {
		t.Fatalf("quota %+v %v", q, err)
	}
	c.backend(t, ns, nil).Close()
	if _, err := c.cs.CoreV1().ResourceQuotas(ns).Get(ctx, QuotaName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a gateway with no caps left the quota: %v", err)
	}
	for _, name := range []string{"one", "two"} {
		if err := m.Destroy(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDenyAllPolicyManifest(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/networkpolicy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		t.Fatalf("deploy/networkpolicy.yaml holds a %T", obj)
	}
	want := DenyAllPolicy("sbx-boxes")
	if np.Name != want.Name || np.Namespace != want.Namespace || !reflect.DeepEqual(np.Labels, want.Labels) || !reflect.DeepEqual(np.Spec, want.Spec) {
		t.Fatalf("deploy/networkpolicy.yaml %+v %+v differs from DenyAllPolicy %+v %+v", np.ObjectMeta, np.Spec, want.ObjectMeta, want.Spec)
	}
}

// TestReapStrayPod: a box Pod whose claim was deleted behind sbx's
// back (it stays Terminating while the Pod uses it) is deleted by the next
// gateway that starts, and the claim goes with it.
func TestReapStrayPod(t *testing.T) {
	c := cluster(t)
	ns := c.namespace(t)
	ctx := context.Background()
	m1, err := vm.New(ctx, vm.Config{Backend: c.backend(t, ns, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Create(ctx, "stray", vm.Spec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Start(ctx, "stray"); err != nil {
		t.Fatal(err)
	}
	m1.Close()
	obj := objectName("stray")
	if err := c.cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, obj, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	m2, err := vm.New(ctx, vm.Config{Backend: c.backend(t, ns, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, perr := c.cs.CoreV1().Pods(ns).Get(ctx, obj, metav1.GetOptions{})
		_, cerr := c.cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, obj, metav1.GetOptions{})
		if apierrors.IsNotFound(perr) && apierrors.IsNotFound(cerr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute later: pod %v, claim %v", perr, cerr)
		}
	}
}

func TestObjectNames(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{"a", "fix-flaky", "Fix-Flaky", "fix_flaky", "fix.flaky", "-x", "x-", "0", "...a",
		strings.Repeat("x", 50), strings.Repeat("x", 51), strings.Repeat("Y", 128), "_", "a..b"} {
		if err := vm.ValidName(name); err != nil {
			t.Fatalf("test name %q invalid: %v", name, err)
		}
		obj := objectName(name)
		if prev, ok := seen[obj]; ok {
			t.Errorf("%q and %q both map to %s", prev, name, obj)
		}
		seen[obj] = name
		if errs := validLabel(slug(name)); errs != "" {
			t.Errorf("%q -> label %q: %s", name, slug(name), errs)
		}
		if errs := validDNSLabel(obj); errs != "" {
			t.Errorf("%q -> object %q: %s", name, obj, errs)
		}
	}
	if objectName("fix-flaky") != "sbx-fix-flaky" {
		t.Errorf("a plain name is not kept readable: %s", objectName("fix-flaky"))
	}
}

func FuzzObjectName(f *testing.F) {
	for _, s := range []string{"a", "Fix_It", "..", "x-y.z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if vm.ValidName(name) != nil {
			return
		}
		if e := validDNSLabel(objectName(name)); e != "" {
			t.Fatalf("%q -> %q: %s", name, objectName(name), e)
		}
		if e := validLabel(slug(name)); e != "" {
			t.Fatalf("%q -> label %q: %s", name, slug(name), e)
		}
	})
}

func TestStopped(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want string
	}{
		{"running", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, ""},
		{"oom", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
			Name: ContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}}},
			"exited with code 137 (OOMKilled)"},
		{"evicted", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "low on memory"}}, "pod Failed: Evicted low on memory"},
	} {
		err := stopped(&tc.pod)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func validLabel(v string) string { return strings.Join(validation.IsValidLabelValue(v), "; ") }

func validDNSLabel(v string) string { return strings.Join(validation.IsDNS1123Label(v), "; ") }

// TestManifestsValid has the API server validate every object in deploy/
// (a server-side dry run): the example manifests are what a cluster accepts.
func TestManifestsValid(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	files, _ := filepath.Glob("../../deploy/*.yaml")
	tests, _ := filepath.Glob("../../deploy/test/*.yaml")
	n := 0
	for _, f := range append(files, tests...) {
		if filepath.Base(f) == "kustomization.yaml" {
			continue // kustomize's, not the API server's (gateway.TestClusterDeploy applies it)
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(raw), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				t.Fatal(err)
			}
			dyn, err := dynamic.NewForConfig(c.admin)
			if err != nil {
				t.Fatal(err)
			}
			mapping, err := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.cs.Discovery())).RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatalf("%s: %s: %v", f, gvk, err)
			}
			obj2 := &unstructured.Unstructured{Object: u}
			var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
			if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
				ri = dyn.Resource(mapping.Resource).Namespace(obj2.GetNamespace())
			}
			_, err = ri.Create(ctx, obj2, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Errorf("%s: %s %s: %v", f, gvk.Kind, obj2.GetName(), err)
			}
			n++
		}
	}
	if n < 10 {
		t.Fatalf("validated only %d objects", n)
	}
	t.Logf("%d objects valid", n)
}

// TestExecTransports: both exec transports work under the gateway's RBAC
// (pods/exec create): WebSocket (v5, what Connect tries first) and SPDY (the
// fallback for API servers or proxies without WebSocket exec).
func TestExecTransports(t *testing.T) {
	c := cluster(t)
	ns := c.namespace(t)
	ctx := context.Background()
	be := c.backend(t, ns, nil)
	m, err := vm.New(ctx, vm.Config{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Create(ctx, "transports", vm.Spec{}); err != nil {
		t.Fatal(err)
	}
	defer m.Destroy(ctx, "transports")
	if _, err := m.Start(ctx, "transports"); err != nil {
		t.Fatal(err)
	}
	req := be.cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(objectName("transports")).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: ContainerName, Command: []string{"/usr/local/bin/sbx", "pod-agent", "stats"}, Stdout: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(be.rest, "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(be.rest, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	for name, ex := range map[string]remotecommand.Executor{"websocket": ws, "spdy": spdy} {
		var out bytes.Buffer
		if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out}); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if !strings.Contains(out.String(), `"cpu_ns"`) {
			t.Errorf("%s: stats printed %q", name, out.String())
		}
	}
}
