package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

// Machines is what the core needs of the machines under the boxes:
// vm.Manager on one host, vm/kube.Machines on a cluster (where every
// gateway sees every box).
type Machines interface {
	Create(ctx context.Context, name string, spec vm.Spec) (vm.Box, error)
	Start(ctx context.Context, name string) (vm.Box, error)
	Sleep(ctx context.Context, name string) (vm.Box, error)
	Wake(ctx context.Context, name string) (vm.Box, error)
	Destroy(ctx context.Context, name string) error
	Get(name string) (vm.Box, error)
	List() []vm.Box
	Events(ctx context.Context) <-chan vm.Event
	Stats(ctx context.Context, name string) (vm.Stats, error)
	Exec(ctx context.Context, name string, req agent.ExecRequest) (*agent.Process, error)
	Stat(ctx context.Context, name, path string) (agent.FileInfo, error)
	ReadDir(ctx context.Context, name, path string) ([]agent.FileInfo, error)
	ReadFile(ctx context.Context, name, path string) (io.ReadCloser, error)
	WriteFile(ctx context.Context, name, path string, mode fs.FileMode, r io.Reader) error
	MkdirAll(ctx context.Context, name, path string, mode fs.FileMode) error
	Remove(ctx context.Context, name, path string) error
	TarIn(ctx context.Context, name, dir string, r io.Reader) error
}

// mirrorSoFar copies the whole lines a running turn's output file holds
// past from into this gateway's log; it returns the bytes consumed.
func (f *Fleet) mirrorSoFar(ctx context.Context, rec record, parser parser, out string, from int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	proc, err := f.vm.Exec(ctx, rec.VM, agent.ExecRequest{Argv: []string{"tail", "-c", "+" + strconv.FormatInt(from+1, 10), out}})
	if err != nil {
		return 0, err
	}
	proc.Stdin().Close()
	go drain(proc.Stderr())
	b, rerr := io.ReadAll(io.LimitReader(proc.Stdout(), 64<<20))
	if _, err := proc.Wait(); err != nil || rerr != nil {
		return 0, errors.Join(err, rerr)
	}
	var n int64
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		line := b[:i+1]
		b = b[i+1:]
		n += int64(len(line))
		if err := f.logAt(rec.Name, rec.Turn, logLine, from+n, parser.line(trimNL(line))); err != nil {
			return n, err
		}
	}
	return n, nil
}

var _ Machines = (*vm.Manager)(nil)

// Cluster is what several gateways sharing one database need from it
// (store/postgres has it): leases, so something every gateway notices is
// done by one, and notifications, so a change made through one gateway
// reaches the clients of every other.
type Cluster interface {
	// TryLease takes or renews the lease name for holder until ttl from
	// now and reports whether holder has it.
	TryLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	// ReleaseLease gives name up if holder has it.
	ReleaseLease(ctx context.Context, name, holder string) error
	Notify(ctx context.Context, channel, payload string) error
	Listen(ctx context.Context, channel string) (<-chan string, error)
}

// ClusterChannel is the notification channel of the fleet's events.
const ClusterChannel = "sbx_fleet"

// followTTL is how long a gateway holds the right to follow a box's turn
// (and end it) without renewing it: a gateway that dies hands its turns
// over to another within this.
const followTTL = 15 * time.Second

// poolTTL is how long a gateway's warm machine stays its own without a
// renewal (every tick renews it).
const poolTTL = 2 * time.Minute

func poolLease(vmName string) string { return "pool/" + vmName }

