package agentd

import (
	"errors"
	"slices"
	"testing"

	"sbx.dev/sbx/vm/agent"
)

// TestExecUser: only "" (root, as before) and the agent user may be asked
// for; the agent user's process starts as the trampoline with its identity
// in the environment, root's unchanged.
func TestExecUser(t *testing.T) {
	for _, tc := range []struct {
		user string
		ok   bool
	}{{"", true}, {agent.AgentUser, true}, {"root", false}, {"nobody", false}, {"Agent", false}, {"1000", false}, {"agent ", false}, {"0", false}} {
		if err := checkUser(tc.user); (err == nil) != tc.ok || (err != nil && !errors.Is(err, errInvalid)) {
			t.Errorf("checkUser(%q) = %v, want ok=%v", tc.user, err, tc.ok)
		}
	}
	base := []string{"PATH=/usr/local/sbin:/usr/bin", "HOME=/root", "LANG=C.UTF-8", "USER=root"}
	if got := userEnv("", base); !slices.Equal(got, base) {
		t.Errorf("root env %q, want %q", got, base)
	}
	want := []string{"LANG=C.UTF-8", "HOME=/home/agent", "USER=agent", "LOGNAME=agent", "PATH=/usr/local/bin:/usr/bin:/bin"}
	if got := userEnv(agent.AgentUser, base); !slices.Equal(got, want) {
		t.Errorf("agent env %q, want %q", got, want)
	}
	if p, argv := asUser("", "/bin/ls", []string{"ls", "-l"}); p != "/bin/ls" || !slices.Equal(argv, []string{"ls", "-l"}) {
		t.Errorf("root: %s %q", p, argv)
	}
	p, argv := asUser(agent.AgentUser, "/bin/ls", []string{"ls", "--", "-l"})
	if p != "/proc/self/exe" || !slices.Equal(argv, []string{"sbx", "box", "drop", "--", "/bin/ls", "ls", "--", "-l"}) {
		t.Errorf("agent: %s %q", p, argv)
	}
}
