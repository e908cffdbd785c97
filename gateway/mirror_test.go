package gateway

import (
	"context"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/registrytest"
	"sbx.dev/sbx/keys"
)

// TestMirrorNpmInstall: a real `npm install` in a box through the egress
// proxy from an internal npm registry on a private address (loopback here,
// which this gateway does not trust). The box's allow-list names the
// registry's host; without a mirror the address policy refuses it, with the
// reason in the box's decision log; once an admin adds the mirror (audited)
// the same install lands the package and its dependency in node_modules,
// and the decision says which mirror let it through.
func TestMirrorNpmInstall(t *testing.T) {
	reg := registrytest.NewNPM(t,
		registrytest.Package{Name: "sbx-mirror-dep", Version: "1.0.0", Files: map[string]string{"index.js": "module.exports = 'from the dependency';\n"}},
		registrytest.Package{Name: "sbx-mirror-hello", Version: "2.1.0", Dependencies: map[string]string{"sbx-mirror-dep": "^1.0.0"},
			Files: map[string]string{"index.js": "module.exports = 'hello through the mirror, ' + require('sbx-mirror-dep');\n"}},
	)
	u, err := url.Parse(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	const name = "npm.mirror.test"
	hostPort := name + ":" + u.Port()
	g := newBoxGatewayOpts(t, nil, nil, func(o *Options) {
		// No loopback trust: 127.0.0.1 is refused as on a real gateway.
		o.Egress.Trust = nil
		o.Egress.Resolver = testResolver{name: netip.MustParseAddr("127.0.0.1")}
	})
	ctx := context.Background()
	admin := keys.Actor{User: "root", Role: keys.RoleAdmin, Front: "test"}

	b, err := g.f.Delegate(ctx, g.alice, fleet.DelegateRequest{Agent: "script", Task: "!say ready", Allow: []string{hostPort}})
	if err != nil {
		t.Fatal(err)
	}
	g.waitState(b.Name, fleet.Done)
	install := "set -e; rm -rf /tmp/p; mkdir -p /tmp/p; cd /tmp/p; echo '{\"name\":\"p\",\"version\":\"1.0.0\"}' > package.json; " +
		"s=$(date +%s%N); npm install --registry http://" + hostPort + "/ --no-audit --no-fund --no-update-notifier --fetch-retries 0 sbx-mirror-hello 2>&1; " +
		"echo npm_install_ms=$((($(date +%s%N)-s)/1000000)); " +
		"cat node_modules/sbx-mirror-hello/index.js node_modules/sbx-mirror-dep/index.js; ls node_modules"

	// Without the mirror: refused by the address policy.
	out, code := g.sh(b.Name, install)
	if code == 0 || strings.Contains(out, "from the dependency") {
		t.Fatalf("install without a mirror succeeded (%d): %s", code, out)
	}
	if !strings.Contains(out, "403") {
		t.Errorf("npm's error does not show the proxy's refusal: %s", out)
	}
	if !denied(g.auditRows("net.egress"), hostPort, "127.0.0.1 is a loopback address") {
		t.Fatalf("no refusal of %s with the loopback reason in the decision log: %+v", hostPort, g.auditRows("net.egress"))
	}
	if len(reg.Requests()) != 0 {
		t.Fatalf("the registry was reached without a mirror: %v", reg.Requests())
	}

	// Only an admin declares a mirror.
	if _, err := g.f.AddMirror(ctx, g.alice, "corp-npm", hostPort, []string{"127.0.0.1"}); err == nil {
		t.Fatal("an operator added a mirror")
	}
	if _, err := g.f.AddMirror(ctx, admin, "corp-npm", hostPort, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	list, err := g.f.Mirrors(ctx, g.alice)
	if err != nil || len(list) != 1 || list[0].Name != "corp-npm" || list[0].Host != hostPort || list[0].AddedBy != "root" {
		t.Fatalf("alice sees mirrors %+v, %v", list, err)
	}

	start := time.Now()
	out, code = g.sh(b.Name, install)
	took := time.Since(start)
	if code != 0 || !strings.Contains(out, "module.exports = 'hello through the mirror, ' + require('sbx-mirror-dep');") ||
		!strings.Contains(out, "module.exports = 'from the dependency';") {
		t.Fatalf("install through the mirror (%d): %s", code, out)
	}
	ms := ""
	if _, after, ok := strings.Cut(out, "npm_install_ms="); ok {
		ms, _, _ = strings.Cut(after, "\n")
	}
	base, _ := g.sh(b.Name, "s=$(date +%s%N); npm --version >/dev/null; echo $((($(date +%s%N)-s)/1000000))")
	t.Logf("npm install of 2 packages through the mirror: %s ms in the box (npm --version alone: %s ms), %v for the whole exec; the registry saw %v",
		ms, strings.TrimSpace(base), took, reg.Requests())
	allowed := false
	for _, r := range g.auditRows("net.egress") {
		if r.Target == hostPort && r.Result == audit.ResultOK && strings.Contains(r.Detail, "internal mirror exception") && strings.Contains(r.Detail, "mirror corp-npm") {
			allowed = true
		}
	}
	if !allowed {
		t.Errorf("no allowed decision naming the mirror: %+v", g.auditRows("net.egress"))
	}
	added := false
	for _, r := range g.auditRows("net.mirror.add") {
		added = added || (r.Actor == "root" && r.Result == audit.ResultOK && r.Target == "corp-npm" && strings.Contains(r.Detail, hostPort+" ranges 127.0.0.1/32"))
	}
	if !added {
		t.Errorf("no net.mirror.add audit row of root's: %+v", g.auditRows("net.mirror.add"))
	}

	// Removed: refused again.
	if err := g.f.RemoveMirror(ctx, admin, "corp-npm"); err != nil {
		t.Fatal(err)
	}
	out, code = g.sh(b.Name, "curl -sS --max-time 20 -w ' status=%{http_code}' http://"+hostPort+"/sbx-mirror-hello")
	if code == 0 && !strings.Contains(out, "status=403") {
		t.Fatalf("after the mirror was removed: %s", out)
	}
	if len(g.auditRows("net.mirror.remove")) == 0 {
		t.Error("no net.mirror.remove audit row")
	}
}

// denied reports whether a refused decision for target says why.
func denied(rows []audit.Entry, target, why string) bool {
	for _, r := range rows {
		if r.Target == target && r.Result == audit.ResultDenied && strings.Contains(r.Detail, why) {
			return true
		}
	}
	return false
}
