package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/hooks"
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
		f.audit.Finish(ctx, f.entry(caller, "box.answer", name), err, "error")
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
		f.audit.Finish(ctx, e, err, "error")
		return redact.Safe{}, f.safeErr(err)
	}
	proc.Stdin().Close()
	parser := p.newParser()
	var text strings.Builder
	w := f.red.NewWriter(&text)
	go drain(proc.Stderr())
	if err := scanLines(proc.Stdout(), func(line []byte) { w.Write([]byte(parser.line(line))) }); err != nil {
		f.audit.Finish(ctx, e, err, "error")
		return redact.Safe{}, f.safeErr(err)
	}
	w.Close()
	st, err := proc.Wait()
	if err != nil {
		f.audit.Finish(ctx, e, err, "error")
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

func (f *Fleet) sleep(ctx context.Context, caller keys.Actor, name, why string) (Box, error) {
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer lock.Unlock()
	if err := f.sleepLocked(ctx, caller, &rec, why); err != nil {
		return Box{}, f.safeErr(err)
	}
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

func (f *Fleet) sleepLocked(ctx context.Context, caller keys.Actor, rec *record, why string) error {
	switch rec.State {
	case Running, Waiting, Done:
	case Sleeping:
		return fmt.Errorf("box %q is already asleep: %w", rec.Name, ErrConflict)
	default:
		return fmt.Errorf("box %q is %s and cannot sleep: %w", rec.Name, rec.State, ErrConflict)
	}
	f.runs.stop(rec.Name)
	if _, err := f.vm.Sleep(ctx, rec.VM); err != nil {
		if rec.State == Running {
			f.runs.follow(*rec, nil)
		}
		return vmErr(err)
	}
	rec.StateBeforeSleep = rec.State
	rec.SleptAt = f.now()
	return f.records.transition(ctx, rec, Sleeping, caller, "box.sleep", why)
}

func (f *Fleet) wake(ctx context.Context, caller keys.Actor, name string) (Box, error) {
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer lock.Unlock()
	if rec.State != Sleeping {
		return Box{}, f.safeErr(fmt.Errorf("box %q is %s, not asleep: %w", name, rec.State, ErrConflict))
	}
	if err := f.wakeLocked(ctx, caller, &rec); err != nil {
		return Box{}, f.safeErr(err)
	}
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

// wakeLocked brings a sleeping box back to where it was. A turn that was
// running resumes being followed; after a cold boot (no usable memory
// snapshot) the agent's process is gone, so the turn ends as lost.
func (f *Fleet) wakeLocked(ctx context.Context, caller keys.Actor, rec *record) error {
	b, err := f.vm.Wake(ctx, rec.VM)
	if err != nil {
		return vmErr(err)
	}
	to := rec.StateBeforeSleep
	if to == "" {
		to = Done
	}
	cold := strings.Contains(strings.ToLower(b.Reason), "cold")
	rec.SleptAt = time.Time{}
	rec.LastOutput = f.now()
	if cold && to == Running {
		rec.TurnDone = true
		_ = f.logs.append(rec.Name, fmt.Sprintf("── turn %d lost: the box woke by a cold boot (%s) ──\n", rec.Turn, b.Reason))
		to = Done
	}
	if err := f.records.transition(ctx, rec, to, caller, "box.wake", b.Reason); err != nil {
		return err
	}
	if to == Running {
		f.runs.follow(*rec, nil)
	}
	return nil
}

func (f *Fleet) destroy(ctx context.Context, caller keys.Actor, name string) error {
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return f.safeErr(err)
	}
	defer lock.Unlock()
	return f.safeErr(f.destroyLocked(ctx, caller, &rec, ""))
}

func (f *Fleet) destroyLocked(ctx context.Context, caller keys.Actor, rec *record, why string) error {
	f.runs.stop(rec.Name)
	if rec.VM != "" {
		if err := f.vm.Destroy(ctx, rec.VM); err != nil && !errors.Is(vmErr(err), ErrNotFound) {
			return fmt.Errorf("destroy box %q: %w", rec.Name, vmErr(err))
		}
	}
	if f.net != nil && rec.VM != "" {
		f.net.Detach(rec.VM)
	}
	e := f.entry(caller, "box.destroy", rec.Name)
	e.Detail = why
	if err := f.store.DeleteBox(ctx, rec.Name, e); err != nil {
		return err
	}
	f.audit.Finish(ctx, e, nil, "")
	rec.State = Destroyed
	f.locks.drop(rec.Name)
	f.logs.remove(rec.Name) // followers get io.EOF
	f.events.emit(*rec, EventRemoved, why)
	return nil
}
