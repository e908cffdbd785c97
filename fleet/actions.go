package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/hooks"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/vm/agent"
)

// MaxAnswerBytes caps an answer, follow-up or side question.
const MaxAnswerBytes = 64 << 10

func checkText(what, text string) (string, error) {
	t := strings.TrimSpace(text)
	switch {
	case t == "":
		return "", fmt.Errorf("empty %s: %w", what, ErrInvalid)
	case len(t) > MaxAnswerBytes:
		return "", fmt.Errorf("%s is %d bytes (max %d): %w", what, len(t), MaxAnswerBytes, ErrInvalid)
	case !utf8.ValidString(t) || strings.ContainsRune(t, 0):
		return "", fmt.Errorf("%s is not valid UTF-8 text: %w", what, ErrInvalid)
	}
	return t, nil
}

func (f *Fleet) answer(ctx context.Context, caller keys.Actor, name, text string, force, strict bool) (AnswerResult, error) {
	t, err := checkText("answer", text)
	if err != nil {
		return AnswerResult{}, f.safeErr(err)
	}
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return AnswerResult{}, f.safeErr(err)
	}
	defer lock.Unlock()
	if strict && rec.Question == "" {
		err := fmt.Errorf("box %q has no pending question (it is %s); send a follow-up instead: %w", name, rec.State, ErrConflict)
		return AnswerResult{}, f.safeErr(err)
	}
	res, err := f.answerLocked(ctx, caller, &rec, t, force)
	if err != nil {
		f.audit.Finish(ctx, f.entry(caller, "box.answer", name), err, audit.ResultError)
		return AnswerResult{}, f.safeErr(err)
	}
	res.Box, err = f.view(ctx, rec)
	return res, f.safeErr(err)
}

func (f *Fleet) answerLocked(ctx context.Context, caller keys.Actor, rec *record, t string, force bool) (AnswerResult, error) {
	if rec.State == Sleeping {
		if err := f.wakeLocked(ctx, caller, rec); err != nil {
			return AnswerResult{}, err
		}
	}
	switch rec.State {
	case Waiting:
		// The answer clears the question, then resumes the agent with it.
		if err := f.vm.Remove(ctx, rec.VM, questionFile); err != nil && !errors.Is(fileErr(err), ErrNotFound) {
			return AnswerResult{}, fmt.Errorf("clear the question: %w", err)
		}
		if err := f.runs.startTurn(ctx, rec, t, caller, "box.answer"); err != nil {
			return AnswerResult{}, err
		}
		return AnswerResult{Outcome: Answered}, nil
	case Done:
		if err := f.runs.startTurn(ctx, rec, t, caller, "box.followup"); err != nil {
			return AnswerResult{}, err
		}
		return AnswerResult{Outcome: Resumed}, nil
	case Running:
		if !force {
			e := f.entry(caller, "box.inbox.add", rec.Name)
			id, err := f.store.AddInbox(ctx, rec.Name, caller.User, t, f.now(), e)
			if err != nil {
				return AnswerResult{}, err
			}
			f.audit.Finish(ctx, e, nil, "")
			f.events.emit(*rec, EventInbox, "")
			return AnswerResult{Outcome: Queued, InboxID: id}, nil
		}
		// force: end the running turn, then resume with the text.
		f.runs.stop(rec.Name)
		f.runs.interrupt(ctx, *rec)
		rec.TurnDone = true
		_ = f.logs.append(rec.Name, fmt.Sprintf("── turn %d interrupted by %s ──\n", rec.Turn, caller.User))
		if err := f.runs.startTurn(ctx, rec, t, caller, "box.followup"); err != nil {
			return AnswerResult{}, err
		}
		return AnswerResult{Outcome: Resumed}, nil
	}
	return AnswerResult{}, fmt.Errorf("box %q is %s; nothing to answer: %w", rec.Name, rec.State, ErrConflict)
}

func (f *Fleet) inbox(ctx context.Context, caller keys.Actor, name string) ([]InboxItem, error) {
	if _, err := f.locks.resolve(ctx, caller, name); err != nil {
		return nil, f.safeErr(err)
	}
	docs, err := f.store.ListInbox(ctx, name)
	if err != nil {
		return nil, f.safeErr(err)
	}
	out := []InboxItem{}
	for _, d := range docs {
		out = append(out, InboxItem{ID: d.ID, Text: f.red.String(d.Text), At: d.At, By: d.By})
	}
	return out, nil
}

