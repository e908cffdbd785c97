// Package kube is a vm.Backend on Kubernetes: a box is a Pod whose
// /workspace is a PersistentVolumeClaim. On real nodes the Pod runs under a
// Kata Containers RuntimeClass (each Pod a QEMU microVM); without one it is an
// ordinary container, which tests the gateway's path but isolates nothing.
//
// Objects, all in one namespace, named "sbx-" + a DNS-safe form of the box
// name (see objectName) and labelled sbx.dev/box (that form),
// sbx.dev/owner (only when WithOwner gave one: tests do, the gateway does
// not) and app.kubernetes.io/managed-by=sbx:
//   - the claim lives from Create to Destroy and carries the box record
//     (annotation sbx.dev/record, the vm.Box as JSON) so any gateway finds it;
//   - the Pod lives from Start to Sleep, Kill or Destroy. Its container runs
//     `sbx pod-agent serve` (package podagent); Connect execs
//     `sbx pod-agent bridge` through the API server (WebSocket, falling back
//     to SPDY) and the exec's stdin/stdout is the agent byte stream, so exec,
//     PTYs, resize, signals and files all go through the same agent protocol
//     as on QEMU, confined to /workspace by the agent. A box with
//     vm.Spec.Egress reaches the gateway the same way in the other direction
//     (egress.go); the namespace's deny-all NetworkPolicy (policy.go) shuts
//     the Pod network.
//
// Its records (records.go) are the claims: a vm.Manager over the backend
// keeps state only there, so every gateway of a cluster sees and drives
// every box.
//
// Sleep deletes the Pod and keeps the claim; Wake creates a new Pod on it, a
// cold boot every time (there is no memory snapshot on Kubernetes). Before
// sbx deletes a Pod it annotates it (sbx.dev/stop), so every gateway's Wait
// tells a requested stop from a crash. Pod and claim state come from
// informers (watches), never polling.
package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/guest/podagent"
)

// Labels and annotations sbx puts on its objects.
const (
	LabelBox     = "sbx.dev/box"   // DNS-safe form of the box name
	LabelOwner   = "sbx.dev/owner" // the owner, when it is a valid label value
	LabelManaged = "app.kubernetes.io/managed-by"
	managedBy    = "sbx"
	AnnotName    = "sbx.dev/name"   // the exact box name
	AnnotOwner   = "sbx.dev/owner"  // the exact owner
	AnnotRecord  = "sbx.dev/record" // the vm.Box as JSON (on the claim)
	AnnotStop    = "sbx.dev/stop"   // why sbx is deleting the Pod: sleep, kill, destroy
)

// ContainerName is the box container in the Pod.
const ContainerName = "box"

// WakeReason is the cold-boot reason of every wake.
const WakeReason = "kubernetes: no memory snapshot"

// Config configures the backend. Zero fields take the defaults named.
type Config struct {
	// Kubeconfig is a kubeconfig file; empty uses the in-cluster config
	// (the gateway's service account).
	Kubeconfig string
	// REST, when set, is used instead of Kubeconfig.
	REST *rest.Config
	// Namespace holds the boxes (default "sbx-boxes").
	Namespace string
	// RuntimeClass is the Pods' runtimeClassName: "kata-qemu" on Kata
	// nodes, empty for the node's default runtime (runc: no VM isolation).
	RuntimeClass string
	// StorageClass of the workspace claims; empty = the cluster's default.
	StorageClass string
	// Image is the box image (spec images "" and "agent"); its sbx must have
	// the pod-agent command. Images maps other spec image names.
	Image  string
	Images map[string]string
	// PullPolicy of the box container (default IfNotPresent).
	PullPolicy corev1.PullPolicy
	// CPURequestMilli is the CPU request per vCPU (default 250); the limit
	// is the full vCPU count. Memory request = limit = the spec's memory.
	CPURequestMilli int64
	// StartTimeout bounds Start waiting for the container to run (default 2 min).
	StartTimeout time.Duration
	// ClientID names this gateway to the boxes' agents, which keep one
	// session per client (podagent.ClientHeader): gateways sharing the boxes
	// never cut each other's connections. Default: random per Backend.
	ClientID string
	// MaxBoxes and MaxMemoryMiB cap the namespace's running boxes and their
	// memory (vm.max_boxes, vm.max_memory_mib; 0: no cap), through a
	// ResourceQuota the backend keeps (CapsQuota).
	MaxBoxes, MaxMemoryMiB int
	// Egress dials this gateway's network path for a box that asked for
	// egress (vm.Spec.Egress not empty), once per connection the box opens
	// to vm.EgressAddr. nil: the unix socket Spec.Egress names (one
	// gateway); a cluster's gateways each give their own path, since the
	// socket the record names is the creating gateway's.
	Egress func(ctx context.Context, box string, spec vm.Spec) (net.Conn, error)
	Logger *slog.Logger
}

