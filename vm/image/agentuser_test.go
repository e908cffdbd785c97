package image_test

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/image"
	"sbx.dev/sbx/vm/kernel"
)

// denied is what the kernel (or a tool reporting its refusal) says when the
// agent user may not do something.
var denied = regexp.MustCompile(`(?i)permission denied|operation not permitted|not permitted|must be (run as )?(superuser|root)|authentication failure|read-only file system|only root`)

// absentOrDenied: a tool the image does not have (so the agent cannot run
// it either), or its refusal.
var absentOrDenied = regexp.MustCompile(`(?i)^absent$|` + denied.String())

// TestAgentUserBattery boots the Debian agent image and runs attacks inside
// it as the unprivileged agent user (ExecRequest.User "agent"), with no
// guard in the way: each must fail at the OS level, while the agent's own
// places (/workspace, /tmp, $HOME) stay writable, and a process run as ""
// is root as before. It logs a table of case → OS result.
func TestAgentUserBattery(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the raw-syscall cases use x86_64 syscall numbers")
	}
	project := projectDataDir(t)
	img, err := image.Resolve(project, image.Agent)
	if err != nil {
		t.Skipf("agent image not built (run `go tool task image`): %v", err)
	}
	k, err := kernel.Small(project)
	if err != nil {
		t.Skipf("small kernel not built (run `go tool task kernel`): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	m, box := startAgentBox(ctx, t, img, k)

	const (
		allow = "allow" // exit 0 and check(out) holds
		deny  = "deny"  // a non-zero exit whose output is an OS refusal
	)
	// perl is in every Debian root (perl-base is essential): it makes the
	// raw system calls whose tools the image lacks. x86_64 numbers.
	cases := []struct {
		name, user, want, script string
		check                    func(out string) error // allow: extra check of the output
		errRe                    *regexp.Regexp         // deny: the refusal (default denied)
	}{
		{name: "id -u", user: agent.AgentUser, want: allow, script: "id -u; id -G",
			check: equal("1000\n1000")},
		{name: "capabilities and no_new_privs", user: agent.AgentUser, want: allow,
			script: "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status",
			check:  equal("CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1")},
		{name: "identity env", user: agent.AgentUser, want: allow, script: `echo "$HOME $USER $LOGNAME $PATH"`,
			check: equal("/home/agent agent agent /usr/local/bin:/usr/bin:/bin")},
		{name: "write /usr/lib/x", user: agent.AgentUser, want: deny, script: "echo x > /usr/lib/x"},
		{name: "append /etc/passwd", user: agent.AgentUser, want: deny, script: "echo 'x:x:0:0::/:/bin/sh' >> /etc/passwd"},
		{name: "write /etc/claude-code/managed-settings.json", user: agent.AgentUser, want: deny,
			script: `mkdir -p /etc/claude-code && echo '{"disableAllHooks":true}' > /etc/claude-code/managed-settings.json`},
		{name: "write /root/.claude/settings.json", user: agent.AgentUser, want: deny,
			script: "mkdir -p /root/.claude && echo '{}' > /root/.claude/settings.json"},
		{name: "write /var/lib/sbx/x", user: agent.AgentUser, want: deny, script: "mkdir -p /var/lib/sbx && echo x > /var/lib/sbx/x"},
		{name: "rm -rf /usr/lib/x86_64-linux-gnu", user: agent.AgentUser, want: deny, script: "rm -rf /usr/lib/x86_64-linux-gnu"},
		{name: "dd of=/dev/vda", user: agent.AgentUser, want: deny, script: "dd if=/dev/zero of=/dev/vda bs=512 count=1"},
		{name: "mkfs.ext4 -F /dev/vda (absent: open it)", user: agent.AgentUser, want: deny,
			script: "if command -v mkfs.ext4 >/dev/null; then mkfs.ext4 -F /dev/vda; else exec 3>/dev/vda; fi"},
		{name: "chmod u+s /usr/bin/env", user: agent.AgentUser, want: deny, script: "chmod u+s /usr/bin/env"},
		{name: "setuid-root su yields no root", user: agent.AgentUser, want: deny,
			script: `out=$(su -c 'id -u' root </dev/null 2>&1); echo "$out"; [ "$out" = 0 ] && exit 0; exit 1`,
			errRe:  regexp.MustCompile(`(?i)authentication failure|must be run from a terminal|permission denied|not permitted`)},
		{name: "sudo", user: agent.AgentUser, want: deny,
			script: "command -v sudo >/dev/null || { echo absent; exit 1; }; sudo -n id -u", errRe: absentOrDenied},
		{name: "setuid(0) syscall", user: agent.AgentUser, want: deny,
			script: `perl -e 'syscall(105, 0) == 0 and exit 0; print "$!\n"; exit 1'`},
		{name: "mount tmpfs (mount(2))", user: agent.AgentUser, want: deny,
			script: `perl -e 'my ($s, $t, $f) = ("none", "/mnt", "tmpfs"); syscall(165, $s, $t, $f, 0, 0) == 0 and exit 0; print "$!\n"; exit 1'`},
		{name: "mount command", user: agent.AgentUser, want: deny,
			script: "command -v mount >/dev/null || { echo absent; exit 1; }; mount -t tmpfs none /mnt", errRe: absentOrDenied},
		{name: "load a module (finit_module(2))", user: agent.AgentUser, want: deny,
			script: `perl -e 'open(F, "<", "/dev/null") or die; my $p = ""; syscall(313, fileno(F), $p, 0) == 0 and exit 0; print "$!\n"; exit 1'`,
			// The small kernel has no module support at all.
			errRe: regexp.MustCompile(`(?i)not permitted|function not implemented`)},
		{name: "insmod/modprobe", user: agent.AgentUser, want: deny,
			script: "if command -v modprobe >/dev/null; then modprobe dummy; elif command -v insmod >/dev/null; then insmod /dev/null; else echo absent; exit 1; fi",
			errRe:  regexp.MustCompile(`(?i)^absent$|not permitted|permission denied|function not implemented|could not insert`)},
		{name: "read /proc/1/environ", user: agent.AgentUser, want: deny, script: "cat /proc/1/environ"},
		{name: "ls /proc/1/root/", user: agent.AgentUser, want: deny, script: "ls /proc/1/root/"},
		{name: "read /proc/1/root/etc/shadow", user: agent.AgentUser, want: deny, script: "cat /proc/1/root/etc/shadow"},
		{name: "write /workspace/x", user: agent.AgentUser, want: allow,
			script: "echo x > /workspace/x && stat -c '%U %a' /workspace && stat -c %U /workspace/x", check: equal("agent 755\nagent")},
		{name: "write /tmp/x", user: agent.AgentUser, want: allow, script: "echo x > /tmp/x && cat /tmp/x", check: equal("x")},
		{name: "write $HOME/x", user: agent.AgentUser, want: allow,
			script: `echo x > "$HOME/x" && stat -c '%n %U %G %a' "$HOME"`, check: equal("/home/agent agent agent 700")},
		{name: "passwd entry", user: agent.AgentUser, want: allow,
			script: "getent passwd agent", check: equal("agent:x:1000:1000:sbx agent:/home/agent:/bin/sh")},

		// As before: "" is root.
		{name: "root: id -u", user: "", want: allow, script: "id -u", check: equal("0")},
		{name: "root: CapEff", user: "", want: allow, script: "grep ^CapEff: /proc/self/status",
			check: func(out string) error {
				if strings.HasSuffix(out, "0000000000000000") {
					return fmt.Errorf("root has no effective capabilities: %q", out)
				}
				return nil
			}},
		{name: "root: write /var/lib/sbx/x", user: "", want: allow,
			script: "mkdir -p /var/lib/sbx && echo x > /var/lib/sbx/x && cat /var/lib/sbx/x && rm /var/lib/sbx/x", check: equal("x")},
		{name: "root: read /proc/1/environ", user: "", want: allow, script: "cat /proc/1/environ >/dev/null && echo ok", check: equal("ok")},
		{name: "root: shadow keeps its group", user: "", want: allow, script: "stat -c '%U %G' /etc/shadow; grep -c '^agent:!:' /etc/shadow",
			check: equal("root shadow\n1")},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-48s %-6s %-5s %-6s %s\n", "case", "user", "want", "exit", "OS result")
	for _, tc := range cases {
		stdout, stderr, status := runReq(ctx, t, m, box, agent.ExecRequest{Argv: []string{"sh", "-c", tc.script}, User: tc.user})
		out := strings.TrimSpace(stdout + stderr)
		user := tc.user
		if user == "" {
			user = "root"
		}
		fmt.Fprintf(&table, "%-48s %-6s %-5s %-6s %s\n", tc.name, user, tc.want, status, oneLine(out))
		switch tc.want {
		case allow:
			if status != "0" {
				t.Errorf("%s (as %s): exit %s, output %q; want success", tc.name, user, status, out)
			} else if tc.check != nil {
				if err := tc.check(strings.TrimSpace(stdout)); err != nil {
					t.Errorf("%s (as %s): %v", tc.name, user, err)
				}
			}
		case deny:
			re := tc.errRe
			if re == nil {
				re = denied
			}
			if status == "0" {
				t.Errorf("%s (as %s): succeeded, output %q; want an OS refusal", tc.name, user, out)
			} else if !re.MatchString(out) {
				t.Errorf("%s (as %s): exit %s, output %q; want a refusal matching %s", tc.name, user, status, out, re)
			}
		}
	}
	t.Log(table.String())

	// The image is intact: the deletions and writes above changed nothing.
	if _, _, status := runReq(ctx, t, m, box, agent.ExecRequest{Argv: []string{"sh", "-c",
		"test -e /usr/lib/x86_64-linux-gnu/libc.so.6 && ! test -e /usr/lib/x && ! grep -q '^x:' /etc/passwd && ! test -e /etc/claude-code/managed-settings.json"}}); status != "0" {
		t.Errorf("the box's root was changed by the agent user")
	}

	// The PTY path (attach) drops too, and the terminal is the agent's.
	stdout, stderr, status := runReq(ctx, t, m, box, agent.ExecRequest{
		Argv: []string{"sh", "-c", "id -u; stat -c %U \"$(tty)\"; grep ^CapBnd: /proc/self/status"},
		TTY:  true, User: agent.AgentUser})
	if got := strings.ReplaceAll(strings.TrimSpace(stdout), "\r", ""); status != "0" || got != "1000\nagent\nCapBnd:\t0000000000000000" {
		t.Errorf("tty as agent: exit %s, stdout %q, stderr %q", status, stdout, stderr)
	}

	// Its stdin reaches it through the trampoline.
	p, err := m.Exec(ctx, box, agent.ExecRequest{Argv: []string{"sh", "-c", "id -u; cat"}, User: agent.AgentUser})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = io.WriteString(p.Stdin(), "fed through\n")
		p.Stdin().Close()
	}()
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	got, _ := io.ReadAll(p.Stdout())
	if st, err := p.Wait(); err != nil || st.Code != 0 || string(got) != "1000\nfed through\n" {
		t.Errorf("stdin as agent: %v %v, stdout %q", st, err, got)
	}

	// Any other user is refused before anything runs.
	for _, u := range []string{"root", "nobody", "Agent", "1000"} {
		if p, err := m.Exec(ctx, box, agent.ExecRequest{Argv: []string{"id"}, User: u}); err == nil {
			p.Stdin().Close()
			_, _ = p.Wait()
			t.Errorf("user %q: exec started; want a refusal", u)
		} else {
			t.Logf("user %q refused: %v", u, err)
		}
	}
}

func equal(want string) func(string) error {
	return func(got string) error {
		if got != want {
			return fmt.Errorf("output %q, want %q", got, want)
		}
		return nil
	}
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " | ")), " ")
	if len(s) > 110 {
		s = s[:110] + "…"
	}
	return s
}
