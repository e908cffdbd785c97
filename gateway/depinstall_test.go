package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/registrytest"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// TestProfileDependencyInstallColdAndFork is issue 20's "done when" for
// what exists: a project profile whose install step is a real `npm
// install` of the repository's package.json from an npm registry the test
// runs (on loopback, reached through an admin's internal mirror), driven
// through the real OpenSSH client against the whole gateway. The profile
// is acme/widget's default, so `new --repo acme/widget` delegates cold:
// boot, clone, install (node_modules the agent user's, npm's output in the
// box's log), agent. Then `fork BOX` starts the same environment from the
// installed box: node_modules is there, the registry saw no new request
// and the fork's log has no install step. The two figures are logged side
// by side. Without the mirror the same delegation fails at the install
// step, its reason naming the refused host and the address policy's
// reason, and leaves no machine running.
func TestProfileDependencyInstallColdAndFork(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Fatalf("needs the OpenSSH client: %v", err)
	}
	reg := registrytest.NewNPM(t,
		registrytest.Package{Name: "sbx-widget-dep", Version: "1.0.0", Files: map[string]string{"index.js": "module.exports = 'dep';\n"}},
		registrytest.Package{Name: "sbx-widget-lib", Version: "3.2.1", Dependencies: map[string]string{"sbx-widget-dep": "^1.0.0"},
			Files: map[string]string{"index.js": "module.exports = 'lib with ' + require('sbx-widget-dep');\n"}},
	)
	u, err := url.Parse(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	const name = "npm.corp.test"
	hostPort := name + ":" + u.Port()
	g := newBoxGatewayOpts(t, nil, nil, func(o *Options) {
		// No loopback trust: the registry's 127.0.0.1 is refused as a
		// company's 10.x mirror is, until an admin declares the mirror.
		o.Egress.Trust = nil
		o.Egress.Resolver = testResolver{name: netip.MustParseAddr("127.0.0.1")}
	})
	ctx := context.Background()
	if err := g.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	_, sshPort, _ := net.SplitHostPort(g.s.SSHAddr().String())
	cli := keys.Actor{User: "test", Role: keys.RoleAdmin, Front: keys.FrontCLI}
	aliceKey, signer := testutil.OpenSSHKey(t)
	if _, err := g.s.keys.AddKeys(ctx, cli, "alice", string(gossh.MarshalAuthorizedKey(signer.PublicKey()))); err != nil {
		t.Fatal(err)
	}
	adaKey, signer := testutil.OpenSSHKey(t)
	if _, _, err := g.s.keys.AddUser(ctx, cli, "ada", keys.RoleAdmin, string(gossh.MarshalAuthorizedKey(signer.PublicKey()))); err != nil {
		t.Fatal(err)
	}
	ssh := func(key string, args ...string) (string, int) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, "ssh", append([]string{"-i", key, "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-p", sshPort, "127.0.0.1"}, args...)...)
		cmd.Stdin = strings.NewReader("")
		return runCode(t, cmd)
	}
	must := func(key string, args ...string) string {
		t.Helper()
		out, code := ssh(key, args...)
		if code != 0 {
			t.Fatalf("ssh %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	// logOf is the box's log through the core; firstOutput waits for a
	// line of the agent's (a whole line, not the task's "!say …").
	logOf := func(box string) string {
		t.Helper()
		st, err := g.f.Logs(ctx, g.alice, box, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(st)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	firstOutput := func(box, line string, since time.Time) time.Duration {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if strings.Contains("\n"+logOf(box), "\n"+line+"\n") {
				return time.Since(since)
			}
		}
		t.Fatalf("box %s never printed %q:\n%s", box, line, logOf(box))
		return 0
	}

	// The project: package.json depends on the registry's package.
	g.git.Commit("acme", "widget", "main", "depend on sbx-widget-lib", map[string]string{
		"package.json": `{"name":"widget","version":"1.0.0","private":true,"dependencies":{"sbx-widget-lib":"^3.2.0"}}` + "\n",
	})
	// The admin declares the mirror; alice saves the profile and makes it
	// acme/widget's default.
	if out := must(adaKey, "mirror", "add", "corp-npm", hostPort, "--range", "127.0.0.1/32"); !strings.Contains(out, "added mirror corp-npm") {
		t.Fatalf("mirror add: %q", out)
	}
	install := fmt.Sprintf(`'npm install --registry http://%s/ --no-audit --no-fund --no-update-notifier --fetch-retries 0'`, hostPort)
	if out := must(aliceKey, "profile", "set", "node", "--agent", "script", "--install", install, "--allow", hostPort); !strings.Contains(out, "saved user profile node") {
		t.Fatalf("profile set: %q", out)
	}
	must(aliceKey, "profile", "default", "acme/widget", "node")

	// Cold: boot, clone, npm install, agent.
	start := time.Now()
	var nb struct{ Name, Profile string }
	if err := json.Unmarshal([]byte(must(aliceKey, "new", "--json", "--repo", "acme/widget", `"!say widget ready"`)), &nb); err != nil {
		t.Fatal(err)
	}
	coldReturn := time.Since(start)
	coldFirst := firstOutput(nb.Name, "widget ready", start)
	if nb.Profile != "node" {
		t.Fatalf("new on acme/widget: profile %q, want the default node", nb.Profile)
	}
	box := nb.Name
	g.waitState(box, fleet.Done)
	const ws = "/workspace/widget"
	check := func(b string) {
		t.Helper()
		out, code := g.sh(b, "cd "+ws+" && stat -c '%U %n' node_modules/sbx-widget-lib/package.json node_modules/sbx-widget-dep/package.json && "+
			"node -p \"require('sbx-widget-lib')\"")
		want := "agent node_modules/sbx-widget-lib/package.json\nagent node_modules/sbx-widget-dep/package.json\nlib with dep\n"
		if code != 0 || out != want {
			t.Fatalf("box %s: node_modules (%d):\n%s\nwant:\n%s", b, code, out, want)
		}
	}
	check(box)
	coldLog := logOf(box)
	for _, w := range []string{"── install · agent ──", "added 2 packages", "── install done ──"} {
		if !strings.Contains(coldLog, w) {
			t.Errorf("the cold box's log lacks %q:\n%s", w, coldLog)
		}
	}
	served := reg.Requests()
	if !slices.ContainsFunc(served, func(p string) bool { return strings.HasSuffix(p, ".tgz") }) {
		t.Fatalf("the registry served no tarball: %v", served)
	}

	// Fork: the installed box again, without the install.
	start = time.Now()
	var fb struct {
		Name  string
		State fleet.State
	}
	if err := json.Unmarshal([]byte(must(aliceKey, "fork", "--json", box)), &fb); err != nil || fb.Name == "" || fb.Name == box {
		t.Fatalf("fork --json: %v %+v", err, fb)
	}
	forkReturn := time.Since(start)
	if out := must(aliceKey, "exec", fb.Name, "--", "ls", ws+"/node_modules"); !strings.Contains(out, "sbx-widget-lib") {
		t.Fatalf("the fork's node_modules: %q", out)
	}
	forkAnswer := time.Since(start)
	check(fb.Name)
	if got := reg.Requests(); len(got) != len(served) {
		t.Errorf("the fork reached the registry: %v after %v", got[len(served):], served)
	}
	if l := logOf(fb.Name); strings.Contains(l, "── install") || strings.Contains(l, "added 2 packages") {
		t.Errorf("the fork's log has an install step:\n%s", l)
	}
	// A fork with a task: its first agent output, beside the cold one.
	start = time.Now()
	out := must(aliceKey, "fork", "--json", box, `"!say fork ready"`)
	var ft struct{ Name string }
	if err := json.Unmarshal([]byte(out), &ft); err != nil || ft.Name == "" {
		t.Fatalf("fork with a task: %v %q", err, out)
	}
	forkTaskReturn := time.Since(start)
	forkFirst := firstOutput(ft.Name, "fork ready", start)
	g.waitState(ft.Name, fleet.Done)
	if l := logOf(ft.Name); strings.Contains(l, "── install") {
		t.Errorf("the fork with a task ran the install:\n%s", l)
	}
	if got := reg.Requests(); len(got) != len(served) {
		t.Errorf("the forks reached the registry: %v", got[len(served):])
	}

	var tb strings.Builder
	tw := tabwriter.NewWriter(&tb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "npm install of 2 packages (profile node)\tcommand returned\tfirst answer\n")
	fmt.Fprintf(tw, "cold: new --repo acme/widget\t%v\t%v (agent output)\n", coldReturn.Round(time.Millisecond), coldFirst.Round(time.Millisecond))
	fmt.Fprintf(tw, "fork BOX\t%v\t%v (exec ls node_modules)\n", forkReturn.Round(time.Millisecond), forkAnswer.Round(time.Millisecond))
	fmt.Fprintf(tw, "fork BOX TASK\t%v\t%v (agent output)\n", forkTaskReturn.Round(time.Millisecond), forkFirst.Round(time.Millisecond))
	tw.Flush()
	t.Logf("cold install vs fork, one run:\n%s", tb.String())
	must(aliceKey, "rm", fb.Name)
	must(aliceKey, "rm", ft.Name)

	// Without the mirror: the same cold delegation fails at the install
	// step, saying which host the address policy refused and why.
	must(adaKey, "mirror", "rm", "corp-npm")
	before := len(reg.Requests())
	out, code := ssh(aliceKey, "new", "--json", "--repo", "acme/widget", `"!say never"`)
	if code == 0 || !strings.Contains(out, "install step exited") || !strings.Contains(out, hostPort) || !strings.Contains(out, "the address policy: 127.0.0.1 is a loopback address") {
		t.Fatalf("new without the mirror: exit %d, want the install step's failure naming %s and the address policy's reason:\n%s", code, hostPort, out)
	}
	t.Logf("without the mirror: %s", strings.TrimSpace(out))
	if got := reg.Requests(); len(got) != before {
		t.Errorf("the registry was reached without the mirror: %v", got[before:])
	}
	list, err := g.f.List(ctx, g.alice)
	if err != nil {
		t.Fatal(err)
	}
	var failed fleet.Box
	for _, b := range list {
		if b.Name != box && b.Name != fb.Name && b.Name != ft.Name {
			failed = b
		}
	}
	if failed.State != fleet.Failed || !strings.Contains(failed.Reason.String(), "127.0.0.1 is a loopback address") {
		t.Errorf("the box without the mirror: %+v", failed)
	}
	if l := logOf(failed.Name); !strings.Contains(l, "── install exited") || !strings.Contains(l, "403") {
		t.Errorf("the failed install's log:\n%s", l)
	}
	// Nothing left running: the one machine is the first box's.
	var machines []string
	for _, m := range g.s.core.vm.List() {
		machines = append(machines, m.Name)
	}
	if len(machines) != 1 || machines[0] != box {
		t.Errorf("machines after the failed delegation: %v, want only %s's", machines, box)
	}
}