// Backend is the Kubernetes vm.Backend.
type Backend struct {
	cfg  Config
	log  *slog.Logger
	rest *rest.Config
	cs   kubernetes.Interface
	ns   string

	pods, claims cache.SharedIndexInformer
	stop         context.CancelFunc

	mu      sync.Mutex
	changed map[string]chan struct{}   // object name → closed at its next change
	gone    map[string]*corev1.Pod     // object name → last state of its deleted Pod
	cpu     map[string]cpuSample       // box → previous Stats sample
	egress  map[types.UID]*egressState // Pods this gateway has an egress session with
	bg      context.Context            // ends at Close
}

type cpuSample struct {
	at    time.Time
	nanos int64
}

var _ vm.Backend = (*Backend)(nil)

// New connects to the cluster and starts the watches of the namespace's
// box Pods and claims; it returns once both caches are filled.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	rc := cfg.REST
	if rc == nil {
		var err error
		if cfg.Kubeconfig != "" {
			rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		} else {
			rc, err = rest.InClusterConfig()
		}
		if err != nil {
			return nil, fmt.Errorf("kubernetes backend: client config: %w", err)
		}
	}
	rc = rest.CopyConfig(rc)
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "sbx-boxes"
	}
	if cfg.PullPolicy == "" {
		cfg.PullPolicy = corev1.PullIfNotPresent
	}
	if cfg.CPURequestMilli <= 0 {
		cfg.CPURequestMilli = 250
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	if cfg.Image == "" {
		return nil, errors.New("kubernetes backend: no box image configured")
	}
	if cfg.ClientID == "" {
		var r [8]byte
		_, _ = rand.Read(r[:])
		cfg.ClientID = hex.EncodeToString(r[:])
	}
	if len(cfg.ClientID) > podagent.MaxClientID || strings.ContainsAny(cfg.ClientID, "\n\r") {
		return nil, fmt.Errorf("kubernetes backend: client id %q: at most %d bytes, one line", cfg.ClientID, podagent.MaxClientID)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	b := &Backend{cfg: cfg, log: log.With("backend", "kubernetes", "namespace", cfg.Namespace), rest: rc, cs: cs, ns: cfg.Namespace,
		changed: map[string]chan struct{}{}, gone: map[string]*corev1.Pod{}, cpu: map[string]cpuSample{},
		egress: map[types.UID]*egressState{}}
	if err := b.ensurePolicy(ctx); err != nil {
		return nil, err
	}
	if err := b.ensureQuota(ctx); err != nil {
		return nil, err
	}
	sel := func(o *metav1.ListOptions) { o.LabelSelector = LabelManaged + "=" + managedBy }
	b.pods = coreinformers.NewFilteredPodInformer(cs, b.ns, 0, cache.Indexers{}, sel)
	b.claims = coreinformers.NewFilteredPersistentVolumeClaimInformer(cs, b.ns, 0, cache.Indexers{}, sel)
	for _, inf := range []cache.SharedIndexInformer{b.pods, b.claims} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    b.onChange,
			UpdateFunc: func(_, o any) { b.onChange(o) },
			DeleteFunc: b.onDelete,
		}); err != nil {
			return nil, fmt.Errorf("kubernetes backend: %w", err)
		}
	}
	ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.stop, b.bg = cancel, ictx
	go b.pods.RunWithContext(ictx)
	go b.claims.RunWithContext(ictx)
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), b.pods.HasSynced, b.claims.HasSynced) {
		cancel()
		return nil, fmt.Errorf("kubernetes backend: list pods and claims in %s: %w", b.ns, context.Cause(sctx))
	}
	// A Pod listed before its claim was found no record asking for egress:
	// now both caches are full, attach to every running box that asked.
	for _, o := range b.pods.GetStore().List() {
		b.attachEgress(o.(*corev1.Pod))
	}
	return b, nil
}

