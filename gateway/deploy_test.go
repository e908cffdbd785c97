package gateway

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"k8s.io/client-go/tools/clientcmd"

	"sbx.dev/sbx/internal/testutil"
)

// TestClusterDeploy deploys the gateway as the README's "Deploying" section
// does: the container image `task gateway-image` builds (deploy/image.sh,
// no Docker daemon), imported into the cluster's containerd as a registry
// would serve it; the Secret created with kubectl; `kubectl apply -k` of an
// overlay of deploy/. The Deployment turns ready on /healthz, and the
// gateway in its Pod answers the real OpenSSH client (with the host key of
// the Secret) and HTTP through kubectl port-forward of its Services, and
// runs a box through its service account.
//
// The overlay only fits the test cluster: one replica on the host network
// (the API server and PostgreSQL listen on the node's loopback, and there is
// no kube-proxy for the kubernetes Service), listening on free loopback
// ports, the test box image on runc.
func TestClusterDeploy(t *testing.T) {
	c := clusterUp(t)
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no OpenSSH client: ", err)
	}
	kc := c.adminKubeconfig
	// kubectl returns what the command printed on stdout; an error carries
	// its stderr.
	kubectl := func(args ...string) (string, error) {
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kc}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := kubectl(args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}

	// kubectl applies what kustomize renders in order: the namespaces first.
	if out := must("kustomize", filepath.Join(repo, "deploy")); !strings.HasPrefix(out, "apiVersion: v1\nkind: Namespace\n") {
		t.Fatalf("kubectl kustomize deploy/ does not start with a Namespace:\n%.300s", out)
	}

	// The image, as `go tool -modfile=tools/go.mod task gateway-image` builds it.
	dir := t.TempDir()
	var b [4]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	image := "sbx.local/gateway-test:" + tag
	bin, archive := filepath.Join(dir, "sbx"), filepath.Join(dir, "gateway-oci.tar")
	for _, step := range [][]string{
		{filepath.Join(repo, "hack/cluster/sbx-binary.sh"), bin},
		{filepath.Join(repo, "deploy/image.sh"), archive, image, bin},
		{"ctr", "--address", filepath.Join(c.dir, "containerd", "containerd.sock"), "-n", "k8s.io", "images", "import", "--no-unpack=false", archive},
	} {
		start := time.Now()
		cmd := exec.Command(step[0], step[1:]...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(step, " "), err, out)
		}
		t.Logf("%s: %v", filepath.Base(step[0]), time.Since(start).Round(100*time.Millisecond))
	}
	t.Cleanup(func() {
		_ = exec.Command("ctr", "--address", filepath.Join(c.dir, "containerd", "containerd.sock"), "-n", "k8s.io", "images", "rm", image).Run()
	})

	// The Secret, as the README has users create it.
	hostKey := filepath.Join(dir, "ssh_host_ed25519_key")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sbx-host", "-f", hostKey).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	userKey, signer := testutil.OpenSSHKey(t)
	adminKeys := filepath.Join(dir, "admin.pub")
	if err := os.WriteFile(adminKeys, gossh.MarshalAuthorizedKey(signer.PublicKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := kubectl("create", "namespace", "sbx"); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
		t.Fatal(err)
	}
	_, _ = kubectl("-n", "sbx", "delete", "secret", "sbx-gateway", "--ignore-not-found")
	must("-n", "sbx", "create", "secret", "generic", "sbx-gateway",
		"--from-literal=store-dsn="+c.dsn,
		"--from-literal=seal-key="+c.sealKey,
		"--from-file=ssh-host-key="+hostKey,
		"--from-file=admin-keys="+adminKeys)

	// The overlay: deploy/ as the base, what differs in this cluster on top.
	sshPort, httpPort := freePort(t), freePort(t)
	api, err := apiServerPort(kc)
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay")
	base, err := filepath.Rel(overlay, filepath.Join(repo, "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- {name: sbx.local/gateway, newName: sbx.local/gateway-test, newTag: %q}
replicas:
- {name: sbx-gateway, count: 1}
configMapGenerator:
- name: sbx-gateway
  namespace: sbx
  behavior: merge
  literals:
  - SBX_SSH_LISTEN=127.0.0.1:%[3]d
  - SBX_HTTP_LISTEN=127.0.0.1:%[4]d
  - SBX_LOG_FORMAT=text
  - SBX_VM_KUBERNETES_IMAGE=%[5]s
  - SBX_VM_KUBERNETES_RUNTIME_CLASS=
  - SBX_VM_KUBERNETES_STORAGE_CLASS=%[6]s
  - SBX_VM_MEMORY_MIB=256
  - SBX_VM_WORKSPACE_MIB=64
patches:
- target: {kind: Deployment, name: sbx-gateway}
  patch: |
    - {op: add, path: /spec/template/spec/hostNetwork, value: true}
    - op: replace
      path: /spec/template/spec/containers/0/ports
      value: [{name: ssh, containerPort: %[3]d}, {name: http, containerPort: %[4]d}]
    - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}}
    - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_PORT, value: %[7]q}}
    - {op: add, path: /spec/template/spec/containers/0/startupProbe/httpGet/host, value: 127.0.0.1}
    - {op: add, path: /spec/template/spec/containers/0/readinessProbe/httpGet/host, value: 127.0.0.1}
    - {op: add, path: /spec/template/spec/containers/0/livenessProbe/httpGet/host, value: 127.0.0.1}