// keepPool renews the leases on this gateway's warm machines and reaps
// those of gateways that are gone (no record uses them, nobody renews).
func (f *Fleet) keepPool(ctx context.Context, recs []record) {
	used := map[string]bool{}
	for _, r := range recs {
		used[r.VM] = true
	}
	f.pool.mu.Lock()
	mine := append([]string(nil), f.pool.ready...)
	for n := range f.pool.boots {
		mine = append(mine, n)
	}
	own := maps.Clone(f.pool.made)
	f.pool.mu.Unlock()
	if own == nil {
		own = map[string]bool{}
	}
	for _, n := range mine {
		own[n] = true
		f.once(ctx, poolLease(n), poolTTL)
	}
	exists := map[string]bool{}
	for _, b := range f.vm.List() {
		exists[b.Name] = true
		if !strings.HasPrefix(b.Name, poolPrefix) || used[b.Name] || own[b.Name] {
			continue
		}
		if f.once(ctx, poolLease(b.Name), poolTTL) {
			f.log.Info("warm pool: reaping a machine no gateway keeps", "vm", b.Name)
			f.discard(b.Name)
		}
	}
	f.pool.mu.Lock()
	for n := range f.pool.made {
		if !exists[n] && !f.pool.boots[n] {
			delete(f.pool.made, n)
		}
	}
	f.pool.mu.Unlock()
}

// staleSetup is how long a box may stay creating on a cluster before it
// counts as abandoned by the gateway that set it up.
const staleSetup = 10 * time.Minute

// timerTTL keeps the lease of one firing of a lifecycle timer: long past
// the action, so no other gateway repeats it.
const timerTTL = 10 * time.Minute

// notice is an event as it travels between gateways.
type notice struct {
	From  string    `json:"from"`
	Box   string    `json:"box"`
	Owner string    `json:"owner"`
	Kind  string    `json:"kind"`
	State State     `json:"state"`
	Note  string    `json:"note,omitempty"`
	At    time.Time `json:"at"`
}

// publish tells this gateway's subscribers and, on a cluster, every other
// gateway's.
func (f *Fleet) publish(e Event) {
	f.hub.publish(e)
	if f.cluster == nil {
		return
	}
	n := notice{From: f.id, Box: e.Box, Owner: e.Owner, Kind: e.Kind, State: e.State, Note: e.Note.String(), At: e.At}
	b, err := json.Marshal(n)
	if err != nil {
		return
	}
	if len(b) > 7000 {
		n.Note = ""
		b, _ = json.Marshal(n)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(f.ctx), 5*time.Second)
	defer cancel()
	if err := f.cluster.Notify(ctx, ClusterChannel, string(b)); err != nil {
		f.log.Warn("notify other gateways", "box", e.Box, "err", err)
	}
}

// listen relays the other gateways' events to this one's subscribers and
// keeps this gateway's copies of the logs its clients read up to date.
func (f *Fleet) listen(ch <-chan string) {
	defer f.wg.Done()
	for payload := range ch {
		var n notice
		if err := json.Unmarshal([]byte(payload), &n); err != nil || n.From == f.id {
			continue
		}
		f.hub.publish(Event{Box: n.Box, Owner: n.Owner, Kind: n.Kind, State: n.State, Note: f.red.String(n.Note), At: n.At})
		if n.Kind == EventRemoved {
			f.wg.Go(func() { f.forget(n.Box) })
			continue
		}
		if n.Kind == EventOutput || n.Kind == EventState {
			f.mu.Lock()
			rt := f.boxes[n.Box]
			reading := rt != nil && rt.log != nil
			f.mu.Unlock()
			if reading {
				f.mirror(n.Box)
			}
		}
	}
}

