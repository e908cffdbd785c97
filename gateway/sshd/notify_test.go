package sshd

import (
	"encoding/json"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/internal/netpolicy"
)

// newNotifyGateway is the SSH front over a core without machines (the
// notification commands need no box) that trusts the receivers' loopback
// addresses as an operator trusts a private upstream.
func newNotifyGateway(t *testing.T, recv ...*fleettest.Receiver) *gateway {
	t.Helper()
	return newGatewayFrom(t, fleettest.Options{NoAccount: true, NoMachines: true, Configure: trustReceivers(t, recv...)}, nil)
}

// trustReceivers configures a core to reach the receivers' loopback
// addresses, as an operator trusts a private upstream.
func trustReceivers(t *testing.T, recv ...*fleettest.Receiver) func(*fleet.Config) {
	t.Helper()
	var trust []string
	for _, r := range recv {
		trust = append(trust, r.HostPort())
	}
	tr, err := netpolicy.ParseTrusts(trust)
	if err != nil {
		t.Fatal(err)
	}
	return func(c *fleet.Config) { c.PrivateUpstreams = tr }
}

// TestNotifyCommands drives the notify family through the real OpenSSH
// client against real receivers: add (a webhook's secret shown once, an
// ntfy token from stdin), ls without secrets, test (the signature checked
// by the Standard Webhooks library; a failing receiver's answer shown),
// log, disable, rm, and the errors' exit codes.
func TestNotifyCommands(t *testing.T) {
	hook := fleettest.NewReceiver(t, "webhook")
	ntfy := fleettest.NewReceiver(t, "ntfy")
	slack := fleettest.NewReceiver(t, "slack")
	g := newNotifyGateway(t, hook, ntfy, slack)

	var added struct {
		OK      bool
		Channel fleet.AddedChannel
	}
	if err := json.Unmarshal([]byte(g.must("alice", "notify", "add", "hook", "--kind", "webhook", "--url", hook.URL(), "--json")), &added); err != nil {
		t.Fatal(err)
	}
	if !added.OK || !strings.HasPrefix(added.Channel.Secret, "whsec_") || added.Channel.Kind != "webhook" {
		t.Fatalf("notify add --json: %+v", added)
	}
	hook.SetSecret(added.Channel.Secret)
	const token = "tk_phoneToken_4711xyz"
	if r := g.run("alice", token+"\n", "notify", "add", "phone", "--kind", "ntfy", "--url", ntfy.URL(), "--events", "waiting,failed", "--secret-stdin"); r.code != 0 ||
		!strings.Contains(r.stdout, "added ntfy channel phone") || strings.Contains(r.stdout, token) {
		t.Fatalf("notify add phone: %+v", r)
	}
	ntfy.SetSecret(token)
	out := g.must("alice", "notify", "add", "team", "--kind", "slack", "--url", slack.URL(), "--events", "done", "--digest")
	if !strings.Contains(out, "added slack channel team") || strings.Contains(out, "signing secret") {
		t.Errorf("notify add team: %q", out)
	}

	ls := g.must("alice", "notify", "ls")
	lsJSON := g.must("alice", "notify", "ls", "--json")
	var list []fleet.Channel
	if err := json.Unmarshal([]byte(lsJSON), &list); err != nil || len(list) != 3 {
		t.Fatalf("notify ls --json: %v %s", err, lsJSON)
	}
	if !strings.Contains(ls, "phone") || !strings.Contains(ls, "waiting,failed") || !strings.Contains(ls, "+digest") {
		t.Errorf("notify ls: %q", ls)
	}
	if r := g.run("bob", "", "notify", "ls"); r.code != 0 || strings.Contains(r.stdout, "phone") {
		t.Errorf("bob sees alice's channels: %+v", r)
	}

	for _, name := range []string{"hook", "phone", "team"} {
		if out := g.must("alice", "notify", "test", name); out != "delivered: the receiver answered HTTP 200\n" {
			t.Errorf("notify test %s: %q", name, out)
		}
	}
	for _, r := range []*fleettest.Receiver{hook, ntfy, slack} {
		if got := r.All(); len(got) != 1 || got[0].Bad != "" {
			t.Errorf("%s receiver: %+v", r.Kind, got)
		}
	}
	slack.Respond(func(int) (int, string) { return 500, "" })
	if r := g.run("alice", "", "notify", "test", "team"); r.code == 0 || !strings.Contains(r.stderr, "HTTP 500") {
		t.Errorf("notify test of a failing receiver: %+v", r)
	}
	var log []struct {
		Status     string
		LastStatus int `json:"last_status"`
	}
	if err := json.Unmarshal([]byte(g.must("alice", "notify", "log", "team", "--json")), &log); err != nil || len(log) != 2 ||
		log[0].Status != fleet.DeliveryFailed || log[0].LastStatus != 500 || log[1].Status != fleet.DeliveryDelivered {
		t.Errorf("notify log team: %v %+v", err, log)
	}
	if out := g.must("alice", "notify", "log", "team"); !strings.Contains(out, "http=500") || !strings.Contains(out, "delivered") {
		t.Errorf("notify log team: %q", out)
	}

	if out := g.must("alice", "notify", "disable", "phone"); out != "disabled notification channel phone\n" {
		t.Errorf("notify disable: %q", out)
	}
	if out := g.must("alice", "notify", "ls"); !strings.Contains(out, "ntfy    off") {
		t.Errorf("notify ls after disable: %q", out)
	}
	g.must("alice", "notify", "rm", "team")
	for _, c := range []struct {
		user  string
		args  []string
		code  int
		says  string
		stdin string
	}{
		{"bob", []string{"notify", "rm", "hook"}, exitNotFound, "not found", ""},
		{"bob", []string{"notify", "test", "hook"}, exitNotFound, "not found", ""},
		{"alice", []string{"notify", "add", "x", "--kind", "email", "--url", "https://example.com/"}, exitInvalid, "want webhook, ntfy or slack", ""},
		{"alice", []string{"notify", "add", "x", "--kind", "webhook", "--url", "http://169.254.169.254/"}, exitInvalid, "cloud metadata", ""},
		{"alice", []string{"notify", "add", "x", "--kind", "webhook", "--url", "https://example.com/", "--events", "done,lunch"}, exitInvalid, `event "lunch"`, ""},
		{"alice", []string{"notify", "add", "hook", "--kind", "webhook", "--url", "https://example.com/"}, 0, "already exists", ""},
		{"alice", []string{"notify", "add", "y", "--kind", "ntfy", "--url", "https://example.com/t", "--secret-stdin"}, exitInvalid, "no secret on stdin", ""},
	} {
		r := g.run(c.user, c.stdin, c.args...)
		if (c.code != 0 && r.code != c.code) || r.code == 0 || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%s %v: exit %d %q, want %d saying %q", c.user, c.args, r.code, r.stderr, c.code, c.says)
		}
	}
	for _, s := range []string{strings.TrimPrefix(added.Channel.Secret, "whsec_"), token, "xoxsecretpath"} {
		for what, text := range map[string]string{"ls": ls + lsJSON, "gateway log": g.logs.String(), "audit": g.must("root", "audit", "--since", "1h", "--json")} {
			if strings.Contains(text, s) {
				t.Errorf("notify: the %s shows a secret", what)
			}
		}
	}
}

func TestLoggedCommandHidesURLPaths(t *testing.T) {
	got := strings.Join(loggedCommand([]string{"notify", "add", "t", "--url", "https://hooks.slack.com/services/T/B/secret", "--url=http://u:p@ntfy.example/topic?x=1", "mcp", "HTTPS://h.example/p"}), " ")
	if want := "notify add t --url https://hooks.slack.com/… --url=http://…@ntfy.example/… mcp https://h.example/…"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
