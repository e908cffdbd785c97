package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/guest/boxcmd"
)

// runs starts the agent's turns in the boxes and follows them: each turn's
// output into the box's log, its end into the record (a question, the next
// follow-up from the inbox, or done).
type runs struct {
	vm       Machines
	store    Store
	net      Network
	records  *records
	events   *events
	logs     *logs
	locks    *locks
	leases   *leases
	settings *settings
	bg       *background
	now      func() time.Time
	log      *slog.Logger

	mu        sync.Mutex
	followers map[string]*follower
}

// follower is the goroutine following a box's current turn.
type follower struct {
	stop    context.CancelFunc // ends it
	stopped chan struct{}      // closed when it returned
}

func turnFiles(turn int) (out, exit string) {
	base := path.Join(boxcmd.TurnDir, strconv.Itoa(turn))
	return base + ".out", base + ".exit"
}

// turnStatus says how a turn's agent ended: its exit code, or -1 for lost.
func turnStatus(code int) string {
	if code == -1 {
		return "lost (the box's agent could not be followed)"
	}
	return "exit " + strconv.Itoa(code)
}

// turnEndLine is the log line that ends a turn. The follower and every
// gateway's mirror write it, and their copies of the log must be the same
// bytes.
func turnEndLine(turn, code int) string {
	return fmt.Sprintf("── turn %d ended: %s ──\n", turn, turnStatus(code))
}

// workDir is where the agent starts: the repo when there is one.
func workDir(rec record) string {
	if len(rec.Repos) == 1 {
		return "/workspace/" + rec.Repos[0].Dir
	}
	return "/workspace"
}

// agentEnv is the environment of the agent's process.
func (r *runs) agentEnv(rec record) []string {
	env := []string{"HOME=" + agent.AgentHome, "SBX_BOX=" + rec.Name, "CI=1", "DISABLE_AUTOUPDATER=1"}
	if r.net != nil {
		env = append(env, netEnv()...)
	}
	// The profile's non-secret environment (CheckEnv keeps it off every
	// name above).
	return append(env, rec.Env...)
}

// startTurn starts a turn of the agent with message (the task, an answer
// or a follow-up) and starts following it. The box shows running at once.
// The caller holds the box's lock.
func (r *runs) startTurn(ctx context.Context, rec *record, message string, actor keys.Actor, action string) error {
	p, ok := profiles()[rec.Agent]
	if !ok {
		return unknownProfile(rec.Agent)
	}
	session := rec.Session
	if rec.Turn == 0 {
		session = ""
	}
	rec.Turn++
	rec.TurnRaw, rec.TurnDone, rec.Question = 0, false, ""
	out, exit := turnFiles(rec.Turn)
	// The supervisor runs as this exec (processes outlive their
	// connection): its stdout is the live output from byte 0, and the turn
	// file keeps it for a follower that has to resume.
	agentArgv := p.argv(message, session)
	if rec.Agent == "claude" {
		var err error
		if agentArgv, err = r.settings.withMCP(ctx, *rec, agentArgv); err != nil {
			return err
		}
	}
	// The supervisor stays root (the turn files are root's); the agent
	// itself runs as the box's unprivileged user.
	argv := append([]string{guestSBX, "box", "run", "--out", out, "--exit", exit, "--dir", workDir(*rec), "--user", agent.AgentUser, "--"},
		agentArgv...)
	who := actor.User
	if who == "" {
		who = actor.Front
	}
	header := fmt.Sprintf("── turn %d · %s · %s ──\n", rec.Turn, turnKind(action), who)
	if rec.Turn > 1 {
		header = "\n" + header
	}
	if action != "box.start" {
		header += "> " + strings.ReplaceAll(message, "\n", "\n> ") + "\n"
	}
	r.logs.catchUp(ctx, rec.Name)
	if err := r.logs.at(rec.Name, rec.Turn, logHeader, 0, header); err != nil {
		return err
	}
	proc, err := r.vm.Exec(ctx, rec.VM, agent.ExecRequest{Argv: argv, Env: r.agentEnv(*rec)})
	if err != nil {
		return fmt.Errorf("start the %s agent: %w", rec.Agent, err)
	}
	proc.Stdin().Close()
	rec.State = Running
	rec.LastOutput = r.now()
	e := actor.Entry(r.now(), action, rec.Name)
	e.Detail = fmt.Sprintf("turn %d", rec.Turn)
	if err := r.records.save(ctx, *rec, e); err != nil {
		proc.Detach()
		return err
	}
	r.follow(*rec, proc)
	return nil
}