// forget drops this gateway's side of a box another gateway destroyed: its
// follower and mirror stop, readers of its log get io.EOF, its copy of the
// log goes.
func (f *Fleet) forget(name string) {
	f.mu.Lock()
	rt := f.boxes[name]
	f.mu.Unlock()
	if rt == nil {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, err := f.load(f.ctx, name); err == nil {
		return // a new box of the same name already
	}
	f.stopFollow(rt)
	f.mu.Lock()
	l := rt.log
	rt.log = nil
	delete(f.boxes, name)
	f.mu.Unlock()
	if l != nil {
		l.Close()
	}
	removeFile(f.logPath(name))
	removeFile(f.posPath(name))
}

// catchUp waits (a bounded while) until this gateway's copy of a box's log
// holds the box's finished turns, before a turn is started or followed
// here (which writes past them). Cluster only.
func (f *Fleet) catchUp(ctx context.Context, name string) {
	if f.cluster == nil {
		return
	}
	select {
	case <-f.mirror(name):
	case <-time.After(30 * time.Second):
		f.log.Warn("this gateway's copy of the log is behind", "box", name)
	case <-ctx.Done():
	}
}

// once reports whether this gateway is the one to act on key (always
// without a cluster).
func (f *Fleet) once(ctx context.Context, key string, ttl time.Duration) bool {
	if f.cluster == nil {
		return true
	}
	ok, err := f.cluster.TryLease(ctx, key, f.id, ttl)
	if err != nil {
		f.log.Warn("lease", "lease", key, "err", err)
		return false
	}
	return ok
}

func followLease(name string) string { return "box/" + name + "/follow" }

// holdFollow keeps this gateway's lease on following a box's turn until
// ctx ends, cancelling the follower if another gateway took it over; then
// it gives the lease up.
func (f *Fleet) holdFollow(ctx context.Context, name string, cancel context.CancelFunc) {
	t := time.NewTicker(followTTL / 3)
	defer t.Stop()
	defer func() {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		_ = f.cluster.ReleaseLease(rctx, followLease(name), f.id)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ok, err := f.cluster.TryLease(ctx, followLease(name), f.id, followTTL)
			if err == nil && !ok {
				f.log.Warn("another gateway follows this turn now", "box", name)
				cancel()
				return
			}
		}
	}
}

// takeOver follows the turns no live gateway follows (their gateway
// stopped): the first gateway to take the lease resumes from the stored
// offset.
func (f *Fleet) takeOver(ctx context.Context, recs []record) {
	for _, r := range recs {
		if r.State == Creating && f.now().Sub(r.Updated) > staleSetup &&
			f.once(ctx, fmt.Sprintf("box/%s/setup-lost/%d", r.Name, r.Updated.UnixNano()), timerTTL) {
			// The gateway setting it up stopped (recover does this for
			// boxes of a gateway that restarts; here nobody may).
			f.timer(ctx, r.Name, func(rt *boxRT, rec *record) error {
				rec.Reason = "the gateway setting it up stopped"
				return f.transition(ctx, rec, Failed, system(), "box.fail", rec.Reason)
			}, func(rec record) bool { return rec.State == Creating && f.now().Sub(rec.Updated) > staleSetup })
			continue
		}
		if r.State != Running || r.TurnDone || r.VM == "" {
			continue
		}
		rt := f.rt(r.Name)
		if !rt.mu.TryLock() {
			continue
		}
		if rt.stop == nil {
			if rec, err := f.load(ctx, r.Name); err == nil && rec.State == Running && !rec.TurnDone {
				f.follow(rec, nil)
			}
		}
		rt.mu.Unlock()
	}
}

// logPos is how far this gateway's copy of a box's log goes, in the raw
// output of the box's turns: the turn, the raw offset in its output file,
// and whether its end line is written. On a cluster every gateway keeps
// its own copy; whoever writes to it (the turn's follower, or a mirror of
// another gateway's) writes only past this, so nothing is logged twice.
type logPos struct {
	Turn  int   `json:"turn"`
	Raw   int64 `json:"raw"`
	Ended bool  `json:"ended"`
	saved time.Time
}

func (f *Fleet) posPath(name string) string { return filepath.Join(f.logDir(), name+".pos") }

// posLocked returns the box's log position, loading it once. f.mu held.
func (f *Fleet) posLocked(rt *boxRT, name string) *logPos {
	if rt.pos == nil {
		rt.pos = &logPos{}
		if b, err := os.ReadFile(f.posPath(name)); err == nil {
			_ = json.Unmarshal(b, rt.pos)
		}
	}
	return rt.pos
}

func (f *Fleet) savePos(name string, p *logPos, force bool) {
	if !force && time.Since(p.saved) < time.Second {
		return
	}
	p.saved = time.Now()
	b, _ := json.Marshal(p)
	tmp := f.posPath(name) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err == nil {
		_ = os.Rename(tmp, f.posPath(name))
	}
}

