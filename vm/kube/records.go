package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"sbx.dev/sbx/vm"
)

// records is the state authority of a cluster: a box's state lives only on
// its claim (the sbx.dev/record annotation), which every gateway sees
// through its watch, so every gateway's vm.Manager lists, execs into,
// sleeps, wakes and destroys every box of the namespace. State changes
// reach every gateway's Events from the watch, not from the gateway that
// made them. A timer or a crash that every gateway notices is acted on by
// the one the Manager's Once says yes to.
type records struct {
	b    *Backend
	f    vm.Follower
	once vm.Once
	log  *slog.Logger

	mu      sync.Mutex
	seen    map[string]vm.Box // last record the watch reported, for events
	mine    map[string]vm.Box // last record this gateway wrote (the watch may lag)
	watched map[string]string // box → UID of the Pod a crash watch follows
}

// Records follows the namespace's claims (the records) and Pods (their
// machines) for a Manager. A box recorded running whose Pod went, and a
// Pod whose claim went, while no gateway watched are settled first, each
// by one gateway.
func (b *Backend) Records(ctx context.Context, f vm.Follower, once vm.Once) (vm.Records, error) {
	r := &records{b: b, f: f, once: once, log: b.log,
		seen: map[string]vm.Box{}, mine: map[string]vm.Box{}, watched: map[string]string{}}
	// The claims carry the records: every change of one is a possible
	// state change, wherever it was made. Pods tell of crashes.
	if _, err := b.claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.onClaim(o, false) },
		UpdateFunc: func(_, o any) { r.onClaim(o, false) },
		DeleteFunc: func(o any) { r.onClaim(o, true) },
	}); err != nil {
		return nil, fmt.Errorf("kubernetes records: %w", err)
	}
	if _, err := b.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onPod,
		UpdateFunc: func(_, o any) { r.onPod(o) },
		DeleteFunc: r.onPod,
	}); err != nil {
		return nil, fmt.Errorf("kubernetes records: %w", err)
	}
	for _, box := range r.List() {
		if box.State != vm.Running || b.pod(objectName(box.Name)) != nil {
			continue
		}
		if once(ctx, "box/"+box.Name+"/machine/gone", time.Minute) {
			const why = "kubernetes: pod gone while no gateway watched it"
			from := box.State
			box.State, box.Reason, box.Updated = vm.Failed, why, time.Now().UTC()
			if err := r.Save(ctx, from, box); err != nil {
				r.log.Error("save box record", "box", box.Name, "err", err)
			}
			r.log.Warn("box failed", "box", box.Name, "from", from, "reason", why)
		}
	}
	for _, p := range b.strayPods(b.liveClaim) {
		if once(ctx, "pod/"+string(p.UID)+"/stray", time.Minute) {
			if err := b.deleteStray(ctx, p); err != nil {
				r.log.Warn("stray pod", "err", err)
			}
		}
	}
	return r, nil
}

// recordOf reads the box record a claim carries.
func recordOf(o any) (vm.Box, bool) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	pvc, ok := o.(*corev1.PersistentVolumeClaim)
	if !ok {
		return vm.Box{}, false
	}
	var box vm.Box
	if err := json.Unmarshal([]byte(pvc.Annotations[AnnotRecord]), &box); err != nil || vm.ValidName(box.Name) != nil || objectName(box.Name) != pvc.Name {
		return vm.Box{}, false
	}
	return box, true
}