func turnKind(action string) string {
	switch action {
	case "box.start":
		return "task"
	case "box.answer":
		return "answer"
	}
	return "follow-up"
}

// follow starts the goroutine that streams the current turn's output into
// the box's log and ends the turn: from live (the turn's own exec) when the
// turn has just started, else from the turn file at the stored offset. The
// caller holds the box's lock.
//
// On a cluster only the gateway holding the box's follow lease follows
// (and ends) its turn; another leaves a live process running and lets the
// holder, or whoever takes the lease over, follow it.
func (r *runs) follow(rec record, live *agent.Process) {
	r.stop(rec.Name)
	if r.leases.on() && !r.leases.once(r.bg.ctx, followLease(rec.Name), followTTL) {
		if live != nil {
			live.Detach()
		}
		return
	}
	ctx, cancel := context.WithCancel(r.bg.ctx)
	stopped := make(chan struct{})
	r.mu.Lock()
	r.followers[rec.Name] = &follower{stop: cancel, stopped: stopped}
	r.mu.Unlock()
	r.bg.wg.Add(1)
	go func() {
		defer r.bg.wg.Done()
		defer close(stopped)
		if r.leases.on() {
			hctx, hcancel := context.WithCancel(ctx)
			defer hcancel()
			r.bg.wg.Go(func() { r.leases.holdFollow(hctx, rec.Name, cancel) })
			if live == nil {
				// Taken over: the turns before may be missing here.
				r.logs.catchUp(ctx, rec.Name)
			}
		}
		r.followTurn(ctx, rec, stopped, live)
	}()
}

// stop ends the follower of a box and waits for it. The caller holds the
// box's lock.
func (r *runs) stop(name string) {
	r.mu.Lock()
	fl := r.followers[name]
	delete(r.followers, name)
	r.mu.Unlock()
	if fl != nil {
		fl.stop()
		<-fl.stopped
	}
}

// cancel ends the follower of a box without waiting for it.
func (r *runs) cancel(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fl := r.followers[name]; fl != nil {
		fl.stop()
	}
}

// following reports whether this gateway follows the box's turn.
func (r *runs) following(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.followers[name] != nil
}

