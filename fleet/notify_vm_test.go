package fleet_test

import (
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/internal/netpolicy"
)

// vmNotifyEnv is an env with real boxes whose core trusts the receivers'
// loopback addresses (net.private_upstreams), as notifyEnv does.
func vmNotifyEnv(t *testing.T, policy fleet.Policy, nc fleet.NotifyConfig, recv ...*fleettest.Receiver) *env {
	e := newEnv(t, policy)
	e.fleet.Close()
	var trust []string
	for _, r := range recv {
		trust = append(trust, r.HostPort())
	}
	tr, err := netpolicy.ParseTrusts(trust)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.PrivateUpstreams = tr
	e.cfg.Notifications = nc
	e.start()
	return e
}

func vmAddChannel(t *testing.T, e *env, req fleet.ChannelRequest, r *fleettest.Receiver) {
	t.Helper()
	req.URL = r.URL()
	c, err := e.fleet.AddChannel(e.ctx(), e.alice, req)
	if err != nil {
		t.Fatalf("add channel %s: %v", req.Name, err)
	}
	if c.Secret != "" {
		r.SetSecret(c.Secret)
	} else {
		r.SetSecret(req.Secret)
	}
}

// TestNotifyEventsFromRealBoxes drives a real box (QEMU, the agent image) through waiting, done,
// asleep near its sleep TTL and failed, and a pull request's checks, and
// checks each real receiver got what its channel asked for, in its kind's
// format (the webhook's signature verified by the Standard Webhooks
// library), linked to the box's page, and nothing of it reached bob's.
func TestNotifyEventsFromRealBoxes(t *testing.T) {
	hook := fleettest.NewReceiver(t, "webhook")
	ntfy := fleettest.NewReceiver(t, "ntfy")
	slack := fleettest.NewReceiver(t, "slack")
	bobs := fleettest.NewReceiver(t, "webhook")
	e := vmNotifyEnv(t, fleet.Policy{SleepTTL: 3 * time.Hour}, fleet.NotifyConfig{PublicURL: "https://sbx.example.com/", DigestHour: 23, ExpiringLead: time.Hour},
		hook, ntfy, slack, bobs)
	ctx := e.ctx()
	vmAddChannel(t, e, fleet.ChannelRequest{Name: "hook", Kind: fleet.ChannelWebhook}, hook)
	vmAddChannel(t, e, fleet.ChannelRequest{Name: "phone", Kind: fleet.ChannelNtfy, Secret: "tk_ntfytoken0123456789"}, ntfy)
	vmAddChannel(t, e, fleet.ChannelRequest{Name: "team", Kind: fleet.ChannelSlack, Events: []string{"done", "waiting"}}, slack)
	bc, err := e.fleet.AddChannel(ctx, e.bob, fleet.ChannelRequest{Name: "hook", Kind: fleet.ChannelWebhook, URL: bobs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	bobs.SetSecret(bc.Secret)

	b, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Task: "!ask Which colour, red or blue?\n!say painted {answer}", Agent: "script"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(b.Name, fleet.Waiting)
	w := hook.Wait(t, "waiting", noteOf("waiting"))
	if w.Bad != "" || w.Note["box"] != b.Name || w.Note["owner"] != "alice" || w.Note["question"] != "Which colour, red or blue?" ||
		w.Note["url"] != "https://sbx.example.com/boxes/"+b.Name || !strings.Contains(w.Note["title"].(string), "Which colour") {
		t.Errorf("webhook waiting: bad=%q %v", w.Bad, w.Note)
	}
	n := ntfy.Wait(t, "waiting", textHas("is waiting for an answer"))
	if n.Bad != "" || !strings.Contains(n.Text, "Which colour, red or blue?") || n.Header.Get("Click") != "https://sbx.example.com/boxes/"+b.Name || n.Header.Get("Priority") != "4" {
		t.Errorf("ntfy waiting: bad=%q %q %v", n.Bad, n.Text, n.Header)
	}
	if s := slack.Wait(t, "waiting", textHas("is waiting for an answer")); s.Bad != "" || !strings.Contains(s.Text, "Which colour") {
		t.Errorf("slack waiting: %+v", s)
	}

	if _, err := e.fleet.Answer(ctx, e.alice, b.Name, "blue"); err != nil {
		t.Fatal(err)
	}
	e.waitState(b.Name, fleet.Done)
	if d := hook.Wait(t, "done", noteOf("done")); d.Bad != "" || d.Note["state"] != "done" {
		t.Errorf("webhook done: %+v", d)
	}
	ntfy.Wait(t, "done", textHas(" is done"))
	slack.Wait(t, "done", textHas(" is done"))

	// Asleep: an hour before the TTL ends its owner hears, once.
	if _, err := e.fleet.Sleep(ctx, e.alice, b.Name); err != nil {
		t.Fatal(err)
	}
	e.fleet.Tick(ctx)
	e.clock.Add(2*time.Hour + time.Minute)
	e.fleet.Tick(ctx)
	e.fleet.Tick(ctx)
	x := hook.Wait(t, "expiring", noteOf("expiring"))
	if !strings.Contains(x.Note["note"].(string), "sleep TTL destroys it") {
		t.Errorf("expiring: %v", x.Note)
	}
	ntfy.Wait(t, "expiring", textHas("destroyed soon"))

	// Waking a done box makes it done again: not a second "done".
	if _, err := e.fleet.Wake(ctx, e.alice, b.Name); err != nil {
		t.Fatal(err)
	}

	// A pull request's checks, as the pull-request watcher publishes them.
	if err := e.fleet.PublishForTest(ctx, b.Name, fleet.EventPRChecks, "PR #7: checks passed"); err != nil {
		t.Fatal(err)
	}
	if p := hook.Wait(t, "pr_checks", noteOf("pr_checks")); p.Note["note"] != "PR #7: checks passed" {
		t.Errorf("pr_checks: %v", p.Note)
	}

	// A failing setup fails its box.
	if _, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Task: "!say never", Agent: "script", Setup: "false"}); err == nil {
		t.Fatal("a failing setup delegated")
	}
	if f := hook.Wait(t, "failed", noteOf("failed")); !strings.Contains(f.Note["note"].(string), "setup step exited 1") {
		t.Errorf("failed: %v", f.Note)
	}
	ntfy.Wait(t, "failed", textHas(" failed"))

	// Each once; the slack channel only what it asked for; bob nothing.
	time.Sleep(time.Second)
	checkEachOnce(ctx, t, e.fleet, e.alice, hook, slack, bobs)
}
