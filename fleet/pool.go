package fleet

import (
	"context"
	"sync"
)

// pool is the warm pool: machines booted ahead of demand, claimed by
// Delegate. Its own lock, so claiming never waits for a boot.
type pool struct {
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
func (f *Fleet) claim() (string, bool) {
	f.pool.mu.Lock()
	defer f.pool.mu.Unlock()
	if len(f.pool.ready) == 0 {
		return "", false
	}
	name := f.pool.ready[0]
	f.pool.ready = f.pool.ready[1:]
	return name, true
}

// refill boots machines in the background until ready+booting reaches the
// target, one at a time (boots compete for the same CPUs as running boxes).
func (f *Fleet) refill() {
	f.mu.Lock()
	target := f.policy.WarmPool
	f.mu.Unlock()
	f.pool.mu.Lock()
	if len(f.pool.ready)+f.pool.booting >= target || f.pool.booting > 0 {
		// Surplus machines beyond a lowered target are destroyed.
		var surplus []string
		for len(f.pool.ready)+f.pool.booting > target && len(f.pool.ready) > 0 {
			surplus = append(surplus, f.pool.ready[len(f.pool.ready)-1])
			f.pool.ready = f.pool.ready[:len(f.pool.ready)-1]
		}
		f.pool.mu.Unlock()
		for _, n := range surplus {
			f.discard(n)
		}
		return
	}
	f.pool.booting++
	f.pool.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		name := poolName()
		ctx := f.ctx
		f.pool.mu.Lock()
		if f.pool.boots == nil {
			f.pool.boots, f.pool.made = map[string]bool{}, map[string]bool{}
		}
		f.pool.boots[name] = true
		f.pool.made[name] = true
		f.pool.mu.Unlock()
		// On a cluster a warm machine is this gateway's while it holds
		// its lease (renewed at every tick): another gateway reaps it
		// only once this one is gone.
		f.once(ctx, poolLease(name), poolTTL)
		spec, err := f.spec(ctx, name)
		if err == nil {
			_, err = f.vm.Create(ctx, name, spec)
		}
		if err == nil {
			if _, err = f.vm.Start(ctx, name); err == nil {
				err = f.prepare(ctx, name)
			}
			if err != nil {
				f.discard(name)
			}
		}
		f.pool.mu.Lock()
		f.pool.booting--
		delete(f.pool.boots, name)
		if err == nil {
			f.pool.ready = append(f.pool.ready, name)
		}
		f.pool.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn("warm pool: boot failed", "err", err)
			}
			return
		}
		f.log.Info("warm pool: box ready", "vm", name)
		f.refill()
	}()
}

// discard destroys a machine nobody owns and stops serving its network.
func (f *Fleet) discard(vmName string) {
	_ = f.vm.Destroy(context.WithoutCancel(f.ctx), vmName)
	if f.net != nil {
		f.net.Detach(vmName)
	}
}
