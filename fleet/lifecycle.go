package fleet

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

// diffScript prints, for one repo, the numstat and then the patch against
// the base commit, untracked files included, using a throwaway index so
// the agent's own index is untouched. It runs as the agent user: the repo
// and its .git/config are the agent's, so git run there by root would run
// the agent's code as root (core.fsmonitor, filters), and the objects
// `git add` writes would be root's, which the agent's next `git add`
// could not write beside.
const diffScript = `set -e
cd "$1"
idx=$(mktemp)
trap 'rm -f "$idx"' EXIT
cp .git/index "$idx" 2>/dev/null || true
export GIT_INDEX_FILE="$idx"
git add -A >/dev/null 2>&1
git diff --cached --numstat --no-renames "$2"
printf '\0'
git diff --cached --no-renames --no-color --no-ext-diff "$2"
`

// maxPatch caps the patch a front gets.
const maxPatch = 8 << 20

func (f *Fleet) diff(ctx context.Context, caller keys.Actor, name string) (Diff, error) {
	rec, rt, err := f.lockBox(ctx, caller, name)
	if err != nil {
		return Diff{}, f.safeErr(err)
	}
	defer rt.mu.Unlock()
	// A diff only reads: a sleeping box stays asleep and says so.
	if err := awake(rec); err != nil {
		return Diff{}, f.safeErr(err)
	}
	d := Diff{Files: []FileStat{}}
	var patch strings.Builder
	for _, r := range rec.Repos {
		out, err := f.run(ctx, rec.VM, agent.ExecRequest{User: agent.AgentUser, Argv: []string{"/bin/sh", "-c", diffScript, "sh", "/workspace/" + r.Dir, r.Base}})
		var exit *exitError
		if errors.As(err, &exit) {
			// The repo in the box is gone or broken (the agent or a user
			// removed it): the box's state, not a fault of sbx.
			return Diff{}, f.safeErr(fmt.Errorf("diff of %s: the repo in the box cannot be diffed (%s): %w", r.Name, lastLine(out), ErrConflict))
		}
		if err != nil {
			return Diff{}, f.safeErr(fmt.Errorf("diff of %s: %w", r.Name, vmErr(err)))
		}
		stat, p, _ := strings.Cut(out, "\x00")
		for _, line := range strings.Split(strings.TrimSpace(stat), "\n") {
			parts := strings.SplitN(line, "\t", 3)
			if len(parts) != 3 {
				continue
			}
			fs := FileStat{Path: f.red.String(r.Dir + "/" + parts[2])}
			if parts[0] == "-" {
				fs.Binary = true
			} else {
				fs.Added, _ = strconv.Atoi(parts[0])
				fs.Deleted, _ = strconv.Atoi(parts[1])
			}
			d.Files = append(d.Files, fs)
		}
		// Prefix paths with the repo's directory so patches of several
		// repos stay apart.
		p = strings.NewReplacer("\n--- a/", "\n--- a/"+r.Dir+"/", "\n+++ b/", "\n+++ b/"+r.Dir+"/",
			"diff --git a/", "diff --git a/"+r.Dir+"/", " b/", " b/"+r.Dir+"/").Replace(p)
		patch.WriteString(p)
	}
	text := patch.String()
	if len(text) > maxPatch {
		text = text[:maxPatch] + "\n… patch cut at 8 MiB\n"
	}
	d.Patch = f.red.String(text)
	return d, nil
}