func (f *Fleet) removeInbox(ctx context.Context, caller keys.Actor, name string, id int64) error {
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return f.safeErr(err)
	}
	defer lock.Unlock()
	e := f.entry(caller, "box.inbox.rm", name)
	e.Detail = fmt.Sprint(id)
	found, err := f.store.DeleteInbox(ctx, name, id, e)
	if err != nil {
		return f.safeErr(err)
	}
	if !found {
		return fmt.Errorf("inbox item %d of box %q: %w", id, name, ErrNotFound)
	}
	f.audit.Finish(ctx, e, nil, "")
	f.events.emit(rec, EventInbox, "")
	return nil
}

// askTimeout bounds a side question.
const askTimeout = 10 * time.Minute

func (f *Fleet) ask(ctx context.Context, caller keys.Actor, name, question string, fresh bool) (redact.Safe, error) {
	q, err := checkText("question", question)
	if err != nil {
		return redact.Safe{}, f.safeErr(err)
	}
	// Hold the lock only to wake the box and read the side session: the
	// side question must not block the driver's run for its whole length.
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return redact.Safe{}, f.safeErr(err)
	}
	if _, err := f.machine(ctx, caller, &rec); err != nil {
		lock.Unlock()
		return redact.Safe{}, f.safeErr(err)
	}
	session := rec.Side
	if fresh {
		session = ""
	}
	lock.Unlock()
	p := profiles()[rec.Agent]
	actx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	proc, err := f.vm.Exec(actx, rec.VM, agent.ExecRequest{User: agent.AgentUser, Argv: p.sideArgv(q, session), Dir: strings.TrimPrefix(strings.TrimPrefix(workDir(rec), "/workspace"), "/"), Env: append(f.runs.agentEnv(rec), "SBX_LANE="+hooks.SideLane)})
	e := f.entry(caller, "box.ask", name)
	if err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return redact.Safe{}, f.safeErr(err)
	}
	proc.Stdin().Close()
	parser := p.newParser()
	var text strings.Builder
	w := f.red.NewWriter(&text)
	go drain(proc.Stderr())
	if err := scanLines(proc.Stdout(), func(line []byte) { w.Write([]byte(parser.line(line))) }); err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return redact.Safe{}, f.safeErr(err)
	}
	w.Close()
	st, err := proc.Wait()
	if err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return redact.Safe{}, f.safeErr(err)
	}
	if st.Code != 0 {
		e.Detail = fmt.Sprintf("exit %d", st.Code)
	}
	_ = f.audit.Record(ctx, e)
	if s := parser.session(); s != "" {
		if rec2, lock2, err := f.locks.lockBox(ctx, caller, name); err == nil {
			rec2.Side = s
			_ = f.records.save(ctx, rec2, audit.Entry{})
			lock2.Unlock()
		}
	}
	return f.red.String(text.String()), nil
}

// machine makes sure the box's machine runs, waking it when it sleeps; woke
// says whether it had to. Only the actions that act on a box (exec and
// attach, ask; answer and follow-up wake in answerLocked) call it: what only
// reads uses awake instead. The caller holds the box's lock.
func (f *Fleet) machine(ctx context.Context, caller keys.Actor, rec *record) (woke bool, err error) {
	if rec.State == Sleeping {
		if err := f.wakeLocked(ctx, caller, rec); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, awake(*rec)
}

// awake refuses a box whose machine does not run. The read paths (files,
// artifacts, diff) use it: reading never changes a box, so a sleeping box
// says so rather than being woken by a read-scoped key.
func awake(rec record) error {
	switch rec.State {
	case Running, Waiting, Done:
		return nil
	case Sleeping:
		return fmt.Errorf("box %q is asleep, and reading does not wake it: wake it first (ssh <gateway> wake %s, the console's Wake button or the MCP wake tool): %w",
			rec.Name, rec.Name, ErrConflict)
	case Creating:
		return fmt.Errorf("box %q is still being set up: %w", rec.Name, ErrConflict)
	default:
		return fmt.Errorf("box %q has %s (%s): %w", rec.Name, rec.State, rec.Reason, ErrConflict)
	}
}

func (f *Fleet) exec(ctx context.Context, caller keys.Actor, name string, req ExecRequest) (*Process, error) {
	if len(req.Argv) == 0 {
		return nil, fmt.Errorf("exec: empty command: %w", ErrInvalid)
	}
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return nil, f.safeErr(err)
	}
	defer lock.Unlock()
	woke, err := f.machine(ctx, caller, &rec)
	if err != nil {
		return nil, f.safeErr(err)
	}
	if f.net != nil {
		// A shell in the box reaches out the way its agent does: through
		// the gateway's proxy (the request's own entries win).
		req.Env = append(withoutKeys(netEnv(), req.Env), req.Env...)
	}
	p, err := f.vm.Exec(ctx, rec.VM, req.wire())
	e := f.entry(caller, "box.exec", name)
	e.Detail = firstWord(req.Argv) + " as " + execUserName(req.User)
	if err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return nil, f.safeErr(fmt.Errorf("exec in box %q: %w", name, err))
	}
	_ = f.audit.Record(ctx, e)
	return newProcess(f.red, p, woke, req.TTY), nil
}