// followTurn runs `sbx box follow` in the guest from the raw offset the
// store holds, logs what the profile's parser makes of each line, and ends
// the turn when the agent exits. A broken stream is resumed from the last
// stored offset; a cancelled ctx (sleep, destroy, shutdown) leaves the turn
// running for the next follower.
func (r *runs) followTurn(ctx context.Context, rec record, self chan struct{}, live *agent.Process) {
	p := profiles()[rec.Agent]
	parser := p.newParser()
	out, exit := turnFiles(rec.Turn)
	raw := rec.TurnRaw
	backoff := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return
		}
		var code int
		var n int64
		var err error
		if attempt == 0 && live != nil {
			code, n, err = r.followStream(ctx, rec, parser, live, raw, false, false)
		} else {
			code, n, err = r.followOnce(ctx, rec, parser, out, exit, raw, false)
		}
		raw += n
		if err == nil {
			r.endTurn(ctx, rec.Name, rec.Turn, code, parser, raw, self)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if r.leases.on() {
			// Another gateway may have slept, destroyed or moved the box on.
			if cur, lerr := r.records.load(ctx, rec.Name); lerr == nil && (cur.State != Running || cur.Turn != rec.Turn || cur.TurnDone) {
				return
			}
		}
		r.log.Warn("following a turn failed; retrying", "box", rec.Name, "turn", rec.Turn, "err", err)
		if attempt >= 20 {
			r.endTurn(ctx, rec.Name, rec.Turn, -1, parser, raw, self)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// followOnce streams from raw; it returns the agent's exit code, how many
// raw bytes it consumed, and an error when the stream broke first. A
// mirror only copies into this gateway's log.
func (r *runs) followOnce(ctx context.Context, rec record, parser parser, out, exit string, raw int64, mirror bool) (int, int64, error) {
	proc, err := r.vm.Exec(ctx, rec.VM, agent.ExecRequest{
		Argv: []string{guestSBX, "box", "follow", "--exit", exit, "--from", strconv.FormatInt(raw, 10), out},
	})
	if err != nil {
		return 0, 0, err
	}
	proc.Stdin().Close()
	return r.followStream(ctx, rec, parser, proc, raw, true, mirror)
}

// followStream logs what the parser makes of each raw line of proc's
// output, which starts at raw offset raw. When the follower is stopped the
// stream is let go at once: a follow process is killed (it blocks while
// the agent is quiet), the agent's own exec only detached (the agent runs
// on). A mirror (cluster) only copies into this gateway's log: the
// follower elsewhere records offsets and publishes output.
func (r *runs) followStream(ctx context.Context, rec record, parser parser, proc *agent.Process, raw int64, kill, mirror bool) (int, int64, error) {
	defer context.AfterFunc(ctx, func() {
		if !kill {
			proc.Detach()
			return
		}
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = proc.Signal(kctx, syscall.SIGKILL)
	})()
	go io.Copy(io.Discard, proc.Stderr())
	if _, err := r.logs.open(rec.Name); err != nil {
		return 0, 0, err
	}
	br := bufio.NewReaderSize(proc.Stdout(), 64<<10)
	var consumed int64
	lastSave := time.Now()
	lastEvent := time.Time{}
	flush := func(force bool) {
		if mirror || !force && time.Since(lastSave) < time.Second {
			return
		}
		lastSave = time.Now()
		r.noteOutput(rec.Name, rec.Turn, raw+consumed, parser.session())
	}
	logLine := func(line []byte) error {
		text := parser.line(trimNL(line))
		if werr := r.logs.at(rec.Name, rec.Turn, logLine, raw+consumed+int64(len(line)), text); werr != nil {
			return werr
		}
		consumed += int64(len(line))
		if mirror {
			return nil
		}
		if sess := parser.session(); sess != "" && sess != rec.Session {
			// Record the conversation at once: a forced follow-up may
			// interrupt this turn before its end and must resume it.
			rec.Session = sess
			lastSave = time.Time{}
		}
		if time.Since(lastEvent) > 250*time.Millisecond {
			lastEvent = time.Now()
			r.events.publish(Event{Box: rec.Name, Owner: rec.Owner, Kind: EventOutput, State: Running, At: r.now()})
		}
		flush(false)
		return nil
	}
	// A last line without its newline is logged only once the stream is
	// known complete; otherwise the resumed follower reads it whole.
	var tail []byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			err = nil // an overlong line: log what we have and go on
		}
		if errors.Is(err, io.EOF) {
			tail = append(tail, line...)
			break
		}
		if err != nil {
			flush(true)
			return 0, consumed, err
		}
		if err := logLine(line); err != nil {
			return 0, consumed, err
		}
	}
	st, err := proc.Wait()
	if err == nil && st.Code != boxcmd.ExitFollowError && st.Signal == "" && len(tail) > 0 {
		if err := logLine(tail); err != nil {
			return 0, consumed, err
		}
	}
	flush(true)
	if err != nil {
		return 0, consumed, err
	}
	if st.Code == boxcmd.ExitFollowError {
		return 0, consumed, fmt.Errorf("the guest's stream of the turn is incomplete; resuming from the turn file")
	}
	if st.Signal != "" {
		return 0, consumed, fmt.Errorf("the turn's stream was killed by %s", st.Signal)
	}
	return st.Code, consumed, nil
}

func trimNL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		return b[:n-1]
	}
	return b
}

// noteOutput records the raw offset reached and when output last came, so
// a restarted gateway resumes there and idle sleep counts from it.
func (r *runs) noteOutput(name string, turn int, raw int64, session string) {
	lock := r.locks.get(name)
	if !lock.TryLock() {
		return // a lifecycle action holds it; the next flush records it
	}
	defer lock.Unlock()
	ctx := context.WithoutCancel(r.bg.ctx)
	rec, err := r.records.load(ctx, name)
	if err != nil || rec.Turn != turn || rec.TurnDone {
		return
	}
	rec.TurnRaw = raw
	rec.LastOutput = r.now()
	if session != "" {
		rec.Session = session
	}
	if err := r.records.save(ctx, rec, audit.Entry{}); err != nil {
		r.log.Warn("record output offset", "box", name, "err", err)
	}
}