// Kinds of log writes at a position.
const (
	logHeader = iota // a turn's first line
	logLine          // text for the raw output up to end
	logEnd           // the turn's end line
)

// logAt writes text to this gateway's copy of the box's log if it is past
// what the copy holds (see logPos). Without a cluster it just appends.
func (f *Fleet) logAt(name string, turn int, kind int, end int64, text string) error {
	if f.cluster == nil {
		if text == "" {
			return nil
		}
		return f.appendLog(name, text)
	}
	l, err := f.openLog(name)
	if err != nil {
		return err
	}
	rt := f.rt(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.posLocked(rt, name)
	var out string
	switch {
	case turn < p.Turn || turn == p.Turn && p.Ended:
		return nil
	case turn > p.Turn:
		if kind == logHeader {
			out = text
		} else {
			out = fmt.Sprintf("── turn %d ──\n", turn)
			if turn > 1 {
				out = "\n" + out
			}
		}
		*p = logPos{Turn: turn, saved: p.saved}
		if kind == logHeader {
			break
		}
		fallthrough
	default:
		switch kind {
		case logHeader:
			return nil
		case logLine:
			if end <= p.Raw {
				return nil
			}
			p.Raw = end
		case logEnd:
			p.Ended = true
		}
		out += text
	}
	if out != "" {
		if _, err := l.Write([]byte(out)); err != nil {
			return err
		}
	}
	f.savePos(name, p, kind != logLine)
	return nil
}

// mirror brings this gateway's copy of a box's log up to what the box's
// turn files hold, following the current turn until it ends, when no
// follower of this gateway does it already. Cluster only. The channel is
// closed once the finished turns are copied (the current one may go on).
func (f *Fleet) mirror(name string) <-chan struct{} {
	done := make(chan struct{})
	if f.cluster == nil || f.ctx.Err() != nil {
		close(done)
		return done
	}
	rt := f.rt(name)
	f.mu.Lock()
	if rt.mirroring != nil {
		defer f.mu.Unlock()
		return rt.mirroring
	}
	rt.mirroring = done
	f.mu.Unlock()
	var once sync.Once
	caught := func() { once.Do(func() { close(done) }) }
	f.wg.Go(func() {
		defer func() {
			f.mu.Lock()
			rt.mirroring = nil
			f.mu.Unlock()
			caught()
		}()
		for f.ctx.Err() == nil {
			rec, err := f.load(f.ctx, name)
			if err != nil || rec.Turn == 0 || rec.VM == "" || !(rec.State == Running || rec.State == Waiting || rec.State == Done) {
				return
			}
			f.mu.Lock()
			p := *f.posLocked(rt, name)
			following := rt.stop != nil
			f.mu.Unlock()
			turn, from := p.Turn, p.Raw
			if turn == 0 || p.Ended {
				turn, from = turn+1, 0
			}
			if turn > rec.Turn || following && turn == rec.Turn {
				return // caught up, or this gateway's follower has the rest
			}
			parser := profiles()[rec.Agent].newParser()
			out, exit := turnFiles(turn)
			if turn == rec.Turn && !rec.TurnDone {
				// What the running turn printed so far, before following it.
				if n, err := f.mirrorSoFar(f.ctx, rec, parser, out, from); err == nil {
					from += n
				} else {
					f.log.Warn("mirror a box's log", "box", name, "turn", turn, "err", err)
				}
				caught()
			}
			r := rec
			r.Turn = turn
			code, _, err := f.followOnceAs(f.ctx, r, parser, out, exit, from, true)
			if err != nil {
				if f.ctx.Err() == nil {
					f.log.Warn("mirror a box's log", "box", name, "turn", turn, "err", err)
				}
				return
			}
			_ = f.logAt(name, turn, logEnd, 0, fmt.Sprintf("── turn %d ended: exit %s ──\n", turn, strconv.Itoa(code)))
		}
	})
	return done
}