`, filepath.ToSlash(base), tag, sshPort, httpPort, clusterBoxImage, clusterStorageClass, api)
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}

	// Applied in one command; the namespaces, service account and RBAC
	// that cluster-up applied stay for the other tests afterwards.
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := kubectl("-n", "sbx", "describe", "pods", "-l", "app.kubernetes.io/name=sbx-gateway")
			logs, _ := kubectl("-n", "sbx", "logs", "deployment/sbx-gateway", "--all-containers", "--tail", "200")
			t.Logf("gateway Pods:\n%s\ngateway log:\n%s", out, logs)
		}
		if _, err := kubectl("-n", "sbx", "delete", "deployment/sbx-gateway", "service/sbx-ssh", "service/sbx-http", "secret/sbx-gateway",
			"--ignore-not-found", "--wait", "--timeout", "2m"); err != nil {
			t.Error(err)
		}
		if _, err := kubectl("-n", "sbx", "delete", "configmap", "-l", "app.kubernetes.io/part-of=sbx", "--ignore-not-found"); err != nil {
			t.Error(err)
		}
	})
	start := time.Now()
	must("apply", "-k", overlay)
	if _, err := kubectl("-n", "sbx", "rollout", "status", "deployment/sbx-gateway", "--timeout", "3m"); err != nil {
		t.Fatalf("the gateway did not turn ready: %v", err)
	}
	t.Logf("kubectl apply -k → ready: %v", time.Since(start).Round(100*time.Millisecond))

	// Not root inside.
	if id := strings.TrimSpace(must("-n", "sbx", "exec", "deployment/sbx-gateway", "-c", "gateway", "--", "id", "-u")); id != "65532" {
		t.Errorf("the gateway runs as uid %q, want 65532", id)
	}

	// HTTP through the sbx-http Service.
	httpAddr := portForward(t, kc, "svc/sbx-http", 80)
	resp, err := http.Get("http://" + httpAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var health struct{ Status, Version string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &health) != nil || health.Status != "ok" || health.Version == "" {
		t.Fatalf("GET /healthz: %s %s", resp.Status, body)
	}

	// SSH through the sbx-ssh Service, checking the host key is the
	// Secret's: every replica presents it.
	sshAddr := portForward(t, kc, "svc/sbx-ssh", 22)
	host, port, _ := net.SplitHostPort(sshAddr)
	pub, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	known := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(known, fmt.Appendf(nil, "[%s]:%s %s", host, port, pub), 0o600); err != nil {
		t.Fatal(err)
	}
	ssh := func(args ...string) string {
		t.Helper()
		argv := append([]string{"-i", userKey, "-p", port, "-o", "UserKnownHostsFile=" + known, "-o", "StrictHostKeyChecking=yes",
			"-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "admin@" + host}, args...)
		out, err := exec.Command("ssh", argv...).CombinedOutput()
		if err != nil {
			t.Fatalf("ssh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var who struct{ User, Role, Version string }
	if out := ssh("whoami", "--json"); json.Unmarshal([]byte(out), &who) != nil || who.Role != "admin" || who.Version != health.Version {
		t.Fatalf("whoami --json: %q", out)
	}
	ssh("ls")

	// A box, through the gateway's own service account (deploy/rbac.yaml).
	var created struct{ Name string }
	if out := ssh("new", "--json", "--agent", "script", `"!say hello from the deployed gateway"`); json.Unmarshal([]byte(out), &created) != nil || created.Name == "" {
		t.Fatalf("new --json: %q", out)
	}
	box := created.Name
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var st struct{ State string }
		out := ssh("status", "--json", box)
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status %s: %q", box, out)
		}
		if st.State == "done" {
			break
		}
		if st.State == "failed" || time.Now().After(deadline) {
			t.Fatalf("box %s is %s: %s", box, st.State, ssh("logs", box))
		}
		time.Sleep(time.Second)
	}
	if out := ssh("logs", box); !strings.Contains(out, "hello from the deployed gateway") {
		t.Fatalf("logs %s: %q", box, out)
	}
	ssh("rm", box)
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// apiServerPort is the port of the kubeconfig's API server.
func apiServerPort(kubeconfig string) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return "", err
	}
	return u.Port(), nil
}

var forwarding = regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) ->`)

// portForward runs `kubectl port-forward` to port of target (svc/NAME) in
// the sbx namespace until the test ends; it returns the local address.
func portForward(t *testing.T, kubeconfig, target string, port int) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig, "-n", "sbx", "port-forward", target, fmt.Sprintf(":%d", port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testutil.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("kubectl port-forward %s ended: %s", target, stderr.String())
		}
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl port-forward %s printed no address in 30 s: %s", target, stderr.String())
	}
	return ""
}
