package sshd

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
)

// TestTUIEdits: the TUI's t, r, i and M through the real OpenSSH client
// in tmux, against a real box whose script agent is mid-turn: t retitles
// it (an empty title shows the core's refusal), r adds acme/widget to it,
// i lists the follow-up queued meanwhile and d, y remove it, and M, y
// show the core's answer on a gateway without a forge. The core's state
// is read back after each.
func TestTUIEdits(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	alice := g.actors["alice"]
	if _, err := g.fleet.AddAccount(ctx, alice, "work", g.token, "acme/widget"); err != nil {
		t.Fatal(err)
	}
	b, err := g.fleet.Delegate(ctx, alice, fleet.DelegateRequest{Agent: "script", Task: "!say start\n!sleep 300"})
	if err != nil {
		t.Fatal(err)
	}
	g.h.WaitLog(alice, b.Name, "start")
	res, err := g.fleet.FollowUp(ctx, alice, b.Name, "queued while busy", false)
	if err != nil || res.Outcome != fleet.Queued {
		t.Fatalf("follow-up mid-turn: %+v %v", res, err)
	}
	name := regexp.QuoteMeta(b.Name)
	get := func() fleet.Box {
		t.Helper()
		b, err := g.fleet.Get(ctx, alice, b.Name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	tm := newTmux(t, 140, 20, g.tuiSSH(""))
	tm.wait(`sbx fleet — alice.*1 box`, time.Minute)
	tm.wait(name, 5*time.Second)

	tm.keys("t")
	tm.wait(`title of `+name+`: !say start`, 5*time.Second)
	tm.keys("C-u", "Enter")
	tm.wait(`error: empty title`, 10*time.Second)
	tm.keys("t", "C-u", "widget: docs pass", "Enter")
	tm.wait(`box `+name+` is titled "widget: docs pass"`, 10*time.Second)
	tm.wait(name+`.*widget: docs pass`, 5*time.Second) // the table, from the title's event
	if got := get().Title.String(); got != "widget: docs pass" {
		t.Fatalf("the core's title after t: %q", got)
	}

	tm.keys("r")
	tm.wait(`add to `+name+` \(owner/name\[@ref\]\):`, 5*time.Second)
	tm.keys("acme/widget@main", "Enter")
	tm.wait(`added acme/widget to `+name+` in /workspace/widget`, time.Minute)
	if rs := get().Repos; len(rs) != 1 || rs[0].Name != "acme/widget" || rs[0].Ref != "main" {
		t.Fatalf("the core's repos after r: %+v", rs)
	}

	tm.keys("i")
	tm.wait(`(?s)inbox of box `+name+` — 1 queued follow-up.*#`+fmt.Sprint(res.InboxID)+` .*alice .*queued while busy`, 10*time.Second)
	tm.wait(`esc/q/i back`, time.Second)
	tm.keys("d")
	tm.wait(`remove inbox item `+fmt.Sprint(res.InboxID)+` of `+name+`\? y/N`, 5*time.Second)
	tm.keys("y")
	tm.wait(`removed inbox item `+fmt.Sprint(res.InboxID)+` of `+name, 10*time.Second)
	tm.wait(`the inbox is empty`, 5*time.Second)
	if items, err := g.fleet.Inbox(ctx, alice, b.Name); err != nil || len(items) != 0 {
		t.Fatalf("the core's inbox after d y: %+v %v", items, err)
	}
	tm.keys("Escape")
	tm.wait(`sbx fleet — alice`, 5*time.Second)

	tm.keys("M")
	tm.wait(`merge the pull request of `+name+`\? y/N`, 5*time.Second)
	tm.keys("y")
	tm.wait(`error: box "`+name+`" has no pull request for acme/widget yet`, 10*time.Second)
}
