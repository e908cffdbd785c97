package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/fleet/seal"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/store"
)

// The notifications' tests run on any host: the core over real SQLite,
// a real sealer, audit and redactor, real HTTP receivers, and boxes whose
// records change state through the core's own transitions (export_test.go)
// rather than agents in machines (this host has no QEMU). The end-to-end
// test with real boxes is notify_vm_test.go.

// nenv is a core without machines whose clock the test moves.
type nenv struct {
	t     *testing.T
	fleet *fleet.Fleet
	store *store.SQLite
	cfg   fleet.Config
	clock *testutil.Clock
	logs  *testutil.SyncBuffer
	alice keys.Actor
	bob   keys.Actor
}

// notifyEnv starts a core that trusts the receivers' loopback addresses as
// the operator trusts a private upstream (net.private_upstreams): the same
// rule that admits any other address, no bypass.
func notifyEnv(t *testing.T, policy fleet.Policy, nc fleet.NotifyConfig, recv ...*fleettest.Receiver) *nenv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	e := &nenv{t: t, clock: testutil.NewClock(time.Now()), logs: &testutil.SyncBuffer{},
		alice: keys.Actor{User: "alice", Role: keys.RoleOperator, Front: "test"},
		bob:   keys.Actor{User: "bob", Role: keys.RoleOperator, Front: "test"}}
	logger := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log (tail):\n%s", fleettest.Tail(e.logs.String(), 8000))
		}
	})
	var trust []string
	for _, r := range recv {
		trust = append(trust, r.HostPort())
	}
	tr, err := netpolicy.ParseTrusts(trust)
	if err != nil {
		t.Fatal(err)
	}
	policy.TickEvery = time.Hour
	e.cfg = fleet.Config{VM: fleettest.NoMachines{}, DataDir: dir, PrivateUpstreams: tr, Notifications: nc, Policy: policy, Now: e.clock.Now, Logger: logger}
	e.open(ctx)
	e.start()
	t.Cleanup(func() {
		e.fleet.Close()
		e.store.Close()
	})
	return e
}

