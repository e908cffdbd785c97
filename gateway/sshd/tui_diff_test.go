package sshd

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
)

// TestTUIDiff: in the fleet TUI, through the real OpenSSH client in tmux,
// D shows the selected box's diff (its changed files and the patch the
// script agent committed in a real box), scrolls, and esc returns to the
// table; from the box view D shows the open box's, and esc returns there.
// The help bars name the key. Then the box view's A (a side question,
// answered in the pager) and e (the allow-list, refused and then set).
func TestTUIDiff(t *testing.T) {
	g := newGateway(t)
	if r := g.run("alice", g.token+"\n", "account", "add", "work"); r.code != 0 {
		t.Fatalf("account add: %+v", r)
	}
	ctx := context.Background()
	b, err := g.fleet.Delegate(ctx, g.actors["alice"], fleet.DelegateRequest{Agent: "script",
		Task:  "!write README.md banana\\nsplit\\nthird\n!commit script agent: add banana\n!say done",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget"}}})
	if err != nil {
		t.Fatal(err)
	}
	g.waitState("alice", b.Name, fleet.Done)
	name := regexp.QuoteMeta(b.Name)

	tm := newTmux(t, 100, 14, g.tuiSSH(""))
	tm.wait(`(?s)`+name+`.*D diff`, time.Minute)
	tm.keys("D")
	tm.wait(`diff of box `+name, 5*time.Second)
	// The script agent's !write appends to README.md ("widget").
	tm.wait(`(?s)1 file\(s\) changed, \+3 −0.*widget/README\.md +\+3 −0.*@@ -1 \+1,4 @@.* widget.*\+banana`, time.Minute)
	tm.wait(`esc/q/D back`, time.Second)
	// 14 rows hold 10 lines of diff: the rest is a page down.
	tm.wait(`lines 1–10 of \d+`, time.Second)
	tm.keys("G")
	tm.wait(`\+third`, 5*time.Second)
	if s := tm.screen(); strings.Contains(s, "1 file(s) changed") {
		t.Errorf("G did not scroll to the end:\n%s", s)
	}
	tm.keys("Escape")
	tm.wait(`sbx fleet — alice`, 5*time.Second)

	// From the box view, D shows the open box's diff and esc goes back.
	tm.keys("Enter")
	tm.wait(`box `+name+` · done`, 5*time.Second)
	tm.keys("D")
	tm.wait(`(?s)diff of box `+name+`.*\+banana`, time.Minute)
	tm.keys("q")
	tm.wait(`box `+name+` · done`, 5*time.Second)

	// A: a side question; its answer, from the box's read-only lane,
	// opens in the same pager.
	tm.keys("A")
	tm.wait(`side question to `+name+`:`, 5*time.Second)
	tm.keys("what is here?", "Enter")
	tm.wait(`(?s)side answer from box `+name+`.*side answer to "what is here\?".*widget.*read-only hook denied a write`, 3*time.Minute)
	tm.keys("Escape")
	tm.wait(`box `+name+` · done`, 5*time.Second)

	// e: the allow-list prompt; Enter sets the list the core checks.
	tm.keys("e")
	tm.wait(`allow-list of `+name+`:`, 5*time.Second)
	tm.keys("pypi.org http://x/", "Enter")
	tm.wait(`error: allowed domain "http://x/"`, 30*time.Second)
	tm.keys("e", "C-u", "pypi.org *.example.com", "Enter")
	tm.wait(name+` may reach: pypi.org \*\.example\.com`, 30*time.Second)
	if b, err := g.fleet.Get(ctx, g.actors["alice"], b.Name); err != nil || strings.Join(b.Allow, " ") != "pypi.org *.example.com" {
		t.Fatalf("the allow-list after e: %+v, %v", b.Allow, err)
	}
}
