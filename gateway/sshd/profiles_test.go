package sshd

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
)

// TestProfilesOverSSH drives project profiles through the real OpenSSH
// client against real boxes and the test git server: profile set with
// install commands and environment, a secret-looking variable refused,
// profile default for acme/widget, then new on that repository without
// --profile starts from it: the install ran as the agent user in the
// repository (its files are the agent's), the agent sees the environment,
// the box has the profile's max duration, and ls --json and status name
// the profile. A failing install fails the box with its reason.
func TestProfilesOverSSH(t *testing.T) {
	g := newGateway(t)
	if _, err := g.fleet.AddAccount(context.Background(), g.actors["alice"], "work", g.token, "acme/widget"); err != nil {
		t.Fatal(err)
	}
	out := g.must("alice", "profile", "set", "node", "--agent", "script", "--max-duration", "2h",
		"--install", `'echo installed > installed.txt'`, "--install", `'id -un > who.txt; ls -A > seen.txt'`,
		"--env", "NODE_ENV=profiled", "--env", `'GREETING=hello world'`, "--allow", "@npm")
	if !strings.Contains(out, "saved user profile node") {
		t.Fatalf("profile set: %q", out)
	}
	if r := g.run("alice", "", "profile", "set", "leaky", "--env", "NPM_TOKEN=abc"); r.code != exitInvalid || !strings.Contains(r.stderr, "NPM_TOKEN looks like it carries a secret") {
		t.Fatalf("profile set with a secret: %+v", r)
	}
	if r := g.run("alice", "", "profile", "set", "x", "--site"); r.code != exitForbidden {
		t.Fatalf("an operator's --site: %+v", r)
	}
	var shown fleet.Profile
	if err := json.Unmarshal([]byte(g.must("alice", "profile", "show", "node", "--json")), &shown); err != nil ||
		len(shown.Install) != 2 || shown.Env[1] != "GREETING=hello world" || shown.MaxDuration != "2h0m0s" {
		t.Fatalf("profile show --json: %+v %v", shown, err)
	}
	if out := g.must("alice", "profile", "default", "acme/widget", "node"); !strings.Contains(out, "acme/widget use profile node") {
		t.Fatalf("profile default: %q", out)
	}
	if out := g.must("alice", "profile", "ls"); !strings.Contains(out, "node") || !strings.Contains(out, "acme/widget  node") {
		t.Errorf("profile ls:\n%s", out)
	}

	var nb struct {
		Name, Profile, Agent string
		Allow                []string
	}
	if err := json.Unmarshal([]byte(g.must("alice", "new", "--json", "--repo", "acme/widget", `"!env"`)), &nb); err != nil {
		t.Fatal(err)
	}
	if nb.Profile != "node" || nb.Agent != "script" || len(nb.Allow) == 0 || nb.Allow[0] != "@npm" {
		t.Fatalf("new on acme/widget: profile %q agent %q allow %q; want the repository's default profile's", nb.Profile, nb.Agent, nb.Allow)
	}
	b := g.waitState("alice", nb.Name, fleet.Done)
	if left := time.Until(b.Deadline); left < 110*time.Minute || left > 2*time.Hour {
		t.Errorf("deadline in %v, want the profile's 2h", left)
	}
	inBox := func(cmd string) string {
		t.Helper()
		return strings.TrimSpace(g.must("alice", "exec", b.Name, "--", "sh", "-c", "'"+cmd+"'"))
	}
	if got := inBox("cat /workspace/widget/installed.txt; stat -c %U /workspace/widget/installed.txt"); got != "installed\nagent" {
		t.Errorf("installed.txt: %q, want its text and the agent user as owner", got)
	}
	if got := inBox("cat /workspace/widget/who.txt"); got != "agent" {
		t.Errorf("install ran as %q, want agent", got)
	}
	if got := inBox("cat /workspace/widget/seen.txt"); !strings.Contains(got, "README.md") {
		t.Errorf("install did not run in the repository: it saw %q", got)
	}
	log := g.must("alice", "logs", b.Name)
	for _, want := range []string{"── install · agent ──", "── install done ──", "NODE_ENV=profiled", "GREETING=hello world"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	var boxes []struct{ Name, Profile string }
	if err := json.Unmarshal([]byte(g.must("alice", "ls", "--json")), &boxes); err != nil || len(boxes) != 1 || boxes[0].Profile != "node" {
		t.Errorf("ls --json: %+v %v; want the box with profile node", boxes, err)
	}
	if out := g.must("alice", "status", b.Name); !strings.Contains(out, "profile:") || !strings.Contains(out, "node") {
		t.Errorf("status does not name the profile:\n%s", out)
	}

	// A failing install fails the box, saying why; --profile wins over
	// the default.
	g.must("alice", "profile", "set", "broken", "--agent", "script", "--install", `'echo about to fail; exit 3'`)
	r := g.run("alice", "", "new", "--json", "--profile", "broken", "--repo", "acme/widget", `"!say never"`)
	if r.code == 0 || !strings.Contains(r.stderr, "install step exited 3") {
		t.Fatalf("new with a failing install: %+v", r)
	}
	var failed fleet.Box
	for _, x := range g.boxes("alice") {
		if x.Profile == "broken" {
			failed = x
		}
	}
	if failed.State != fleet.Failed || !strings.Contains(failed.Reason.String(), "install step exited 3") {
		t.Errorf("the box of the failing install: %+v", failed)
	}
	if log := g.must("alice", "logs", failed.Name); !strings.Contains(log, "about to fail") || !strings.Contains(log, "── install exited 3 ──") {
		t.Errorf("the failing install's log:\n%s", log)
	}
}

// boxes lists user's boxes through the core.
func (g *gateway) boxes(user string) []fleet.Box {
	g.t.Helper()
	list, err := g.fleet.List(context.Background(), g.actors[user])
	if err != nil {
		g.t.Fatal(err)
	}
	return list
}
