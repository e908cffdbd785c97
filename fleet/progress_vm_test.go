package fleet_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
)

// steps records a delegation's steps as "name start|done|failed text".
type steps struct{ got []fleet.Step }

func (s *steps) report(st fleet.Step) { s.got = append(s.got, st) }

func (s *steps) lines() []string {
	var out []string
	for _, st := range s.got {
		how := "start"
		switch {
		case st.Done && st.Err != nil:
			how = "failed"
		case st.Done:
			how = "done"
		}
		out = append(out, fmt.Sprintf("%d/%d %s %s %s", st.N, st.Of, st.Name, how, st.Text))
	}
	return out
}

// TestDelegateReportsSteps: a real delegation reports each step as it
// starts and as it ends, in order, numbered against its plan — the clone,
// the boot (naming the kernel), the copy in, the setup script, the agent;
// a warm box shows as taken instead of booted; a failing step is reported
// failed with Delegate's own error, and nothing after it.
func TestDelegateReportsSteps(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	ctx := e.ctx()
	var s steps
	b, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Task: "!say hi", Agent: "script",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget"}}, Setup: "true", Progress: s.report})
	if err != nil {
		t.Fatal(err)
	}
	kernel := e.vm.BootNote()
	if kernel != "small kernel" && kernel != "stock kernel" {
		t.Fatalf("BootNote %q", kernel)
	}
	want := []string{
		"1/5 clone start cloning acme/widget", "1/5 clone done cloning acme/widget",
		"2/5 boot start booting (" + kernel + ")", "2/5 boot done booting (" + kernel + ")",
		"3/5 copy start copying acme/widget in", "3/5 copy done copying acme/widget in",
		"4/5 setup start running the setup script", "4/5 setup done running the setup script",
		"5/5 agent start starting the agent (script)", "5/5 agent done starting the agent (script)",
	}
	if got := s.lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, st := range s.got {
		if st.Done && st.Took <= 0 {
			t.Errorf("step %q took %v", st.Text, st.Took)
		}
	}
	e.waitState(b.Name, fleet.Done)

	// A ref that is not there: the clone fails, reported with the error
	// Delegate returns, and nothing else starts.
	s = steps{}
	_, err = e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Task: "x", Agent: "script",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget", Ref: "no-such-branch"}}, Progress: s.report})
	if !errors.Is(err, fleet.ErrInvalid) {
		t.Fatalf("missing ref: %v", err)
	}
	if got := s.lines(); strings.Join(got, "\n") != "1/4 clone start cloning acme/widget\n1/4 clone failed cloning acme/widget" ||
		s.got[1].Err.Error() != err.Error() {
		t.Fatalf("steps of a failed clone:\n%s\n(%v)", strings.Join(got, "\n"), s.got[len(s.got)-1].Err)
	}

	// With a warm box ready the boot step takes it.
	if _, err := e.fleet.SetPool(ctx, e.admin, 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := e.fleet.Pool(ctx, e.admin)
		if err != nil {
			t.Fatal(err)
		}
		if st.Ready == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warm box after 2 minutes: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s = steps{}
	if _, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Task: "!say warm", Agent: "script", Progress: s.report}); err != nil {
		t.Fatal(err)
	}
	if got := s.lines(); len(got) != 4 || got[1] != "1/2 boot done taking a warm box" || got[3] != "2/2 agent done starting the agent (script)" {
		t.Fatalf("steps with a warm box:\n%s", strings.Join(got, "\n"))
	}
}
