package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/fwd"
	"sbx.dev/sbx/vm/guest/podagent"
)

// A box Pod's one way out. The Pod has no network interface but loopback
// (its agent deletes the CNI's before serving, like a QEMU box without a
// NIC, and the namespace's NetworkPolicy denies all traffic besides): the
// agent listens on vm.EgressAddr on loopback and carries each connection a
// box opens there to a gateway over a stream the gateway opened through the
// API server (podagent.EgressSocket). Every gateway serving the namespace
// attaches to every running box Pod that asked for egress, so a box keeps
// its path while any gateway is up; the box is known by the Pod exec'd
// into, never by an address it could spoof.

// egressSpec returns the spec of a box that asked for egress (its claim's
// record has a Spec.Egress).
func (b *Backend) egressSpec(name string) (vm.Spec, bool) {
	pvc := b.claim(objectName(name))
	if pvc == nil || pvc.Annotations[AnnotName] != name {
		return vm.Spec{}, false
	}
	var box vm.Box
	if json.Unmarshal([]byte(pvc.Annotations[AnnotRecord]), &box) != nil || box.Spec.Egress == "" {
		return vm.Spec{}, false
	}
	return box.Spec, true
}

// egressState is this gateway's egress session with one box Pod.
type egressState struct {
	started bool
	ready   chan struct{} // closed once the Pod's agent took a session
	once    sync.Once
}

// egressOf returns the state of Pod uid, making it. Caller holds b.mu.
func (b *Backend) egressOf(uid types.UID) *egressState {
	es := b.egress[uid]
	if es == nil {
		es = &egressState{ready: make(chan struct{})}
		b.egress[uid] = es
	}
	return es
}

// attachEgress starts this gateway's egress session with a running box Pod
// (once per Pod) when its box asked for egress.
func (b *Backend) attachEgress(p *corev1.Pod) {
	name := p.Annotations[AnnotName]
	if name == "" || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || p.Annotations[AnnotStop] != "" {
		return
	}
	spec, ok := b.egressSpec(name)
	if !ok {
		return
	}
	b.mu.Lock()
	es := b.egressOf(p.UID)
	if es.started || b.bg.Err() != nil {
		b.mu.Unlock()
		return
	}
	es.started = true
	b.mu.Unlock()
	go func() {
		defer func() {
			b.mu.Lock()
			delete(b.egress, p.UID)
			b.mu.Unlock()
		}()
		b.serveEgress(b.bg, name, p.UID, spec, es)
	}()
}

// waitEgress waits until this gateway's egress session with Pod uid is
// up, so a box that started can use its way out at once, as on QEMU.
func (b *Backend) waitEgress(ctx context.Context, name string, uid types.UID) error {
	b.mu.Lock()
	es := b.egressOf(uid)
	b.mu.Unlock()
	ctx, cancel := context.WithTimeoutCause(ctx, 30*time.Second,
		fmt.Errorf("kubernetes: box %q: its agent took no egress session in 30 s (a box image whose sbx predates `pod-agent serve --egress`?)", name))
	defer cancel()
	select {
	case <-es.ready:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// serveEgress keeps one session with the Pod uid's egress listener until
// that Pod is gone or the backend closes, reconnecting after a lost one.
func (b *Backend) serveEgress(ctx context.Context, name string, uid types.UID, spec vm.Spec, es *egressState) {
	obj := objectName(name)
	log := b.log.With("box", name, "pod", string(uid))
	for wait := 100 * time.Millisecond; ctx.Err() == nil; wait = min(2*wait, 5*time.Second) {
		if p := b.pod(obj); p == nil || p.UID != uid || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			return
		}
		start := time.Now()
		err := b.egressSession(ctx, name, spec, func() { es.once.Do(func() { close(es.ready) }) })
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			wait = 100 * time.Millisecond // it worked for a while: retry soon
		}
		log.Debug("egress session ended", "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
}

// egressSession attaches to the box's egress listener and serves the
// streams it opens until the session ends. It calls up once the agent
// answered a ping on the session: the agent counts a session before it
// answers (podagent egressHub.attach).
func (b *Backend) egressSession(ctx context.Context, name string, spec vm.Spec, up func()) error {
	c, err := b.connectSocket(ctx, name, podagent.EgressSocket)
	if err != nil {
		return err
	}
	s, err := yamux.Client(c, podagent.EgressYamux())
	if err != nil {
		c.Close()
		return err
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	if _, err := s.Ping(); err != nil {
		return fmt.Errorf("kubernetes: egress of %q: %w", name, err)
	}
	up()
	for {
		st, err := s.AcceptStream()
		if err != nil {
			return fmt.Errorf("kubernetes: egress of %q: %w", name, err)
		}
		go b.joinEgress(ctx, name, spec, st)
	}
}

// joinEgress joins one box connection to this gateway's network path for
// the box.
func (b *Backend) joinEgress(ctx context.Context, name string, spec vm.Spec, st net.Conn) {
	dial := b.cfg.Egress
	if dial == nil {
		dial = dialEgress
	}
	gw, err := dial(ctx, name, spec)
	if err != nil {
		b.log.Warn("egress: gateway path unavailable", "box", name, "err", err)
		st.Close()
		return
	}
	if err := fwd.Pipe(ctx, fwd.HalfCloser{Conn: st}, gw); err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
		b.log.Debug("egress connection ended", "box", name, "err", err)
	}
}

// dialEgress is the default path: the unix socket the spec names, as QEMU
// guestfwd dials it.
func dialEgress(ctx context.Context, _ string, spec vm.Spec) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", spec.Egress)
}