// execUserName is who an exec runs as, for its audit row.
func execUserName(user string) string {
	if user == "" {
		return "root"
	}
	return user
}

func firstWord(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}

func (f *Fleet) stats(ctx context.Context, caller keys.Actor, name string) (Stats, error) {
	rec, err := f.locks.resolve(ctx, caller, name)
	if err != nil {
		return Stats{}, f.safeErr(err)
	}
	switch rec.State {
	case Running, Waiting, Done:
		st, err := f.vm.Stats(ctx, rec.VM)
		return Stats{CPUPercent: st.CPUPercent, PrivateBytes: st.PrivateBytes}, f.safeErr(err)
	}
	return Stats{}, nil
}

func (f *Fleet) keep(ctx context.Context, caller keys.Actor, name string, keep bool) (Box, error) {
	action := "box.keep"
	if !keep {
		action = "box.unkeep"
	}
	return f.editBox(ctx, caller, name, action, EventState, func(rec *record) (string, error) {
		rec.Keep = keep
		return "", nil
	})
}

func (f *Fleet) setAllow(ctx context.Context, caller keys.Actor, name string, domains []string) (Box, error) {
	allow, err := cleanAllow(domains)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	return f.editBox(ctx, caller, name, "box.allow", "", func(rec *record) (string, error) {
		rec.Allow = allow
		return strings.Join(allow, " "), nil
	})
}

// editAllow takes remove out of the box's allow-list and puts add in, in
// one change under the box's lock: two fronts adding at once both land.
func (f *Fleet) editAllow(ctx context.Context, caller keys.Actor, name string, add, remove []string) (Box, error) {
	if len(add) == 0 && len(remove) == 0 {
		return Box{}, fmt.Errorf("allow-list: name a domain to add (example.com, *.example.com, example.com:8443, or a preset like @npm) or one to remove: %w", ErrInvalid)
	}
	adding, err := cleanAllow(add)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	gone := map[string]bool{}
	for _, d := range remove {
		if ref, err := netpolicy.ParsePresetRef(d, false); err == nil {
			d = ref
		} else if e, err := netpolicy.ParseEntry(d); err == nil {
			d = e.String()
		}
		gone[d] = true
	}
	return f.editBox(ctx, caller, name, "box.allow", "", func(rec *record) (string, error) {
		list := slices.DeleteFunc(slices.Clone(rec.Allow), func(d string) bool { return gone[d] })
		allow, err := cleanAllow(append(list, adding...))
		if err != nil {
			return "", err
		}
		rec.Allow = allow
		return strings.Join(allow, " "), nil
	})
}

// editBox changes a box's record under its lock: change edits it and says
// the audit row's detail, the save carries that row (action), an event of
// kind (none when ""; a state event's note is the action) tells the
// watchers, and the answer is the box as it now is.
func (f *Fleet) editBox(ctx context.Context, caller keys.Actor, name, action, kind string, change func(*record) (string, error)) (Box, error) {
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer lock.Unlock()
	detail, err := change(&rec)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	e := f.entry(caller, action, name)
	e.Detail = detail
	if err := f.records.save(ctx, rec, e); err != nil {
		return Box{}, f.safeErr(err)
	}
	if kind != "" {
		note := ""
		if kind == EventState {
			note = action
		}
		f.events.emit(rec, kind, note)
	}
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

// withoutKeys drops from env the variables that over sets.
func withoutKeys(env, over []string) []string {
	set := map[string]bool{}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	var out []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			out = append(out, kv)
		}
	}
	return out
}

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