// open (re)opens the store in the data dir and the parts over it.
func (e *nenv) open(ctx context.Context) {
	t := e.t
	var err error
	if e.store, err = store.Open(ctx, filepath.Join(e.cfg.DataDir, store.FileName)); err != nil {
		t.Fatal(err)
	}
	log := audit.New(e.store, e.cfg.Logger, e.clock.Now)
	sealer, err := seal.Load(e.cfg.DataDir, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	acc, err := accounts.New(e.store, sealer, log, accounts.Config{Host: "https://git.example.com", Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(ctx, func(context.Context) ([]string, error) { return nil, nil }, redact.Options{Logger: e.cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.Store, e.cfg.Notify, e.cfg.Accounts, e.cfg.Audit, e.cfg.Redactor, e.cfg.Sealer = e.store, e.store, acc, log, red, sealer
}

// restart stops the core, closes the store, and opens both again: what a
// gateway's restart leaves is only what the data dir holds.
func (e *nenv) restart() {
	e.fleet.Close()
	if err := e.store.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.open(context.Background())
	e.start()
}

func (e *nenv) start() {
	e.t.Helper()
	f, err := fleet.New(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.fleet = f
}

func (e *nenv) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

func addChannel(t *testing.T, e *nenv, req fleet.ChannelRequest, r *fleettest.Receiver) fleet.AddedChannel {
	t.Helper()
	req.URL = r.URL()
	c, err := e.fleet.AddChannel(e.ctx(), e.alice, req)
	if err != nil {
		t.Fatalf("add channel %s: %v", req.Name, err)
	}
	switch {
	case req.Kind == fleet.ChannelWebhook && req.Secret == "":
		r.SetSecret(c.Secret)
	default:
		r.SetSecret(req.Secret)
	}
	return c
}

func noteOf(kind string) func(fleettest.Received) bool {
	return func(g fleettest.Received) bool { return g.Note["type"] == kind }
}

func textHas(s string) func(fleettest.Received) bool {
	return func(g fleettest.Received) bool { return strings.Contains(g.Text, s) }
}

// TestNotifyEventsReachChannels takes a box through waiting, done, asleep
// near its sleep TTL, a pull request's checks and failed, and checks each
// real receiver got what its channel asked for, once, in its kind's format
// (the webhook's signature verified by the Standard Webhooks library),
// linked to the box's page; bob's channel gets nothing of alice's.
func TestNotifyEventsReachChannels(t *testing.T) {
	hook := fleettest.NewReceiver(t, "webhook")
	ntfy := fleettest.NewReceiver(t, "ntfy")
	slack := fleettest.NewReceiver(t, "slack")
	bobs := fleettest.NewReceiver(t, "webhook")
	e := notifyEnv(t, fleet.Policy{SleepTTL: 3 * time.Hour}, fleet.NotifyConfig{PublicURL: "https://sbx.example.com/", DigestHour: 23, ExpiringLead: time.Hour},
		hook, ntfy, slack, bobs)
	ctx := e.ctx()
	added := addChannel(t, e, fleet.ChannelRequest{Name: "hook", Kind: fleet.ChannelWebhook}, hook)
	if !strings.HasPrefix(added.Secret, "whsec_") || !added.HasSecret || len(added.Events) != len(fleet.NotifyEvents) {
		t.Fatalf("added webhook: %+v", added)
	}
	addChannel(t, e, fleet.ChannelRequest{Name: "phone", Kind: fleet.ChannelNtfy, Secret: "tk_ntfytoken0123456789"}, ntfy)
	addChannel(t, e, fleet.ChannelRequest{Name: "team", Kind: fleet.ChannelSlack, Events: []string{"done", "waiting"}}, slack)
	bc, err := e.fleet.AddChannel(ctx, e.bob, fleet.ChannelRequest{Name: "hook", Kind: fleet.ChannelWebhook, URL: bobs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	bobs.SetSecret(bc.Secret)
	const box = "paint-1"
	step := func(to fleet.State, text string) {
		t.Helper()
		if err := e.fleet.TransitionForTest(ctx, box, to, text); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.fleet.AddBoxForTest(ctx, "alice", box, "Paint the fence\nwith care"); err != nil {
		t.Fatal(err)
	}
	step(fleet.Waiting, "Which colour, red or blue?")
	w := hook.Wait(t, "waiting", noteOf("waiting"))
	if w.Bad != "" || w.Note["box"] != box || w.Note["owner"] != "alice" || w.Note["question"] != "Which colour, red or blue?" ||
		w.Note["url"] != "https://sbx.example.com/boxes/"+box || w.Note["title"] != "Paint the fence" {
		t.Errorf("webhook waiting: bad=%q %v", w.Bad, w.Note)
	}
	n := ntfy.Wait(t, "waiting", textHas("is waiting for an answer"))
	if n.Bad != "" || !strings.Contains(n.Text, "Which colour, red or blue?") || n.Header.Get("Click") != "https://sbx.example.com/boxes/"+box || n.Header.Get("Priority") != "4" {
		t.Errorf("ntfy waiting: bad=%q %q %v", n.Bad, n.Text, n.Header)
	}
	if s := slack.Wait(t, "waiting", textHas("is waiting for an answer")); s.Bad != "" || !strings.Contains(s.Text, "Which colour") {
		t.Errorf("slack waiting: %+v", s)
	}
	step(fleet.Running, "")
	step(fleet.Done, "")
	if d := hook.Wait(t, "done", noteOf("done")); d.Bad != "" || d.Note["state"] != "done" {
		t.Errorf("webhook done: %+v", d)
	}
	ntfy.Wait(t, "done", textHas(" is done"))
	slack.Wait(t, "done", textHas(" is done"))

	// Asleep: an hour before the TTL ends its owner hears, once.
	step(fleet.Sleeping, "")
	e.fleet.Tick(ctx)
	e.clock.Add(2*time.Hour + time.Minute)
	e.fleet.Tick(ctx)
	e.fleet.Tick(ctx)
	x := hook.Wait(t, "expiring", noteOf("expiring"))
	if !strings.Contains(x.Note["note"].(string), "sleep TTL destroys it") {
		t.Errorf("expiring: %v", x.Note)
	}
	ntfy.Wait(t, "expiring", textHas("destroyed soon"))
	// Woken back to done: the same turn, not a second "done".
	step(fleet.Done, "")

	// A pull request's checks, as the pull-request watcher publishes them.
	if err := e.fleet.PublishForTest(ctx, box, fleet.EventPRChecks, "PR #7: checks passed"); err != nil {
		t.Fatal(err)
	}
	if p := hook.Wait(t, "pr_checks", noteOf("pr_checks")); p.Note["note"] != "PR #7: checks passed" {
		t.Errorf("pr_checks: %v", p.Note)
	}
	step(fleet.Failed, "machine failed: killed")
	if f := hook.Wait(t, "failed", noteOf("failed")); f.Note["note"] != "machine failed: killed" {
		t.Errorf("failed: %v", f.Note)
	}
	ntfy.Wait(t, "failed", textHas(" failed"))

	time.Sleep(time.Second)
	if got := len(ntfy.All()); got != 5 {
		t.Errorf("ntfy got %d requests, want 5", got)
	}
	checkEachOnce(ctx, t, e.fleet, e.alice, hook, slack, bobs)
	if _, err := e.fleet.Deliveries(ctx, e.bob, "team", 0); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("bob reading alice's delivery log: %v", err)
	}
}

// flakyEnv is a core with one webhook channel "hook" at r, and a box whose

// checkEachOnce: after the five kinds of event (waiting, done, expiring,
// pr_checks, failed), alice's webhook got each once, well formed and with
// ids that never repeat; her Slack channel only the two it asked for
// (done, waiting); bob's channel nothing; and her delivery log holds five
// deliveries, each delivered at the first attempt.
func checkEachOnce(ctx context.Context, t *testing.T, f *fleet.Fleet, alice keys.Actor, hook, slack, bobs *fleettest.Receiver) {
	t.Helper()
	count := func(r *fleettest.Receiver, kind string) int {
		n := 0
		for _, g := range r.All() {
			if g.Bad != "" {
				t.Errorf("%s receiver: a malformed request: %s", r.Kind, g.Bad)
			}
			if g.Note["type"] == kind {
				n++
			}
		}
		return n
	}
	for _, k := range []string{"waiting", "done", "expiring", "pr_checks", "failed"} {
		if c := count(hook, k); c != 1 {
			t.Errorf("webhook got %d %q notifications, want 1", c, k)
		}
	}
	if got := len(slack.All()); got != 2 {
		t.Errorf("slack (done, waiting) got %d requests, want 2", got)
	}
	if got := len(bobs.All()); got != 0 {
		t.Errorf("bob's channel got %d of alice's notifications", got)
	}
	ids := map[string]bool{}
	for _, g := range hook.All() {
		ids[g.Header.Get("webhook-id")] = true
	}
	if len(ids) != len(hook.All()) {
		t.Errorf("webhook ids repeat across distinct notifications: %v", ids)
	}
	log, err := f.Deliveries(ctx, alice, "hook", 0)
	if err != nil || len(log) != 5 {
		t.Fatalf("delivery log: %d %v", len(log), err)
	}
	for _, d := range log {
		if d.Status != fleet.DeliveryDelivered || d.LastStatus != 200 || d.Attempts != 1 || d.Delivered.IsZero() {
			t.Errorf("delivery %+v", d)
		}
	}
}

// pull-request events the tests publish.
func flakyEnv(t *testing.T, r *fleettest.Receiver) (*nenv, string) {
	e := notifyEnv(t, fleet.Policy{}, fleet.NotifyConfig{DigestHour: 23}, r)
	addChannel(t, e, fleet.ChannelRequest{Name: "hook", Kind: fleet.ChannelWebhook, Events: []string{"pr_checks"}}, r)
	if err := e.fleet.AddBoxForTest(e.ctx(), "alice", "b1", "say hi"); err != nil {
		t.Fatal(err)
	}
	return e, "b1"
}

func waitDelivery(t *testing.T, e *nenv, pred func(fleet.Delivery) bool) fleet.Delivery {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var log []fleet.Delivery
	for time.Now().Before(deadline) {
		var err error
		log, err = e.fleet.Deliveries(e.ctx(), e.alice, "hook", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(log) > 0 && pred(log[0]) {
			return log[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("delivery log never got there: %+v", log)
	return fleet.Delivery{}
}

// TestNotifyRetriesWithBackoff: 503 (with Retry-After) and 429 are tried
// again after a backoff that grows and honours Retry-After, under the same
// webhook-id, until the receiver takes it.
func TestNotifyRetriesWithBackoff(t *testing.T) {
	r := fleettest.NewReceiver(t, "webhook")
	r.Respond(func(n int) (int, string) {
		switch n {
		case 1:
			return 503, "600"
		case 2:
			return 429, ""
		}
		return 200, ""
	})
	e, box := flakyEnv(t, r)
	ctx := e.ctx()
	if err := e.fleet.PublishForTest(ctx, box, fleet.EventPRChecks, "PR #1: checks failed"); err != nil {
		t.Fatal(err)
	}
	d := waitDelivery(t, e, func(d fleet.Delivery) bool { return d.Attempts == 1 })
	if d.Status != fleet.DeliveryPending || d.LastStatus != 503 || d.NextAttempt.Sub(e.clock.Now()) < 10*time.Minute-time.Second {
		t.Fatalf("after a 503 with Retry-After 600: %+v (now %v)", d, e.clock.Now())
	}
	// Not before it is due.
	e.clock.Add(5 * time.Minute)
	e.fleet.Tick(ctx)
	time.Sleep(300 * time.Millisecond)
	if got := len(r.All()); got != 1 {
		t.Fatalf("%d requests before the retry was due", got)
	}
	e.clock.Add(6 * time.Minute)
	e.fleet.Tick(ctx)
	d = waitDelivery(t, e, func(d fleet.Delivery) bool { return d.Attempts == 2 })
	if d.Status != fleet.DeliveryPending || d.LastStatus != 429 {
		t.Fatalf("after a 429: %+v", d)
	}
	wait := d.NextAttempt.Sub(e.clock.Now())
	if wait < 3*time.Minute || wait > 5*time.Minute {
		t.Errorf("second backoff %v, want about 4m (2m doubled, ±25%%)", wait)
	}
	e.clock.Add(wait + time.Second)
	e.fleet.Tick(ctx)
	d = waitDelivery(t, e, func(d fleet.Delivery) bool { return d.Attempts == 3 })
	if d.Status != fleet.DeliveryDelivered || d.LastStatus != 200 {
		t.Fatalf("third attempt: %+v", d)
	}
	all := r.All()
	if len(all) != 3 {
		t.Fatalf("%d requests, want 3", len(all))
	}
	for _, g := range all {
		if g.Bad != "" || g.Header.Get("webhook-id") != all[0].Header.Get("webhook-id") {
			t.Errorf("attempt: bad=%q id=%q", g.Bad, g.Header.Get("webhook-id"))
		}
	}
}

// TestNotifyPermanentFailureGivesUp: a 4xx other than 408/429 is given up
// at once with the reason; a receiver failing every time is given up after
// six attempts.
func TestNotifyPermanentFailureGivesUp(t *testing.T) {
	r := fleettest.NewReceiver(t, "webhook")
	r.Respond(func(int) (int, string) { return 404, "" })
	e, box := flakyEnv(t, r)
	ctx := e.ctx()
	if err := e.fleet.PublishForTest(ctx, box, fleet.EventPRChecks, "PR #2: checks passed"); err != nil {
		t.Fatal(err)
	}
	d := waitDelivery(t, e, func(d fleet.Delivery) bool { return d.Status != fleet.DeliveryPending })
	if d.Status != fleet.DeliveryFailed || d.Attempts != 1 || d.LastStatus != 404 || !strings.Contains(d.LastError.String(), "given up: HTTP 404") {
		t.Fatalf("after a 404: %+v", d)
	}
	e.clock.Add(3 * time.Hour)
	e.fleet.Tick(ctx)
	time.Sleep(300 * time.Millisecond)
	if got := len(r.All()); got != 1 {
		t.Errorf("%d requests after a 404, want 1", got)
	}

	r.Respond(func(int) (int, string) { return 500, "" })
	if err := e.fleet.PublishForTest(ctx, box, fleet.EventPRChecks, "PR #3: checks passed"); err != nil {
		t.Fatal(err)
	}
	var last fleet.Delivery
	for i := range 6 {
		last = waitDelivery(t, e, func(d fleet.Delivery) bool { return d.LastStatus == 500 && d.Attempts == i+1 })
		e.clock.Add(3 * time.Hour)
		e.fleet.Tick(ctx)
	}
	if last.Status != fleet.DeliveryFailed || !strings.Contains(last.LastError.String(), "given up after 6 attempts: HTTP 500") {
		t.Fatalf("after six 500s: %+v", last)
	}
	if got := len(r.All()); got != 7 {
		t.Errorf("%d requests, want 1 + 6", got)
	}
}

// TestNotifyRestartResumesPending: a delivery pending when the core and
// its store close is in the database; the next core over the reopened
// store sends it.
func TestNotifyRestartResumesPending(t *testing.T) {
	r := fleettest.NewReceiver(t, "webhook")
	r.Respond(func(int) (int, string) { return 502, "" })
	e, box := flakyEnv(t, r)
	ctx := e.ctx()
	if err := e.fleet.PublishForTest(ctx, box, fleet.EventPRChecks, "PR #4: checks passed"); err != nil {
		t.Fatal(err)
	}
	waitDelivery(t, e, func(d fleet.Delivery) bool { return d.Attempts == 1 && d.Status == fleet.DeliveryPending })
	r.Respond(func(int) (int, string) { return 200, "" })
	e.restart()
	e.clock.Add(time.Hour)
	e.fleet.Tick(ctx)
	d := waitDelivery(t, e, func(d fleet.Delivery) bool { return d.Status != fleet.DeliveryPending })
	if d.Status != fleet.DeliveryDelivered || d.Attempts != 2 {
		t.Fatalf("after the restart: %+v", d)
	}
	if g := r.All(); len(g) != 2 || g[1].Note["note"] != "PR #4: checks passed" || g[1].Bad != "" {
		t.Errorf("requests: %d", len(g))
	}
}

// TestNotifyRefusesPrivateAddresses: a channel at a loopback, private or
// metadata address is refused (ErrInvalid, audited), as an MCP server
// there is; and one the operator trusted and no longer does is refused at
// the dial, not sent.
func TestNotifyRefusesPrivateAddresses(t *testing.T) {
	r := fleettest.NewReceiver(t, "webhook")
	e := notifyEnv(t, fleet.Policy{}, fleet.NotifyConfig{DigestHour: 23}, r)
	ctx := e.ctx()
	for raw, why := range map[string]string{
		"http://127.0.0.1:9/hook":                          "127.0.0.1 is a loopback address",
		"http://169.254.169.254/latest":                    "cloud metadata",
		"http://10.1.2.3/hook":                             "RFC 1918",
		"http://localhost:8080/hook":                       "loopback name",
		"http://[::1]:8080/hook":                           "reserved IPv6",
		"http://100.100.100.200/":                          "CGNAT",
		"https://bob:pw@example.com/h":                     "credentials do not go in the URL",
		"ftp://example.com/h":                              "want http(s)://host/path",
		"https://example.com/h#frag":                       "fragment",
		"https://example.com/" + strings.Repeat("a", 2100): "max 2048",
	} {
		_, err := e.fleet.AddChannel(ctx, e.alice, fleet.ChannelRequest{Name: "x", Kind: fleet.ChannelWebhook, URL: raw})
		if !errors.Is(err, fleet.ErrInvalid) || !strings.Contains(err.Error(), why) {
			t.Errorf("%.60s: %v, want ErrInvalid saying %q", raw, err, why)
		}
	}
	for _, bad := range []fleet.ChannelRequest{
		{Name: "x", Kind: "email", URL: "https://example.com/"},
		{Name: "X y", Kind: "webhook", URL: "https://example.com/"},
		{Name: "x", Kind: "webhook", URL: "https://example.com/", Events: []string{"done", "lunch"}},
		{Name: "x", Kind: "webhook", URL: "https://example.com/", Secret: "not-whsec"},
		{Name: "x", Kind: "webhook", URL: "https://example.com/", Secret: "whsec_c2hvcnQ="},
		{Name: "x", Kind: "slack", URL: "https://example.com/", Secret: "anything"},
		{Name: "x", Kind: "ntfy", URL: "https://example.com/t", Secret: "bad token!"},
	} {
		if _, err := e.fleet.AddChannel(ctx, e.alice, bad); !errors.Is(err, fleet.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	if list, err := e.fleet.Channels(ctx, e.alice); err != nil || len(list) != 0 {
		t.Fatalf("channels after refusals: %v %v", list, err)
	}
	rows, err := e.store.ListAudit(context.Background(), audit.Filter{User: "alice", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, row := range rows {
		if row.Action == "notify.channel.add" && row.Result == audit.ResultError {
			refused++
		}
	}
	if refused != 17 {
		t.Errorf("%d refused notify.channel.add rows, want 17", refused)
	}

	// Trusted when added, no longer trusted: the dial refuses it.
	addChannel(t, e, fleet.ChannelRequest{Name: "hook", Kind: fleet.ChannelWebhook}, r)
	e.fleet.Close()
	e.cfg.PrivateUpstreams = nil
	e.start()
	d, err := e.fleet.TestChannel(ctx, e.alice, "hook")
	if !errors.Is(err, fleet.ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1 is a loopback address") || d.Status != fleet.DeliveryFailed {
		t.Errorf("test to an address no longer trusted: %+v %v", d, err)
	}
	if len(r.All()) != 0 {
		t.Errorf("the receiver got %d requests", len(r.All()))
	}
}

// TestNotifySecretsStayHidden: a channel's secret, token and Slack URL
// path never show in the list, the audit log, the delivery log or the
// gateway's log; test, disable and remove work and are audited.
func TestNotifySecretsStayHidden(t *testing.T) {
	hook := fleettest.NewReceiver(t, "webhook")
	ntfy := fleettest.NewReceiver(t, "ntfy")
	slack := fleettest.NewReceiver(t, "slack")
	e := notifyEnv(t, fleet.Policy{}, fleet.NotifyConfig{DigestHour: 23}, hook, ntfy, slack)
	ctx := e.ctx()
	const secret = "whsec_c2VjcmV0LXNpZ25pbmcta2V5LW9mLXRoaXJ0eS10d28tYnl0ZXM="
	const token = "tk_ntfysecrettoken4711"
	c := addChannel(t, e, fleet.ChannelRequest{Name: "hook", Kind: fleet.ChannelWebhook, Secret: secret}, hook)
	if c.Secret != "" {
		t.Errorf("a given secret was echoed: %+v", c)
	}
	addChannel(t, e, fleet.ChannelRequest{Name: "phone", Kind: fleet.ChannelNtfy, Secret: token}, ntfy)
	addChannel(t, e, fleet.ChannelRequest{Name: "team", Kind: fleet.ChannelSlack}, slack)
	for _, name := range []string{"hook", "phone", "team"} {
		d, err := e.fleet.TestChannel(ctx, e.alice, name)
		if err != nil || d.Status != fleet.DeliveryDelivered || d.LastStatus != 200 {
			t.Errorf("test %s: %+v %v", name, d, err)
		}
	}
	if g := hook.All(); len(g) != 1 || g[0].Bad != "" || g[0].Note["type"] != "test" {
		t.Errorf("webhook test: %+v", g)
	}
	if g := ntfy.All(); len(g) != 1 || g[0].Bad != "" {
		t.Errorf("ntfy test: %+v", g)
	}
	slack.Respond(func(int) (int, string) { return 403, "" })
	if d, err := e.fleet.TestChannel(ctx, e.alice, "team"); !errors.Is(err, fleet.ErrUnavailable) || d.LastStatus != 403 || !strings.Contains(err.Error(), "HTTP 403") {
		t.Errorf("test answered 403: %+v %v", d, err)
	}
	list, err := e.fleet.Channels(ctx, e.alice)
	if err != nil || len(list) != 3 {
		t.Fatalf("channels: %v %v", list, err)
	}
	if list[2].URL != "http://"+slack.HostPort()+"/…" || !list[0].HasSecret || list[2].HasSecret {
		t.Errorf("channels as shown: %+v", list)
	}
	ch, err := e.fleet.SetChannelEnabled(ctx, e.alice, "phone", false)
	if err != nil || ch.Enabled {
		t.Errorf("disable: %+v %v", ch, err)
	}
	if err := e.fleet.RemoveChannel(ctx, e.alice, "hook"); err != nil {
		t.Fatal(err)
	}
	if err := e.fleet.RemoveChannel(ctx, e.bob, "team"); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("bob removing alice's channel: %v", err)
	}
	if _, err := e.fleet.TestChannel(ctx, e.bob, "team"); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("bob testing alice's channel: %v", err)
	}
	if _, err := e.fleet.AddChannel(ctx, e.alice, fleet.ChannelRequest{Name: "team", Kind: "slack", URL: slack.URL()}); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("a second channel of one name: %v", err)
	}
	listJSON, _ := json.Marshal(list)
	log, _ := e.fleet.Deliveries(ctx, e.alice, "team", 0)
	logJSON, _ := json.Marshal(log)
	rows, err := e.store.ListAudit(context.Background(), audit.Filter{User: "alice", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	rowsJSON, _ := json.Marshal(rows)
	actions := map[string]int{}
	for _, row := range rows {
		actions[row.Action]++
	}
	if actions["notify.channel.add"] != 4 || actions["notify.channel.test"] != 4 || actions["notify.channel.disable"] != 1 || actions["notify.channel.rm"] != 1 {
		t.Errorf("audit actions: %v", actions)
	}
	for _, s := range []string{strings.TrimPrefix(secret, "whsec_"), token, "xoxsecretpath"} {
		for what, text := range map[string]string{"list": string(listJSON), "delivery log": string(logJSON), "audit": string(rowsJSON), "gateway log": e.logs.String()} {
			if strings.Contains(text, s) {
				t.Errorf("the %s shows a secret %q", what, s)
			}
		}
	}
}

// TestNotifyDigestOncePerDay: at the configured hour each user with a
// digest channel gets one digest a day (what ran, what waits, the merge
// hook's note), however often the timers tick.
func TestNotifyDigestOncePerDay(t *testing.T) {
	r := fleettest.NewReceiver(t, "webhook")
	other := fleettest.NewReceiver(t, "webhook")
	e := notifyEnv(t, fleet.Policy{}, fleet.NotifyConfig{DigestHour: 0}, r, other)
	ctx := e.ctx()
	addChannel(t, e, fleet.ChannelRequest{Name: "daily", Kind: fleet.ChannelWebhook, Events: []string{"failed"}, Digest: true}, r)
	addChannel(t, e, fleet.ChannelRequest{Name: "nodigest", Kind: fleet.ChannelWebhook, Events: []string{"failed"}}, other)
	b, q := struct{ Name string }{"b-done"}, struct{ Name string }{"b-asks"}
	for _, step := range []struct {
		box string
		to  fleet.State
	}{{b.Name, fleet.Done}, {q.Name, fleet.Waiting}} {
		if err := e.fleet.AddBoxForTest(ctx, "alice", step.box, "task of "+step.box); err != nil {
			t.Fatal(err)
		}
		if err := e.fleet.TransitionForTest(ctx, step.box, step.to, "Shall I?"); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		e.fleet.Tick(ctx)
	}
	g := r.Wait(t, "digest", noteOf("digest"))
	dg, _ := g.Note["digest"].(map[string]any)
	names := func(k string) string {
		var out []string
		for _, x := range dg[k].([]any) {
			out = append(out, x.(map[string]any)["box"].(string))
		}
		return strings.Join(out, ",")
	}
	if !strings.Contains(names("created"), b.Name) || !strings.Contains(names("created"), q.Name) || names("done") != b.Name ||
		names("waiting") != q.Name || dg["merged_note"] == "" {
		t.Errorf("digest: %v", dg)
	}
	e.clock.Add(time.Hour)
	e.fleet.Tick(ctx)
	time.Sleep(500 * time.Millisecond)
	if n := len(r.All()); n != 1 {
		t.Errorf("%d digests on one day, want 1", n)
	}
	if n := len(other.All()); n != 0 {
		t.Errorf("a channel without the digest got %d", n)
	}
	e.clock.Add(24 * time.Hour)
	e.fleet.Tick(ctx)
	r.Wait(t, "the next day's digest", func(g fleettest.Received) bool { return len(r.All()) == 2 })
}
