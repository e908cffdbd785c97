package fleet_test

import (
	"io"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/keys"
)

// execOut runs argv in box as user ("" root) and returns its stdout and
// exit code.
func (e *env) execOut(t *testing.T, caller keys.Actor, box, user string, argv ...string) (string, int) {
	t.Helper()
	p, err := e.fleet.Exec(e.ctx(), caller, box, fleet.ExecRequest{Argv: argv, User: user})
	if err != nil {
		t.Fatal(err)
	}
	p.Stdin().Close()
	go io.Copy(io.Discard, p.Stderr())
	out, _ := io.ReadAll(p.Stdout())
	st, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return string(out), st.Code
}

// A turn's agent runs as the box's unprivileged user: uid and gid 1000, no
// capability even in its bounding set, no_new_privs; the turn files stay
// root's; the managed settings that pin Claude Code's hooks are root's and
// the agent user cannot change them; the repos are the agent's.
func TestTurnRunsAsAgentUser(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	b, err := e.fleet.Delegate(e.ctx(), e.alice, fleet.DelegateRequest{
		Task: "!say sleeping\n!sleep 120", Agent: "script",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.waitLog(b.Name, "sleeping")
	// The supervisor writes the agent's pid next to the exit file.
	status, code := e.execOut(t, e.alice, b.Name, "", "/bin/sh", "-c", `grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/$(cat /var/lib/sbx/turns/1.exit.pid)/status`)
	if code != 0 {
		t.Fatalf("status of the turn's process: exit %d: %s", code, status)
	}
	t.Logf("the turn's process:\n%s", status)
	want := map[string]string{
		"Uid": "1000 1000 1000 1000", "Gid": "1000 1000 1000 1000",
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1",
	}
	for _, line := range strings.Split(strings.TrimSpace(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if w, ok := want[k]; ok {
			if got := strings.Join(strings.Fields(v), " "); got != w {
				t.Errorf("%s: %q, want %q", k, got, w)
			}
			delete(want, k)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing from the status: %v", want)
	}

	// Ownership and modes the gateway relies on.
	out, _ := e.execOut(t, e.alice, b.Name, "", "stat", "-c", "%n %u:%g %a",
		"/etc/claude-code", "/etc/claude-code/managed-settings.json", "/var/lib/sbx/turns", "/var/lib/sbx/turns/1.out",
		"/workspace/.agent.task", "/workspace/widget", "/workspace/widget/README.md")
	for _, w := range []string{
		"/etc/claude-code 0:0 755\n", "/etc/claude-code/managed-settings.json 0:0 644\n",
		"/var/lib/sbx/turns 0:0 700\n", "/var/lib/sbx/turns/1.out 0:0 600\n",
		"/workspace/.agent.task 0:0 644\n", "/workspace/widget 1000:1000 ", "/workspace/widget/README.md 1000:1000 ",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("stat: want %q in\n%s", w, out)
		}
	}
	settings, _ := e.execOut(t, e.alice, b.Name, "", "cat", "/etc/claude-code/managed-settings.json")
	for _, w := range []string{`"allowManagedHooksOnly": true`, "/usr/local/bin/sbx hook guard", "/usr/local/bin/sbx hook lane"} {
		if !strings.Contains(settings, w) {
			t.Errorf("managed settings lack %s:\n%s", w, settings)
		}
	}

	// As the agent user: the settings, the turn files and git's system
	// config are out of reach; its repo is its own.
	for _, c := range []string{
		"echo '{}' > /etc/claude-code/managed-settings.json",
		"rm -f /etc/claude-code/managed-settings.json",
		"mv /etc/claude-code /tmp/cc",
		"echo x >> /var/lib/sbx/turns/1.out",
		"cat /var/lib/sbx/turns/1.out",
		"git config --system core.hooksPath /tmp",
	} {
		if out, code := e.execOut(t, e.alice, b.Name, fleet.AgentUser, "/bin/sh", "-c", c+" 2>&1"); code == 0 {
			t.Errorf("as the agent user %q succeeded: %s", c, out)
		}
	}
	if out, code := e.execOut(t, e.alice, b.Name, fleet.AgentUser, "/bin/sh", "-c", "cd /workspace/widget && echo ok >> README.md && git status --short && git config user.email"); code != 0 || !strings.Contains(out, "agent@sbx.invalid") {
		t.Errorf("the agent user in its repo: exit %d: %s", code, out)
	}
	if out, _ := e.execOut(t, e.alice, b.Name, "", "cat", "/etc/claude-code/managed-settings.json"); out != settings {
		t.Errorf("the managed settings changed:\n%s", out)
	}
}

// TestRegressionDiffRunsAgentGitAsRoot: the diff ran `git add -A` as root
// in the agent's repo, whose .git/config is the agent's to write — so a
// core.fsmonitor the agent planted ran as root the next time anyone looked
// at the box's changes, and the objects root wrote were root's, which made
// the agent's own next `git add` fail (seen in CI: "insufficient permission
// for adding an object to repository database"). The diff now runs as the
// agent user.
func TestRegressionDiffRunsAgentGitAsRoot(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	b, err := e.fleet.Delegate(e.ctx(), e.alice, fleet.DelegateRequest{
		Task: "!say planted\n!sleep 120", Agent: "script",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.waitLog(b.Name, "planted")
	plant := `cd /workspace/widget && printf '#!/bin/sh\nid -u > /tmp/fsmonitor-ran-as\n' > /tmp/fsm && chmod +x /tmp/fsm &&
git config core.fsmonitor /tmp/fsm && echo more >> README.md && echo new > NEW.md`
	if out, code := e.execOut(t, e.alice, b.Name, fleet.AgentUser, "/bin/sh", "-c", plant+" 2>&1"); code != 0 {
		t.Fatalf("plant: exit %d: %s", code, out)
	}
	d, err := e.fleet.Diff(e.ctx(), e.alice, b.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != 2 {
		t.Errorf("diff files: %+v, want README.md and NEW.md", d.Files)
	}
	if out, _ := e.execOut(t, e.alice, b.Name, "", "cat", "/tmp/fsmonitor-ran-as"); strings.TrimSpace(out) == "0" {
		t.Errorf("the agent's core.fsmonitor ran as root during the diff")
	}
	// Nothing under .git is root's after the diff, so the agent's own
	// add and commit go on.
	if out, _ := e.execOut(t, e.alice, b.Name, "", "find", "/workspace/widget/.git", "-not", "-user", "1000"); strings.TrimSpace(out) != "" {
		t.Errorf("root-owned files under .git after the diff:\n%s", out)
	}
	if out, code := e.execOut(t, e.alice, b.Name, fleet.AgentUser, "/bin/sh", "-c", "cd /workspace/widget && git config --unset core.fsmonitor && git add -A && git commit -qm more 2>&1"); code != 0 {
		t.Errorf("the agent's commit after the diff: exit %d: %s", code, out)
	}
}

// TestRegressionAgentOwnsItsControlPlane: the agent owned the workspace's
// top directory and its hooks decided and logged as the agent, so it could
// rename the task file, rewrite the decision log, drop the guard's taint
// state, and steer its hooks with SBX_WORKSPACE or SBX_HOOK_LOG set in its
// own settings. The top is now root's and sticky, the root guest agent
// decides for the hooks (hooks.Broker), and the log records who asked.
func TestRegressionAgentOwnsItsControlPlane(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	b, err := e.fleet.Delegate(e.ctx(), e.alice, fleet.DelegateRequest{
		Task: "!say ready\n!sleep 120", Agent: "script",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.waitLog(b.Name, "ready")
	out, _ := e.execOut(t, e.alice, b.Name, "", "stat", "-c", "%n %u:%g %a", "/workspace", "/workspace/.agent.task", "/workspace/.agent.hooks.log", "/run/sbx", "/run/sbx/hooks.sock")
	for _, w := range []string{"/workspace 0:0 1777\n", "/workspace/.agent.task 0:0 644\n", "/workspace/.agent.hooks.log 0:0 644\n", "/run/sbx 0:0 755\n", "/run/sbx/hooks.sock 0:0 666\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("stat: want %q in\n%s", w, out)
		}
	}
	for _, c := range []string{
		"mv /workspace/.agent.task /workspace/t",
		"rm -f /workspace/.agent.task",
		"echo forged >> /workspace/.agent.hooks.log",
		"mv /workspace/.agent.hooks.log /workspace/l",
		"rm -f /run/sbx/hooks.sock",
		"echo x > /run/sbx/x",
		"mkdir -p /var/lib/sbx/hooks-state/x",
	} {
		if out, code := e.execOut(t, e.alice, b.Name, fleet.AgentUser, "/bin/sh", "-c", c+" 2>&1"); code == 0 {
			t.Errorf("as the agent user %q succeeded: %s", c, out)
		}
	}
	// The agent's own places at the top stay its own.
	if out, code := e.execOut(t, e.alice, b.Name, fleet.AgentUser, "/bin/sh", "-c", "echo q > /workspace/.agent.question && mkdir /workspace/scratch && rm /workspace/.agent.question && rmdir /workspace/scratch 2>&1"); code != 0 {
		t.Errorf("the agent at the workspace's top: exit %d: %s", code, out)
	}

	// A hook run as the agent with its environment pointed elsewhere: the
	// broker decides with its own workspace and log, and logs the asker.
	hook := `printf '%s' '{"session_id":"s1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"echo x > /etc/claude-code/managed-settings.json"}}' |
SBX_WORKSPACE=/ SBX_HOOK_LOG=/tmp/own.log SBX_HOOK_STATE=/tmp/own.state /usr/local/bin/sbx hook --workspace / --log /tmp/own2.log guard; echo "exit $?"`
	out, _ = e.execOut(t, e.alice, b.Name, fleet.AgentUser, "/bin/sh", "-c", hook+" 2>&1")
	if !strings.Contains(out, "exit 2") {
		t.Errorf("the guard as the agent with a moved workspace: %s; want exit 2", out)
	}
	if out, _ := e.execOut(t, e.alice, b.Name, "", "/bin/sh", "-c", "ls /tmp/own.log /tmp/own2.log /tmp/own.state 2>/dev/null; tail -n 1 /workspace/.agent.hooks.log"); !strings.Contains(out, `"decision":"deny"`) || !strings.Contains(out, `"peer":{"uid":1000,`) || strings.Contains(out, "/tmp/own") {
		t.Errorf("the decision was not logged by the broker with its asker (or the agent's log was used):\n%s", out)
	}
}