// cleanAllow checks an egress allow-list and puts its entries in canonical
// form: the box network's one parser of entries (netpolicy.ParseEntry), the
// one its proxy matches with. An entry is a host name, *.suffix or an IP
// address, with :PORT for a port other than 80 and 443.
func cleanAllow(domains []string) ([]string, error) {
	if len(domains) > maxAllow {
		return nil, fmt.Errorf("%d allowed domains (max %d): %w", len(domains), maxAllow, ErrInvalid)
	}
	out := []string{}
	seen := map[string]bool{}
	for _, d := range domains {
		e, err := netpolicy.ParseEntry(d)
		if err != nil {
			return nil, fmt.Errorf("allowed domain %q: %v (e.g. example.com, *.example.com, example.com:8443): %w", d, err, ErrInvalid)
		}
		if c := e.String(); !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out, nil
}

func drain(r io.Reader) { _, _ = io.Copy(io.Discard, r) }

// scanLines calls fn with each line of r (without its newline).
func scanLines(r io.Reader, fn func([]byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			fn(trimNL(line))
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

func removeFile(path string) { _ = os.Remove(path) }

// tickLoop runs the lifecycle timers every Policy.TickEvery.
func (f *Fleet) tickLoop() {
	defer f.wg.Done()
	f.mu.Lock()
	every := f.policy.TickEvery
	f.mu.Unlock()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
			f.Tick(f.ctx)
		}
	}
}

// Tick runs the lifecycle timers once against the Fleet's clock: idle
// boxes go to sleep, sleeping boxes past their TTL (and not kept) are
// destroyed, and the warm pool is refilled. New runs it periodically;
// tests with an injected clock call it directly.
func (f *Fleet) Tick(ctx context.Context) {
	recs, err := f.loadAll(ctx)
	if err != nil {
		f.log.Warn("lifecycle tick", "err", err)
		return
	}
	f.mu.Lock()
	p := f.policy
	f.mu.Unlock()
	now := f.now()
	for _, r := range recs {
		switch {
		case p.IdleSleep > 0 && (r.State == Running || r.State == Waiting || r.State == Done):
			last := r.LastOutput
			if last.IsZero() {
				last = r.Updated
			}
			if now.Sub(last) >= p.IdleSleep && f.once(ctx, fmt.Sprintf("box/%s/idle-sleep/%d", r.Name, last.UnixNano()), timerTTL) {
				f.timer(ctx, r.Name, func(rt *boxRT, rec *record) error {
					return f.sleepLocked(ctx, system(), rt, rec, fmt.Sprintf("idle for %s", p.IdleSleep))
				}, func(rec record) bool {
					l := rec.LastOutput
					if l.IsZero() {
						l = rec.Updated
					}
					return (rec.State == Running || rec.State == Waiting || rec.State == Done) && f.now().Sub(l) >= p.IdleSleep
				})
			}
		case p.SleepTTL > 0 && r.State == Sleeping && !r.Keep && !r.SleptAt.IsZero() && now.Sub(r.SleptAt) >= p.SleepTTL &&
			f.once(ctx, fmt.Sprintf("box/%s/sleep-ttl/%d", r.Name, r.SleptAt.UnixNano()), timerTTL):
			f.timer(ctx, r.Name, func(rt *boxRT, rec *record) error {
				return f.destroyLocked(ctx, system(), rt, rec, fmt.Sprintf("asleep for %s (sleep TTL)", p.SleepTTL))
			}, func(rec record) bool {
				return rec.State == Sleeping && !rec.Keep && f.now().Sub(rec.SleptAt) >= p.SleepTTL
			})
		}
	}
	if f.cluster != nil {
		f.takeOver(ctx, recs)
		f.keepPool(ctx, recs)
	}
	f.refill()
}

// timer applies a timer's action to a box under its lock if the condition
// still holds there.
func (f *Fleet) timer(ctx context.Context, name string, act func(*boxRT, *record) error, still func(record) bool) {
	rt := f.rt(name)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rec, err := f.load(ctx, name)
	if err != nil || !still(rec) {
		return
	}
	if err := act(rt, &rec); err != nil {
		f.log.Warn("lifecycle timer", "box", name, "err", err)
	}
}

// recover resumes from the store after a (re)start: following turns that
// were running, failing boxes whose setup was cut short or whose machine is
// gone, and re-registering warm-pool machines.
func (f *Fleet) recover(ctx context.Context) error {
	recs, err := f.loadAll(ctx)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	for _, rec := range recs {
		used[rec.VM] = true
		if rec.State == Destroyed || rec.State == Failed {
			continue
		}
		if f.net != nil && rec.VM != "" {
			if _, err := f.net.Attach(ctx, rec.VM); err != nil {
				f.log.Warn("re-attach network path", "box", rec.Name, "err", err)
			}
		}
		rt := f.rt(rec.Name)
		rt.mu.Lock()
		mb, vmErr := f.vm.Get(rec.VM)
		switch {
		case rec.State == Creating && f.cluster != nil && f.now().Sub(rec.Updated) < staleSetup:
			// Another gateway may be setting it up right now.
		case rec.State == Running && !rec.TurnDone && f.cluster != nil && vmErr == nil && mb.State == vm.Running:
			// Followed by whoever holds its lease; the ticks take it over
			// when that gateway is gone.
		case rec.State == Creating:
			rec.Reason = "the gateway stopped while the box was being set up"
			_ = f.transition(ctx, &rec, Failed, system(), "box.fail", rec.Reason)
		case rec.VM == "" || vmErr != nil:
			rec.Reason = "its machine is gone"
			_ = f.transition(ctx, &rec, Failed, system(), "box.fail", rec.Reason)
		case mb.State == vm.Failed:
			rec.Reason = "machine failed: " + mb.Reason
			_ = f.transition(ctx, &rec, Failed, system(), "box.fail", rec.Reason)
		case rec.State == Running && !rec.TurnDone && mb.State == vm.Running:
			f.follow(rec, nil)
		}
		rt.mu.Unlock()
	}
	for _, b := range f.vm.List() {
		// On a cluster the unclaimed warm boxes may be another gateway's.
		if f.cluster == nil && strings.HasPrefix(b.Name, poolPrefix) && !used[b.Name] {
			if b.State == vm.Running {
				if f.net != nil {
					_, _ = f.net.Attach(ctx, b.Name)
				}
				f.pool.add(b.Name)
			} else {
				f.discard(b.Name)
			}
		}
	}
	return nil
}

// watchVM turns machine failures (max duration, a crash) into box failures.
func (f *Fleet) watchVM() {
	defer f.wg.Done()
	for ev := range f.vm.Events(f.ctx) {
		if ev.To == vm.Destroyed && f.net != nil {
			// Destroyed through another gateway of a cluster: stop serving
			// its network path here too (idempotent where it was ours).
			f.net.Detach(ev.Box)
		}
		if ev.To != vm.Failed {
			continue
		}
		if f.pool.drop(ev.Box) {
			f.discard(ev.Box)
			continue
		}
		recs, err := f.loadAll(f.ctx)
		if err != nil {
			continue
		}
		for _, r := range recs {
			if r.VM != ev.Box || r.State == Failed || r.State == Destroyed {
				continue
			}
			// Every gateway sees the machine fail; one records it.
			if !f.once(f.ctx, fmt.Sprintf("box/%s/fail/%d", r.Name, ev.At.UnixNano()), timerTTL) {
				continue
			}
			rt := f.rt(r.Name)
			rt.mu.Lock()
			if rec, err := f.load(f.ctx, r.Name); err == nil && rec.State != Failed {
				rec.Reason = "machine failed: " + ev.Note
				if rt.stop != nil {
					rt.stop()
				}
				_ = f.transition(f.ctx, &rec, Failed, system(), "box.fail", rec.Reason)
			}
			rt.mu.Unlock()
		}
	}
}

// poolPrefix names warm-pool machines; a claimed one keeps its name.
const poolPrefix = "pool-"

func poolName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return poolPrefix + hex.EncodeToString(b[:])
}

