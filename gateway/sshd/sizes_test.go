package sshd

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
)

// TestSizesAndExtend: new --cpus 2 --memory 768 gets a real machine of that
// size (nproc and /proc/meminfo inside, through the real OpenSSH client);
// sizes over the caps and bad numbers are refused with their exit codes
// and create nothing; extend moves the deadline (status, the machine's),
// is audited, refuses bad durations and anything past box.max_lifetime.
// That the machine's timer really moves (and survives a restart) is
// vm's TestSetMaxDuration.
func TestSizesAndExtend(t *testing.T) {
	const maxDuration = time.Hour
	g := newGatewayFrom(t, fleettest.Options{NoAccount: true, Policy: fleet.Policy{
		MaxDuration: maxDuration, MaxLifetime: 3 * time.Hour,
		MaxBoxMemoryMiB: 1024, MaxBoxVCPUs: 2, MaxUserMemoryMiB: 1536,
	}}, nil)
	const invalid, notFound, limit = 2, 3, 6
	refuse := func(user string, code int, want string, args ...string) {
		t.Helper()
		r := g.run(user, "", args...)
		if r.code != code || !strings.HasPrefix(r.stderr, "error: ") || !strings.Contains(r.stderr, want) || r.stdout != "" {
			t.Errorf("%v: exit %d stdout %q stderr %q; want exit %d and %q", args, r.code, r.stdout, r.stderr, code, want)
		}
	}
	refuse("alice", invalid, "--memory: memory \"lots\": want a positive whole number", "new", "--agent", "script", "--memory", "lots", "x")
	refuse("alice", invalid, "--memory: memory \"0\"", "new", "--agent", "script", "--memory", "0", "x")
	refuse("alice", invalid, "--cpus: cpus \"-1\"", "new", "--agent", "script", "--cpus=-1", "x")
	refuse("alice", invalid, "--cpus: cpus \"1.5\"", "new", "--agent", "script", "--cpus", "1.5", "x")
	refuse("alice", invalid, "at least 64 MiB", "new", "--agent", "script", "--memory", "32", "x")
	refuse("alice", limit, "box.max_memory_mib", "new", "--agent", "script", "--memory", "2048", "x")
	refuse("alice", limit, "box.max_cpus", "new", "--agent", "script", "--cpus", "3", "x")
	if boxes, _ := g.fleet.List(context.Background(), g.actors["root"]); len(boxes) != 0 {
		t.Fatalf("refused sizes created %d box(es)", len(boxes))
	}

	name := strings.TrimSpace(g.must("alice", "new", "--agent", "script", "--cpus", "2", "--memory", "768", "!say sized"))
	g.waitState("alice", name, fleet.Done)
	if out := strings.TrimSpace(g.must("alice", "exec", name, "--", "nproc")); out != "2" {
		t.Errorf("nproc in a --cpus 2 box: %q", out)
	}
	kb := memTotalKB(t, g.must("alice", "exec", name, "--", "cat", "/proc/meminfo"))
	if kb > 768<<10 || kb < 600<<10 {
		t.Errorf("MemTotal of a --memory 768 box: %d kB", kb)
	}
	var st struct {
		MemoryMiB int `json:"memory_mib"`
		VCPUs     int `json:"vcpus"`
		Deadline  time.Time
	}
	if err := json.Unmarshal([]byte(g.must("alice", "status", "--json", name)), &st); err != nil || st.MemoryMiB != 768 || st.VCPUs != 2 || st.Deadline.IsZero() {
		t.Fatalf("status --json: %v %+v", err, st)
	}
	if out := g.must("alice", "status", name); !strings.Contains(out, "768 MiB, 2 vCPUs") || !strings.Contains(out, "deadline:") {
		t.Errorf("status:\n%s", out)
	}
	if out := g.must("alice", "ls"); !strings.Contains(out, "768MiB/2cpu") || !strings.Contains(out, "DEADLINE") {
		t.Errorf("ls:\n%s", out)
	}
	// The per-user cap counts this box: another 1024 MiB is too much.
	refuse("alice", limit, "box.max_user_memory_mib", "new", "--agent", "script", "--memory", "1024", "x")

	// extend: bad input, then past the lifetime cap, then a real move.
	refuse("alice", invalid, "duration \"soon\"", "extend", name, "soon")
	refuse("alice", invalid, "duration \"0s\"", "extend", name, "0s")
	refuse("alice", limit, "box.max_lifetime=3h0m0s", "extend", name, "3h")
	refuse("alice", notFound, "not found", "extend", "no-such-box", "1h")
	refuse("bob", notFound, "not found", "extend", name, "1h")
	first := st.Deadline
	var ext struct{ Deadline time.Time }
	if err := json.Unmarshal([]byte(g.must("alice", "extend", "--json", name, "30m")), &ext); err != nil || !ext.Deadline.Equal(first.Add(30*time.Minute)) {
		t.Fatalf("extend --json 30m: %v deadline %v, want %v", err, ext.Deadline, first.Add(30*time.Minute))
	}
	if out := g.must("root", "extend", name, "1h"); !strings.Contains(out, "deadline in 2h") {
		t.Errorf("extend as an admin: %q", out)
	}
	want := first.Add(90 * time.Minute)
	if mb, err := g.vms.Get(name); err != nil || !mb.Deadline().Equal(want) {
		t.Errorf("the machine's deadline: %v %v, want %v", err, mb.Deadline(), want)
	}
	// 3h from the start is the cap: 30m more would be fine, 31m is not.
	refuse("alice", limit, "can be extended by at most 30m0s", "extend", name, "31m")
	rows, err := g.audit.List(context.Background(), audit.Filter{Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	var done, denied []string
	for _, r := range rows {
		if r.Action != "box.extend" || r.Target != name {
			continue
		}
		switch r.Result {
		case audit.ResultOK:
			done = append(done, r.Actor+": "+r.Detail)
		case audit.ResultDenied:
			denied = append(denied, r.Actor+": "+r.Detail)
		}
	}
	if len(done) != 2 || len(denied) != 2 || !strings.Contains(strings.Join(done, "\n"), "by 30m0s to ") {
		t.Errorf("audit rows of box.extend: done %q, denied %q; want 2 and 2", done, denied)
	}
	g.must("alice", "rm", name)
	refuse("alice", notFound, "not found", "extend", name, "1h")
}

// memTotalKB is MemTotal of a /proc/meminfo text.
func memTotalKB(t *testing.T, meminfo string) int {
	t.Helper()
	for line := range strings.Lines(meminfo) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				t.Fatalf("MemTotal line %q", line)
			}
			return n
		}
	}
	t.Fatalf("no MemTotal in %q", meminfo)
	return 0
}
