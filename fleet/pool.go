package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm"
)

// pool is the warm pool: machines booted ahead of demand, claimed by
// Delegate. Its own lock, so claiming never waits for a boot.
type pool struct {
	vm     Machines
	net    Network
	policy *livePolicy
	leases *leases
	audit  *audit.Log
	bg     *background
	now    func() time.Time
	log    *slog.Logger

	mu      sync.Mutex
	ready   []string
	booting int
	boots   map[string]bool // the machines booting (names)
	// made is every warm machine this gateway booted, claimed ones too,
	// while the machine exists (a cluster's reaper never takes these).
	made map[string]bool
}

func (p *pool) add(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready = append(p.ready, name)
}

// drop forgets a machine (it failed); true when it was a pool machine.
func (p *pool) drop(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, n := range p.ready {
		if n == name {
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			return true
		}
	}
	return false
}

func (p *pool) counts() (ready, booting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready), p.booting
}

// claim takes the oldest ready machine.
func (p *pool) claim() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 {
		return "", false
	}
	name := p.ready[0]
	p.ready = p.ready[1:]
	return name, true
}

// refill boots machines in the background until ready+booting reaches the
// target, one at a time (boots compete for the same CPUs as running boxes).
func (p *pool) refill() {
	target := p.policy.get().WarmPool
	p.mu.Lock()
	if len(p.ready)+p.booting >= target || p.booting > 0 {
		// Surplus machines beyond a lowered target are destroyed.
		var surplus []string
		for len(p.ready)+p.booting > target && len(p.ready) > 0 {
			surplus = append(surplus, p.ready[len(p.ready)-1])
			p.ready = p.ready[:len(p.ready)-1]
		}
		p.mu.Unlock()
		for _, n := range surplus {
			p.discard(n)
		}
		return
	}
	p.booting++
	p.mu.Unlock()
	p.bg.wg.Add(1)
	go func() {
		defer p.bg.wg.Done()
		name := poolName()
		ctx := p.bg.ctx
		p.mu.Lock()
		if p.boots == nil {
			p.boots, p.made = map[string]bool{}, map[string]bool{}
		}
		p.boots[name] = true
		p.made[name] = true
		p.mu.Unlock()
		// On a cluster a warm machine is this gateway's while it holds
		// its lease (renewed at every tick): another gateway reaps it
		// only once this one is gone.
		p.leases.once(ctx, poolLease(name), poolTTL)
		spec, err := p.spec(ctx, name)
		if err == nil {
			_, err = p.vm.Create(ctx, name, spec)
		}
		if err == nil {
			if _, err = p.vm.Start(ctx, name); err == nil {
				err = prepare(ctx, p.vm, name)
			}
			if err != nil {
				p.discard(name)
			}
		}
		p.mu.Lock()
		p.booting--
		delete(p.boots, name)
		if err == nil {
			p.ready = append(p.ready, name)
		}
		p.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("warm pool: boot failed", "err", err)
			}
			return
		}
		p.log.Info("warm pool: box ready", "vm", name)
		p.refill()
	}()
}

// discard destroys a machine nobody owns and stops serving its network.
func (p *pool) discard(vmName string) {
	_ = p.vm.Destroy(context.WithoutCancel(p.bg.ctx), vmName)
	if p.net != nil {
		p.net.Detach(vmName)
	}
}

// keep renews the leases on this gateway's warm machines and reaps those
// of gateways that are gone (no record uses them, nobody renews). Cluster
// only.
func (p *pool) keep(ctx context.Context, recs []record) {
	used := map[string]bool{}
	for _, r := range recs {
		used[r.VM] = true
	}
	p.mu.Lock()
	mine := append([]string(nil), p.ready...)
	for n := range p.boots {
		mine = append(mine, n)
	}
	own := maps.Clone(p.made)
	p.mu.Unlock()
	if own == nil {
		own = map[string]bool{}
	}
	for _, n := range mine {
		own[n] = true
		p.leases.once(ctx, poolLease(n), poolTTL)
	}
	exists := map[string]bool{}
	for _, b := range p.vm.List() {
		exists[b.Name] = true
		if !strings.HasPrefix(b.Name, poolPrefix) || used[b.Name] || own[b.Name] {
			continue
		}
		if p.leases.once(ctx, poolLease(b.Name), poolTTL) {
			p.log.Info("warm pool: reaping a machine no gateway keeps", "vm", b.Name)
			p.discard(b.Name)
		}
	}
	p.mu.Lock()
	for n := range p.made {
		if !exists[n] && !p.boots[n] {
			delete(p.made, n)
		}
	}
	p.mu.Unlock()
}

// poolPrefix names warm-pool machines; a claimed one keeps its name.
const poolPrefix = "pool-"

func poolName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return poolPrefix + hex.EncodeToString(b[:])
}

func (p *pool) status(caller keys.Actor) (PoolStatus, error) {
	if caller.Role != keys.RoleAdmin {
		return PoolStatus{}, fmt.Errorf("the warm pool is for admins: %w", ErrForbidden)
	}
	target := p.policy.get().WarmPool
	ready, booting := p.counts()
	return PoolStatus{Target: target, Ready: ready, Booting: booting}, nil
}

// MaxPool caps the warm pool's target.
const MaxPool = 64

func (p *pool) setSize(ctx context.Context, caller keys.Actor, n int) (PoolStatus, error) {
	e := caller.Entry(p.now(), "pool.set", strconv.Itoa(n))
	if caller.Role != keys.RoleAdmin {
		err := fmt.Errorf("the warm pool is for admins: %w", ErrForbidden)
		p.audit.Finish(ctx, e, err, audit.ResultDenied)
		return PoolStatus{}, err
	}
	if n < 0 || n > MaxPool {
		return PoolStatus{}, fmt.Errorf("pool size %d: want 0 to %d: %w", n, MaxPool, ErrInvalid)
	}
	p.policy.setWarmPool(n)
	_ = p.audit.Record(ctx, e)
	p.refill()
	return p.status(caller)
}

// boot creates and starts a new machine for box name (no warm one was
// free), returning its vm name.
func (p *pool) boot(ctx context.Context, name string, size boxSize) (string, error) {
	spec, err := p.spec(ctx, name)
	if err != nil {
		return "", err
	}
	spec.MemoryMiB, spec.VCPUs = size.memMiB, size.vcpus
	if _, err := p.vm.Create(ctx, name, spec); err != nil {
		return "", vmErr(err)
	}
	if _, err := p.vm.Start(ctx, name); err != nil {
		_ = p.vm.Destroy(context.WithoutCancel(ctx), name)
		return "", vmErr(err)
	}
	p.refill()
	return name, nil
}

// spec is what a new machine is created with, its network path attached.
func (p *pool) spec(ctx context.Context, vmName string) (vm.Spec, error) {
	pol := p.policy.get()
	spec := pol.Spec
	spec.MaxDuration = pol.MaxDuration
	if p.net != nil {
		sock, err := p.net.Attach(ctx, vmName)
		if err != nil {
			return spec, fmt.Errorf("network path of %s: %w", vmName, err)
		}
		spec.Egress = sock
	}
	return spec, nil
}
