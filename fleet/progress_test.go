package fleet

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestStepLines(t *testing.T) {
	for _, c := range []struct {
		s    Step
		want string
	}{
		{Step{Text: "cloning acme/widget"}, "cloning acme/widget…"},
		{Step{Text: "cloning acme/widget", Done: true, Took: 1234 * time.Millisecond}, "cloning acme/widget… 1.2 s"},
		{Step{Text: "booting (small kernel)", Done: true, Took: 389 * time.Millisecond}, "booting (small kernel)… 389 ms"},
		{Step{Text: "running the setup script", Done: true, Took: 125 * time.Second}, "running the setup script… 2 min 5 s"},
		{Step{Text: "booting", Done: true, Took: 3 * time.Second, Err: errors.New("no")}, "booting… failed after 3.0 s"},
	} {
		if got := c.s.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.s, got, c.want)
		}
	}
}

// TestProgressReportsInOrder: each step is reported as it starts and as it
// ends, numbered against the plan, its error redacted by the core's hook;
// ending it twice reports once.
func TestProgressReportsInOrder(t *testing.T) {
	var got []Step
	p := &progress{report: func(s Step) { got = append(got, s) }, safe: func(err error) error { return errors.New("safe: " + err.Error()) }}
	p.plan(1, false) // clone, boot, copy, agent
	if err := p.start(StepClone, "cloning acme/widget")(nil); err != nil {
		t.Fatal(err)
	}
	end := p.start(StepBoot, "booting")
	boom := errors.New("boom")
	if err := end(boom); err != boom {
		t.Fatalf("end returns %v, want the step's own error", err)
	}
	end(nil)
	var lines []string
	for _, s := range got {
		lines = append(lines, s.Name)
		if s.Of != 4 {
			t.Errorf("step %d of %d, want of 4", s.N, s.Of)
		}
	}
	if want := []string{StepClone, StepClone, StepBoot, StepBoot}; !slices.Equal(lines, want) {
		t.Fatalf("reported %v, want %v", lines, want)
	}
	if got[0].Done || !got[1].Done || got[1].Err != nil || got[2].N != 2 || got[3].Err == nil || got[3].Err.Error() != "safe: boom" {
		t.Fatalf("steps %+v", got)
	}
	// Without a Progress hook nothing is reported and nothing breaks.
	(&progress{safe: func(err error) error { return err }}).start(StepAgent, "starting the agent")(nil)
}