// Close stops the watches. Pods keep running.
func (b *Backend) Close() error {
	b.stop()
	return nil
}

type ownerKey struct{}

// WithOwner returns a context under which Create labels the box's objects
// with owner (sbx.dev/owner). Only tests call it: the vm.Manager knows no
// owners, and the core, which may not import this package, passes none.
func WithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

var dnsSafe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,48}[a-z0-9])?$`)

// objectName maps a box name ([A-Za-z0-9_.-]{1,128}) to a DNS label: the
// name itself when it is a short lowercase DNS label, else a sanitized prefix
// and 16 hex digits of its SHA-256 (distinct for names differing in case).
func objectName(box string) string { return "sbx-" + slug(box) }

func slug(box string) string {
	if dnsSafe.MatchString(box) {
		return box
	}
	var s strings.Builder
	for _, c := range strings.ToLower(box) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			s.WriteRune(c)
		} else if s.Len() > 0 {
			s.WriteByte('-')
		}
		if s.Len() >= 40 {
			break
		}
	}
	h := sha256.Sum256([]byte(box))
	p := strings.Trim(s.String(), "-")
	if p != "" {
		p += "-"
	}
	return p + hex.EncodeToString(h[:8])
}

func (b *Backend) key(obj string) string { return b.ns + "/" + obj }

func (b *Backend) onChange(o any) {
	if m, ok := o.(metav1.Object); ok {
		b.poke(m.GetName())
	}
	if p, ok := o.(*corev1.Pod); ok {
		b.attachEgress(p)
	}
}

func (b *Backend) onDelete(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if p, ok := o.(*corev1.Pod); ok {
		b.mu.Lock()
		b.gone[p.Name] = p
		b.mu.Unlock()
	}
	b.onChange(o)
}

// poke wakes everyone waiting for a change of obj.
func (b *Backend) poke(obj string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ch, ok := b.changed[obj]; ok {
		close(ch)
		delete(b.changed, obj)
	}
}

// changes returns a channel closed at obj's next change. Take it before
// reading the cache, so no change between the two is missed.
func (b *Backend) changes(obj string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.changed[obj]
	if !ok {
		ch = make(chan struct{})
		b.changed[obj] = ch
	}
	return ch
}

// pod returns the cached Pod of obj, nil when there is none.
func (b *Backend) pod(obj string) *corev1.Pod {
	o, ok, err := b.pods.GetStore().GetByKey(b.key(obj))
	if err != nil || !ok {
		return nil
	}
	return o.(*corev1.Pod)
}

func (b *Backend) claim(obj string) *corev1.PersistentVolumeClaim {
	o, ok, err := b.claims.GetStore().GetByKey(b.key(obj))
	if err != nil || !ok {
		return nil
	}
	return o.(*corev1.PersistentVolumeClaim)
}

// waitFor calls check at every change of obj until it reports done.
func (b *Backend) waitFor(ctx context.Context, obj string, check func() (bool, error)) error {
	for {
		ch := b.changes(obj)
		done, err := check()
		if done || err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (b *Backend) labels(box, owner string) map[string]string {
	l := map[string]string{LabelManaged: managedBy, LabelBox: slug(box)}
	if owner != "" && len(validation.IsValidLabelValue(owner)) == 0 {
		l[LabelOwner] = owner
	}
	return l
}

// Create makes the box's workspace claim, which carries its record.
func (b *Backend) Create(ctx context.Context, box vm.Box) error {
	if _, err := b.image(box.Spec.Image); err != nil {
		return err
	}
	owner, _ := ctx.Value(ownerKey{}).(string)
	rec, err := json.Marshal(box)
	if err != nil {
		return err
	}
	ann := map[string]string{AnnotName: box.Name, AnnotRecord: string(rec)}
	if owner != "" {
		ann[AnnotOwner] = owner
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(box.Name), Namespace: b.ns, Labels: b.labels(box.Name, owner), Annotations: ann},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(int64(box.Spec.WorkspaceMiB)<<20, resource.BinarySI),
			}},
		},
	}
	if b.cfg.StorageClass != "" {
		pvc.Spec.StorageClassName = &b.cfg.StorageClass
	}
	_, err = b.cs.CoreV1().PersistentVolumeClaims(b.ns).Create(ctx, pvc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubernetes: claim %s: %w", pvc.Name, vm.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("kubernetes: create claim %s: %w", pvc.Name, err)
	}
	return nil
}

func (b *Backend) image(name string) (string, error) {
	if name == "" || name == "agent" {
		return b.cfg.Image, nil
	}
	if img, ok := b.cfg.Images[name]; ok {
		return img, nil
	}
	return "", fmt.Errorf("kubernetes: no container image configured for box image %q", name)
}

// record reads the box record from its claim (through the API: Create may
// have just made it and the cache may lag).
func (b *Backend) record(ctx context.Context, name string) (vm.Box, *corev1.PersistentVolumeClaim, error) {
	pvc, err := b.cs.CoreV1().PersistentVolumeClaims(b.ns).Get(ctx, objectName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return vm.Box{}, nil, fmt.Errorf("kubernetes: box %q has no claim: %w", name, vm.ErrNotFound)
	}
	if err != nil {
		return vm.Box{}, nil, fmt.Errorf("kubernetes: get claim of %q: %w", name, err)
	}
	if pvc.Annotations[AnnotName] != name {
		// Another name mapped to this object (see objectName): not ours.
		return vm.Box{}, nil, fmt.Errorf("kubernetes: claim %s belongs to box %q, not %q: %w", pvc.Name, pvc.Annotations[AnnotName], name, vm.ErrNotFound)
	}
	var box vm.Box
	if err := json.Unmarshal([]byte(pvc.Annotations[AnnotRecord]), &box); err != nil {
		return vm.Box{}, nil, fmt.Errorf("kubernetes: claim %s: bad record: %w", pvc.Name, err)
	}
	return box, pvc, nil
}

func (b *Backend) podSpec(box vm.Box, pvc *corev1.PersistentVolumeClaim) (*corev1.Pod, error) {
	img, err := b.image(box.Spec.Image)
	if err != nil {
		return nil, err
	}
	obj := objectName(box.Name)
	mem := *resource.NewQuantity(int64(box.Spec.MemoryMiB)<<20, resource.BinarySI)
	no := false
	grace := int64(5)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: obj, Namespace: b.ns,
			Labels:      b.labels(box.Name, pvc.Annotations[AnnotOwner]),
			Annotations: map[string]string{AnnotName: box.Name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			// Under runc (no Kata) the box is a container on the node's
			// kernel: at least keep the runtime's default syscall filter.
			SecurityContext: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           img,
				ImagePullPolicy: b.cfg.PullPolicy,
				// The agent deletes the Pod's interfaces (CNI's eth0) before
				// serving, with NET_ADMIN granted for that and dropped from
				// its bounding set after; a box with egress keeps one way out
				// (egress.go).
				Command:                  agentCommand(box.Spec),
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{
					Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}},
					AllowPrivilegeEscalation: &no,
				},
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{
						corev1.ResourceCPU:    *resource.NewQuantity(int64(box.Spec.VCPUs), resource.DecimalSI),
						corev1.ResourceMemory: mem,
					},
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(box.Spec.VCPUs)*b.cfg.CPURequestMilli, resource.DecimalSI),
						corev1.ResourceMemory: mem,
					},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: podagent.Workspace}},
			}},
			Volumes: []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name},
			}}},
		},
	}
	if b.cfg.RuntimeClass != "" {
		p.Spec.RuntimeClassName = &b.cfg.RuntimeClass
	}
	if box.Spec.Egress != "" {
		// As in a QEMU box: the gateway by name, and no DNS.
		p.Spec.HostAliases = []corev1.HostAlias{{IP: vm.EgressIP, Hostnames: []string{vm.EgressHostname}}}
		p.Spec.DNSPolicy = corev1.DNSNone
		p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}}
	}
	return p, nil
}

// agentCommand is the box container's command: the pod agent with no
// network, or with only the egress listener.
func agentCommand(spec vm.Spec) []string {
	cmd := []string{"/usr/local/bin/sbx", "pod-agent", "serve", "--no-network"}
	if spec.Egress != "" {
		cmd = append(cmd, "--egress", vm.EgressAddr)
	}
	return cmd
}

// Start creates the box's Pod and returns once its container runs.
func (b *Backend) Start(ctx context.Context, name string) error {
	box, pvc, err := b.record(ctx, name)
	if err != nil {
		return err
	}
	// A Pod left by a crash or a failed start holds the name.
	if err := b.stopPod(ctx, name, "kill", 0); err != nil {
		return err
	}
	spec, err := b.podSpec(box, pvc)
	if err != nil {
		return err
	}
	pod, err := b.cs.CoreV1().Pods(b.ns).Create(ctx, spec, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("kubernetes: create pod %s: %w", spec.Name, b.capErr(err))
	}
	if err := b.waitRunning(ctx, pod); err != nil {
		// Leave no Pod retrying in the background; the claim stays.
		if kerr := b.stopPod(context.WithoutCancel(ctx), name, "kill", 0); kerr != nil {
			b.log.Warn("remove pod after failed start", "box", name, "err", kerr)
		}
		return err
	}
	if box.Spec.Egress != "" {
		if err := b.waitEgress(ctx, name, pod.UID); err != nil {
			if kerr := b.stopPod(context.WithoutCancel(ctx), name, "kill", 0); kerr != nil {
				b.log.Warn("remove pod after failed start", "box", name, "err", kerr)
			}
			return err
		}
	}
	return nil
}

// badWaiting are container waiting reasons that will not resolve by waiting.
var badWaiting = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
	"CrashLoopBackOff": true, "PreCreateHookError": true, "PreStartHookError": true,
}

// waitRunning waits for pod's container to run. It fails at once on a
// sandbox that cannot be created (e.g. a runtime class with no runtime on
// the node, as kata-qemu where Kata is not installed), an image that cannot
// be had or a container that ended.
func (b *Backend) waitRunning(ctx context.Context, pod *corev1.Pod) error {
	ctx, cancel := context.WithTimeoutCause(ctx, b.cfg.StartTimeout,
		fmt.Errorf("kubernetes: pod %s not running after %v", pod.Name, b.cfg.StartTimeout))
	defer cancel()
	sandbox := make(chan string, 1)
	go b.watchSandboxFailure(ctx, pod, sandbox)
	var last string
	err := b.waitFor(ctx, pod.Name, func() (bool, error) {
		select {
		case msg := <-sandbox:
			rc := "the node's default"
			if pod.Spec.RuntimeClassName != nil {
				rc = fmt.Sprintf("%q", *pod.Spec.RuntimeClassName)
			}
			return false, fmt.Errorf("kubernetes: pod sandbox failed (runtime class %s): %s", rc, msg)
		default:
		}
		p := b.pod(pod.Name)
		if p == nil || p.UID != pod.UID {
			if g := b.tombstone(pod.Name, pod.UID); g != nil {
				return false, fmt.Errorf("kubernetes: pod %s deleted while starting", pod.Name)
			}
			return false, nil // the cache has not seen it yet
		}
		if err := stopped(p); err != nil {
			return false, err
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Name != ContainerName {
				continue
			}
			if c.State.Running != nil {
				return true, nil
			}
			if w := c.State.Waiting; w != nil && badWaiting[w.Reason] {
				return false, fmt.Errorf("kubernetes: box container %s: %s", w.Reason, w.Message)
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				last = fmt.Sprintf("%s: %s", c.Reason, c.Message)
			}
		}
		return false, nil
	})
	if err != nil && last != "" && ctx.Err() != nil {
		err = fmt.Errorf("%w (last: %s)", err, last)
	}
	return err
}

// watchSandboxFailure reports the first FailedCreatePodSandBox event of
// pod: the kubelet only retries those, the Pod stays Pending.
func (b *Backend) watchSandboxFailure(ctx context.Context, pod *corev1.Pod, out chan<- string) {
	w, err := b.cs.CoreV1().Events(b.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod.Name + ",involvedObject.uid=" + string(pod.UID),
	})
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("watch pod events", "pod", pod.Name, "err", err)
		}
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		e, ok := ev.Object.(*corev1.Event)
		if !ok || e.Reason != "FailedCreatePodSandBox" {
			continue
		}
		out <- e.Message
		b.poke(pod.Name)
		return
	}
}

// stopped returns why p's box container is no longer running, nil while it
// may still run.
func stopped(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
		return nil
	}
	for _, c := range p.Status.ContainerStatuses {
		if t := c.State.Terminated; c.Name == ContainerName && t != nil {
			msg := fmt.Sprintf("kubernetes: box container exited with code %d (%s)", t.ExitCode, t.Reason)
			if t.Message != "" {
				msg += ": " + strings.TrimSpace(t.Message)
			}
			return errors.New(msg)
		}
	}
	return fmt.Errorf("kubernetes: pod %s: %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
}

func (b *Backend) tombstone(obj string, uid types.UID) *corev1.Pod {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.gone[obj]; g != nil && g.UID == uid {
		return g
	}
	return nil
}

// Wait blocks until the box's current Pod stops: nil when sbx stopped it
// (its stop annotation), else why.
func (b *Backend) Wait(ctx context.Context, name string) error {
	obj := objectName(name)
	var uid types.UID
	var result error
	err := b.waitFor(ctx, obj, func() (bool, error) {
		p := b.pod(obj)
		if uid == "" {
			if p == nil {
				return true, nil // no machine
			}
			uid = p.UID
		}
		if p == nil || p.UID != uid {
			g := b.tombstone(obj, uid)
			if g == nil || g.Annotations[AnnotStop] == "" {
				result = fmt.Errorf("kubernetes: pod %s was deleted outside sbx", obj)
			}
			return true, nil
		}
		intended := p.Annotations[AnnotStop] != ""
		if err := stopped(p); err != nil {
			if !intended {
				result = err
			}
			return true, nil
		}
		if p.DeletionTimestamp != nil && !intended {
			result = fmt.Errorf("kubernetes: pod %s is being deleted outside sbx (eviction or drain?)", obj)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	return result
}

// stopPod marks the box's Pod as stopped by sbx (why) and deletes it,
// waiting until it is gone, its containers ended. No Pod is no error.
func (b *Backend) stopPod(ctx context.Context, name, why string, grace int64) error {
	obj := objectName(name)
	pods := b.cs.CoreV1().Pods(b.ns)
	p, err := pods.Get(ctx, obj, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubernetes: get pod %s: %w", obj, err)
	}
	if p.Annotations[AnnotStop] == "" {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotStop: why}}})
		if _, err := pods.Patch(ctx, obj, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("kubernetes: mark pod %s stopping: %w", obj, err)
		}
	}
	uid := p.UID
	err = pods.Delete(ctx, obj, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("kubernetes: delete pod %s: %w", obj, err)
	}
	wctx, cancel := context.WithTimeoutCause(ctx, time.Minute, fmt.Errorf("kubernetes: pod %s still there a minute after delete", obj))
	defer cancel()
	return b.waitFor(wctx, obj, func() (bool, error) {
		cur := b.pod(obj)
		return cur == nil || cur.UID != uid, nil
	})
}

// Sleep deletes the Pod and keeps the claim: there is no memory to save.
func (b *Backend) Sleep(ctx context.Context, name string) error {
	return b.stopPod(ctx, name, "sleep", 1)
}

// Wake starts a new Pod on the same claim, always a cold boot.
func (b *Backend) Wake(ctx context.Context, name string) (vm.WakeResult, error) {
	if err := b.Start(ctx, name); err != nil {
		return vm.WakeResult{}, err
	}
	return vm.WakeResult{Cold: true, Reason: WakeReason}, nil
}

// Kill deletes the Pod at once (no grace period) and keeps the claim.
func (b *Backend) Kill(ctx context.Context, name string) error {
	return b.stopPod(ctx, name, "kill", 0)
}

// Destroy deletes the Pod and the claim (the storage class reclaims the
// volume) and waits until both are gone.
func (b *Backend) Destroy(ctx context.Context, name string) error {
	if err := b.stopPod(ctx, name, "destroy", 0); err != nil {
		return err
	}
	obj := objectName(name)
	err := b.cs.CoreV1().PersistentVolumeClaims(b.ns).Delete(ctx, obj, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: delete claim %s: %w", obj, err)
	}
	wctx, cancel := context.WithTimeoutCause(ctx, time.Minute, fmt.Errorf("kubernetes: claim %s still there a minute after delete", obj))
	defer cancel()
	if err := b.waitFor(wctx, obj, func() (bool, error) { return b.claim(obj) == nil, nil }); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.gone, obj)
	delete(b.cpu, name)
	b.mu.Unlock()
	return nil
}

// saveRecord writes the box record to its claim.
func (b *Backend) saveRecord(ctx context.Context, box vm.Box) error {
	rec, err := json.Marshal(box)
	if err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotRecord: string(rec)}}})
	obj := objectName(box.Name)
	_, err = b.cs.CoreV1().PersistentVolumeClaims(b.ns).Patch(ctx, obj, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("kubernetes: save record of %q on claim %s: %w", box.Name, obj, err)
	}
	return nil
}

// strayPods are the box Pods whose claim is not one of a box (keep says
// which are): gone, being deleted, or without a usable record. They run for
// nobody (a destroy cut short, a claim deleted by hand).
func (b *Backend) strayPods(keep func(obj string) bool) []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range b.pods.GetStore().List() {
		if p := o.(*corev1.Pod); !keep(p.Name) {
			out = append(out, p)
		}
	}
	return out
}

// liveClaim says whether obj's claim is a box's and not being deleted.
func (b *Backend) liveClaim(obj string) bool {
	pvc := b.claim(obj)
	return pvc != nil && pvc.DeletionTimestamp == nil && pvc.Annotations[AnnotName] != "" && objectName(pvc.Annotations[AnnotName]) == obj
}

func (b *Backend) deleteStray(ctx context.Context, p *corev1.Pod) error {
	b.log.Warn("deleting a box pod with no claim", "pod", p.Name)
	grace := int64(0)
	uid := p.UID
	err := b.cs.CoreV1().Pods(b.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("kubernetes: delete stray pod %s: %w", p.Name, err)
	}
	return nil
}

// Stats samples the box container's cgroup through `sbx pod-agent stats`.
func (b *Backend) Stats(ctx context.Context, name string) (vm.Stats, error) {
	var out, errb bytes.Buffer
	err := b.exec(ctx, objectName(name), []string{"/usr/local/bin/sbx", "pod-agent", "stats"},
		remotecommand.StreamOptions{Stdout: &out, Stderr: &errb})
	if err != nil {
		return vm.Stats{}, fmt.Errorf("kubernetes: stats of %q: %w (%s)", name, err, strings.TrimSpace(errb.String()))
	}
	var s podagent.Stats
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		return vm.Stats{}, fmt.Errorf("kubernetes: stats of %q: %w", name, err)
	}
	now := time.Now()
	b.mu.Lock()
	prev, ok := b.cpu[name]
	b.cpu[name] = cpuSample{at: now, nanos: s.CPUNanos}
	b.mu.Unlock()
	st := vm.Stats{PrivateBytes: s.PrivateBytes}
	if ok && now.After(prev.at) && s.CPUNanos >= prev.nanos {
		st.CPUPercent = float64(s.CPUNanos-prev.nanos) / float64(now.Sub(prev.at).Nanoseconds()) * 100
	}
	return st, nil
}

// executor runs cmd in obj's box container through the API server:
// WebSocket (exec protocol v5), falling back to SPDY when the upgrade fails.
func (b *Backend) executor(obj string, cmd []string, stdin, stderr bool) (remotecommand.Executor, error) {
	req := b.cs.CoreV1().RESTClient().Post().Namespace(b.ns).Resource("pods").Name(obj).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: ContainerName, Command: cmd, Stdin: stdin, Stdout: true, Stderr: stderr}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(b.rest, "GET", req.URL().String())
	if err != nil {
		return nil, fmt.Errorf("kubernetes: websocket exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(b.rest, "POST", req.URL())
	if err != nil {
		return nil, fmt.Errorf("kubernetes: spdy exec: %w", err)
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

func (b *Backend) exec(ctx context.Context, obj string, cmd []string, o remotecommand.StreamOptions) error {
	ex, err := b.executor(obj, cmd, o.Stdin != nil, o.Stderr != nil)
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, o)
}

// Connect execs `sbx pod-agent bridge` in the box container; the exec's
// stdin/stdout is the returned connection. It lives until Close, not ctx.
func (b *Backend) Connect(ctx context.Context, name string) (net.Conn, error) {
	return b.connectSocket(ctx, name, podagent.Socket)
}

// connectSocket execs `sbx pod-agent bridge --socket socket` in the box
// container, first sending this gateway's ClientHeader line.
func (b *Backend) connectSocket(ctx context.Context, name, socket string) (net.Conn, error) {
	obj := objectName(name)
	if p := b.pod(obj); p == nil {
		return nil, fmt.Errorf("kubernetes: box %q has no pod: %w", name, vm.ErrState)
	}
	ex, err := b.executor(obj, []string{"/usr/local/bin/sbx", "pod-agent", "bridge", "--socket", socket}, true, true)
	if err != nil {
		return nil, err
	}
	mine, theirs := net.Pipe()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer cancel()
		var errb limitedBuffer
		// The agent's first line names this gateway (its own session).
		in := io.MultiReader(strings.NewReader(podagent.ClientHeader+b.cfg.ClientID+"\n"), theirs)
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: in, Stdout: theirs, Stderr: &errb})
		if err != nil && sctx.Err() == nil {
			b.log.Warn("agent bridge ended", "box", name, "err", err, "stderr", errb.String())
		}
		theirs.Close()
	}()
	return &conn{Conn: mine, cancel: cancel}, nil
}

// conn ends its exec when closed.
type conn struct {
	net.Conn
	cancel context.CancelFunc
	once   sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	// The bridge sees stdin end and exits; cancel the stream soon after in
	// case the far side never answers.
	c.once.Do(func() { time.AfterFunc(5*time.Second, c.cancel) })
	return err
}

// limitedBuffer keeps the first 4 KiB written (a bridge's error message).
type limitedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := 4096 - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(l.b.String())
}

var _ io.Writer = (*limitedBuffer)(nil)