// onClaim follows a claim's record: a changed state is an event, a claim
// gone is the box destroyed (wherever that was done).
func (r *records) onClaim(o any, gone bool) {
	box, ok := recordOf(o)
	if !ok {
		return
	}
	r.mu.Lock()
	prev, had := r.seen[box.Name]
	if gone {
		delete(r.seen, box.Name)
		delete(r.mine, box.Name)
		delete(r.watched, box.Name)
	} else {
		r.seen[box.Name] = box
	}
	r.mu.Unlock()
	if gone {
		r.f.Forget(box.Name)
		if had {
			r.f.Emit(vm.Event{Box: box.Name, From: prev.State, To: vm.Destroyed, At: time.Now().UTC()})
		}
		return
	}
	r.f.Arm(box)
	// The first sight of a box not being created is the watch listing
	// what exists (at start), not a change.
	if had && (prev.State != box.State || prev.Reason != box.Reason && box.State == vm.Failed) || !had && box.State == vm.Creating {
		r.f.Emit(vm.Event{Box: box.Name, From: prev.State, To: box.State, Note: box.Reason, At: box.Updated})
	}
	if box.State == vm.Running {
		r.watchPod(box.Name)
	}
}

func (r *records) onPod(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if p, ok := o.(*corev1.Pod); ok {
		if name := p.Annotations[AnnotName]; name != "" {
			r.watchPod(name)
		}
	}
}

// watchPod has the Manager follow the current Pod of a running box, once
// per Pod: whichever gateway started it, a Pod that stops on its own (not
// slept, killed or destroyed by sbx) fails the box.
func (r *records) watchPod(name string) {
	p := r.b.pod(objectName(name))
	if p == nil || p.Annotations[AnnotStop] != "" {
		return
	}
	uid := string(p.UID)
	r.mu.Lock()
	if r.watched[name] == uid {
		r.mu.Unlock()
		return
	}
	r.watched[name] = uid
	r.mu.Unlock()
	r.f.Watch(name, uid, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.watched[name] != uid
	})
}

// Launched follows the Pod a start or wake of this gateway made.
func (r *records) Launched(name string) { r.watchPod(name) }

// Get returns the newer of what the watch saw and what this gateway last
// wrote.
func (r *records) Get(name string) (vm.Box, bool) {
	var box vm.Box
	ok := false
	if pvc := r.b.claim(objectName(name)); pvc != nil && pvc.DeletionTimestamp == nil {
		box, ok = recordOf(pvc)
		ok = ok && box.Name == name
	}
	r.mu.Lock()
	mine, had := r.mine[name]
	r.mu.Unlock()
	if had && (!ok || mine.Updated.After(box.Updated)) {
		return mine, true
	}
	return box, ok
}

// List returns every box of the namespace, with the ones this gateway
// has just created and the watch has not shown yet (the caps count them).
func (r *records) List() []vm.Box {
	names := map[string]bool{}
	for _, o := range r.b.claims.GetStore().List() {
		pvc := o.(*corev1.PersistentVolumeClaim)
		if box, ok := recordOf(pvc); ok {
			names[box.Name] = pvc.DeletionTimestamp == nil
		}
	}
	r.mu.Lock()
	for name := range r.mine {
		if _, ok := names[name]; !ok {
			names[name] = true
		}
	}
	r.mu.Unlock()
	var out []vm.Box
	for name, live := range names {
		if b, ok := r.Get(name); ok && live {
			out = append(out, b)
		}
	}
	return out
}

// Fresh reads the record from the claim through the API: another gateway
// may have just written it, and the cache may lag.
func (r *records) Fresh(ctx context.Context, name string) (vm.Box, error) {
	box, _, err := r.b.record(ctx, name)
	return box, err
}

// Created remembers the record Backend.Create put on the claim; the
// watch publishes it.
func (r *records) Created(box vm.Box) {
	r.mu.Lock()
	r.mine[box.Name] = box
	r.mu.Unlock()
}

// Save writes the record to the claim and remembers it; the watch
// publishes it. Destroy has removed the claim already.
func (r *records) Save(ctx context.Context, _ vm.State, box vm.Box) error {
	if box.State == vm.Destroyed {
		r.mu.Lock()
		delete(r.mine, box.Name)
		r.mu.Unlock()
		return nil
	}
	err := r.b.saveRecord(ctx, box)
	r.mu.Lock()
	r.mine[box.Name] = box
	r.mu.Unlock()
	return err
}

func (r *records) Once(ctx context.Context, key string, ttl time.Duration) bool {
	return r.once(ctx, key, ttl)
}