// endTurn closes a turn: a question makes the box wait, a queued follow-up
// starts the next turn, otherwise the box is done.
func (r *runs) endTurn(ctx context.Context, name string, turn, code int, parser parser, raw int64, self chan struct{}) {
	// The box's lock here and, on a cluster, across gateways: an action
	// through another gateway (a follow-up, a sleep) must not interleave
	// with this one's reading and writing the record. Whoever holds the
	// lock may be waiting for this follower to stop, so never block on it.
	var lock *boxMutex
	for warned := false; ; {
		m, ok, err := r.locks.tryLock(ctx, name)
		if ok {
			lock = m
			break
		}
		if err != nil && !warned {
			warned = true
			r.log.Warn("end of turn: box lock across gateways", "box", name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	defer lock.Unlock()
	// This follower is ending: the next turn's follow must not wait for it.
	r.mu.Lock()
	if fl := r.followers[name]; fl != nil && fl.stopped == self {
		delete(r.followers, name)
	}
	r.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	rec, err := r.records.load(bg, name)
	if err != nil || rec.Turn != turn || rec.TurnDone || rec.State == Destroyed {
		return
	}
	rec.TurnDone, rec.TurnRaw = true, raw
	if s := parser.session(); s != "" {
		rec.Session = s
	}
	rec.CostUSD += parser.cost()
	if s := parser.summary(); s != "" {
		rec.Summary = s
	}
	status := turnStatus(code)
	_ = r.logs.at(name, turn, logEnd, 0, turnEndLine(turn, code))
	if q := r.question(bg, rec); q != "" {
		rec.Question = q
		if err := r.persist(ctx, "record question", name, func() error {
			return r.records.transition(bg, &rec, Waiting, system(), "box.question", "")
		}); err != nil {
			return
		}
		r.events.emit(rec, EventQuestion, q)
		return
	}
	items, err := r.store.ListInbox(bg, name)
	if err == nil && len(items) > 0 {
		it := items[0]
		if err := r.persist(ctx, "take the next follow-up", name, func() error {
			_, err := r.store.DeleteInbox(bg, name, it.ID, audit.Entry{})
			return err
		}); err == nil {
			r.events.emit(rec, EventInbox, "")
			actor := keys.Actor{User: it.By, Front: "inbox"}
			if err := r.startTurn(bg, &rec, it.Text, actor, "box.followup"); err == nil {
				return
			} else {
				rec.Reason = err.Error()
			}
		}
	}
	if code != 0 && rec.Reason == "" {
		rec.Reason = "agent " + status
	}
	_ = r.persist(ctx, "record end of turn", name, func() error {
		return r.records.transition(bg, &rec, Done, system(), "box.done", status)
	})
}

// persist retries write, a record of a turn's end, while the store refuses
// it (a database file locked by another process, a database restarting):
// the turn has ended in the box, and a record left saying "running" would
// lie until the next gateway start. It gives up when the follower stops
// (ctx: this gateway closing, or another taking the box over) or the box
// is gone. Found by the fault suite ("SQLite locked by another process").
func (r *runs) persist(ctx context.Context, what, name string, write func() error) error {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		err := write()
		if err == nil || errors.Is(err, ErrNotFound) {
			return err
		}
		r.log.Warn(what+": retrying", "box", name, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			r.log.Error(what, "box", name, "err", err)
			return err
		case <-time.After(wait):
		}
	}
}

// interrupt ends the agent of the current turn (its process group).
func (r *runs) interrupt(ctx context.Context, rec record) {
	_, exit := turnFiles(rec.Turn)
	script := `pid=$(cat "$1.pid" 2>/dev/null) || exit 0
kill -TERM -"$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
for i in 1 2 3 4 5 6 7 8 9 10; do [ -e "$1" ] && exit 0; sleep 0.2; done
kill -KILL -"$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; exit 0`
	if out, err := run(ctx, r.vm, rec.VM, agent.ExecRequest{Argv: []string{"/bin/sh", "-c", script, "sh", exit}}); err != nil {
		r.log.Warn("interrupt turn", "box", rec.Name, "err", err, "out", out)
	}
}

// question reads the pending question file, "" when there is none.
func (r *runs) question(ctx context.Context, rec record) string {
	rc, err := r.vm.ReadFile(ctx, rec.VM, questionFile)
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 16<<10))
	return strings.TrimSpace(string(b))
}
