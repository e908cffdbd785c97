package gateway

import (
	"context"
	"slices"
	"strings"
	"testing"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/gateway/config"
)

// TestPresetGrantKeepsAddressPolicy: a box delegated with @pypi (and the
// site's @crates from net.default_presets) keeps the names on its record;
// the grant the box network gets holds the preset's host names, so
// pypi.org is admitted, while files.pythonhosted.org, on the list through
// the same preset but resolving into a private range, is refused by the
// address policy, and a name on no list by the allow-list; each decision
// audited. The real path: a QEMU box's curl through the egress proxy.
func TestPresetGrantKeepsAddressPolicy(t *testing.T) {
	g := newBoxGatewayWith(t, nil, func(c *config.Config) { c.Net.DefaultPresets = []string{"crates"} })
	ctx := context.Background()
	b, err := g.f.Delegate(ctx, g.alice, fleet.DelegateRequest{Agent: "script", Task: "!say ready", Allow: []string{"@pypi"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Allow, []string{"@pypi"}) {
		t.Fatalf("the box's list %q, want the name @pypi (the site's presets are the grant's, not the box's)", b.Allow)
	}
	g.waitState(b.Name, fleet.Done)
	var machine string
	for _, m := range g.s.core.vm.List() {
		if gr, err := g.f.NetGrant(ctx, m.Name); err == nil && gr.Box == b.Name {
			machine = m.Name
		}
	}
	if machine == "" {
		t.Fatal("no machine holds the box")
	}
	p, err := g.s.core.net.Box(ctx, machine)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pypi.org", "files.pythonhosted.org", "crates.io", "index.crates.io", "static.crates.io"} {
		if !slices.Contains(p.AllowDomains, want) {
			t.Errorf("box network policy %q lacks %s", p.AllowDomains, want)
		}
	}
	for _, d := range p.AllowDomains {
		if strings.HasPrefix(d, "@") {
			t.Errorf("box network policy %q holds a reference", p.AllowDomains)
		}
	}

	// pypi.org: on the list, its address allowed (loopback, which this
	// test's gateway trusts): the proxy dials it, nobody listens on :80.
	out, _ := g.sh(b.Name, "curl -sS --max-time 20 -w ' status=%{http_code}' http://pypi.org/simple/")
	if strings.Contains(out, "status=403") || strings.Contains(out, "allow-list") || strings.Contains(out, "address") {
		t.Errorf("pypi.org through @pypi refused by policy: %s", out)
	}
	for target, why := range map[string]string{
		"http://files.pythonhosted.org/packages/x": "address", // the preset names it; 10.1.2.3 is private
		"http://pypi.org.evil.example/":            "allow-list",
		"http://registry.npmjs.org/":               "allow-list", // @npm was not asked for
	} {
		out, code := g.sh(b.Name, "curl -sS --max-time 20 -w ' status=%{http_code}' "+target)
		if (code == 0 && !strings.Contains(out, "status=403")) || !strings.Contains(out, why) {
			t.Errorf("%s: %d %s; want refused by the %s", target, code, out, why)
		}
	}
	found := false
	for _, r := range g.auditRows("net.egress") {
		if strings.HasPrefix(r.Target, "files.pythonhosted.org") && r.Result == audit.ResultDenied && strings.Contains(r.Detail, "10.1.2.3") {
			found = true
		}
	}
	if !found {
		t.Error("no audit row of the refused files.pythonhosted.org with its address")
	}
}
