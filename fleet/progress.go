package fleet

import (
	"fmt"
	"time"
)

// A delegation's progress: the core names its steps (cloning each repo,
// booting, copying each repo in, the setup script, starting the agent) and
// reports each as it starts and as it ends, to DelegateRequest.Progress.
// Fronts only render them (Step.String), so every front says the same.
//
// Why a callback and not the box's event stream: the longest step, the
// clone, runs before the box exists (Delegate checks every repo and ref
// before creating anything), and an event subscriber that falls behind
// loses events, where a step list must arrive whole and in order.

// Step names.
const (
	StepClone = "clone" // a repo cloned on the host (Text names it)
	StepBoot  = "boot"  // a machine booted, or a warm one claimed
	StepCopy  = "copy"  // a repo copied into the box
	StepSetup = "setup" // the operator's setup script
	StepAgent = "agent" // the agent's settings installed and its first turn started
)

// Step is one step of a delegation, reported when it starts (Done false)
// and when it ends (Done true, with Took, and Err when it failed).
type Step struct {
	Name string
	// Text says what the step does, for people: "cloning acme/widget",
	// "booting (small kernel)", "taking a warm box".
	Text string
	// N is the step's place (from 1) among Of, the delegation's steps.
	N, Of int
	// Done: the step has ended; Took is how long it ran.
	Done bool
	Took time.Duration
	// Err is why the step failed (redacted; Delegate returns it too).
	Err error
}

// String is the step as one line shows it: "cloning acme/widget…" while
// it runs, "cloning acme/widget… 1.2 s" when done, "… failed after 1.2 s".
func (s Step) String() string {
	if !s.Done {
		return s.Doing()
	}
	return s.Doing() + " " + s.Result()
}

// Doing is the step's text as it starts: "cloning acme/widget…".
func (s Step) Doing() string { return s.Text + "…" }

// Result is how a done step ended: "1.2 s" or "failed after 1.2 s".
func (s Step) Result() string {
	if s.Err != nil {
		return "failed after " + Took(s.Took)
	}
	return Took(s.Took)
}

// Took writes a step's duration for people: "340 ms", "1.2 s", "2 min 5 s".
func Took(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
}

// progress reports one delegation's steps in order, from the delegating
// goroutine.
type progress struct {
	report func(Step)
	safe   func(error) error
	n, of  int
}

// plan sets how many steps the delegation has: one clone and one copy per
// repo, the boot, the setup script if any, the agent.
func (p *progress) plan(repos int, setup bool) {
	p.of = 2*repos + 2
	if setup {
		p.of++
	}
}

// start reports a step starting; the returned func reports it ending with
// err (nil: done) and returns err, so a call site reads
// `return end(err)`.
func (p *progress) start(name, text string) (end func(error) error) {
	p.n++
	s := Step{Name: name, Text: text, N: p.n, Of: max(p.of, p.n)}
	p.send(s)
	t0 := time.Now()
	ended := false
	return func(err error) error {
		if ended {
			return err
		}
		ended = true
		s.Done, s.Took = true, time.Since(t0)
		if err != nil {
			s.Err = p.safe(err)
		}
		p.send(s)
		return err
	}
}

func (p *progress) send(s Step) {
	if p.report != nil {
		p.report(s)
	}
}