func (f *Fleet) poolStatus(ctx context.Context, caller keys.Actor) (PoolStatus, error) {
	if caller.Role != keys.RoleAdmin {
		return PoolStatus{}, fmt.Errorf("the warm pool is for admins: %w", ErrForbidden)
	}
	f.mu.Lock()
	target := f.policy.WarmPool
	f.mu.Unlock()
	ready, booting := f.pool.counts()
	return PoolStatus{Target: target, Ready: ready, Booting: booting}, nil
}

// MaxPool caps the warm pool's target.
const MaxPool = 64

func (f *Fleet) setPool(ctx context.Context, caller keys.Actor, n int) (PoolStatus, error) {
	e := f.entry(caller, "pool.set", strconv.Itoa(n))
	if caller.Role != keys.RoleAdmin {
		err := fmt.Errorf("the warm pool is for admins: %w", ErrForbidden)
		f.audit.Finish(ctx, e, err, audit.ResultDenied)
		return PoolStatus{}, err
	}
	if n < 0 || n > MaxPool {
		return PoolStatus{}, fmt.Errorf("pool size %d: want 0 to %d: %w", n, MaxPool, ErrInvalid)
	}
	f.mu.Lock()
	f.policy.WarmPool = n
	f.mu.Unlock()
	_ = f.audit.Record(ctx, e)
	f.refill()
	return f.poolStatus(ctx, caller)
}
