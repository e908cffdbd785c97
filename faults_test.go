package main

// The fault-injection suite (issue "faults"): real boxes run a scripted
// agent turn whose every line carries its number and a checksum, a fault is
// injected at a point chosen from the printed seed, and after recovery the
// suite checks that the box says what happened, every line written before
// the fault is readable once and in order, the audit log has the fault's
// consequence, and nothing is left behind (QEMU, guest RAM, box files).
//
//	go tool -modfile=tools/go.mod task test-faults          # prints the table
//	SBX_FAULT_SEED=N go test -count=1 -v -run '^TestFaults$' .   # replays a run

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/internal/testutil"
)

// faultRow is one line of the suite's table.
type faultRow struct {
	fault    string
	outcome  string
	recovery time.Duration
}

func TestFaults(t *testing.T) {
	testutil.SkipShort(t, "boots QEMU boxes behind real gateways")
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SBX_FAULT_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SBX_FAULT_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("fault seed %d (replay: SBX_FAULT_SEED=%d go test -count=1 -v -run '^TestFaults$' .)", seed, seed)
	var rows []faultRow
	for _, f := range []struct {
		name string
		run  func(t *testing.T, seed uint64) faultRow
	}{
		{"gateway kill -9 mid-turn", faultGatewayKillMidTurn},
		{"gateway kill -9 during delegate", faultGatewayKillDuringDelegate},
		{"gateway SIGSTOP past every timeout", faultGatewayStopped},
		{"gateway kill -9 mid-sleep, then mid-wake", faultGatewayKillMidSleepWake},
		{"QEMU kill -9 while running", faultMachineKilled},
		{"QEMU kill -9 mid-sleep, then mid-wake", faultMachineKilledMidSleepWake},
		{"guest /workspace full", faultGuestDiskFull},
		{"SQLite locked by another process", faultDatabaseLocked},
		{"clock forward past the sleep TTL, back an hour", faultClockSteps},
		{"SSH log reader dropped mid-stream", faultReaderDropped},
		{"web SSE and MCP readers dropped mid-stream", faultWebAndMCPReadersDropped},
	} {
		ok := t.Run(f.name, func(t *testing.T) {
			r := f.run(t, seed)
			r.fault = f.name
			rows = append(rows, r)
		})
		if !ok {
			rows = append(rows, faultRow{fault: f.name, outcome: "FAILED (see the subtest)"})
		}
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tOUTCOME\tRECOVERY")
	for _, r := range rows {
		rec := "—"
		if r.recovery > 0 {
			rec = r.recovery.Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.fault, r.outcome, rec)
	}
	tw.Flush()
	t.Logf("fault table (seed %d):\n%s", seed, b.String())
	if p := os.Getenv("SBX_FAULTS_TABLE"); p != "" {
		if err := os.WriteFile(p, []byte(fmt.Sprintf("fault seed %d (replay: SBX_FAULT_SEED=%d)\n%s", seed, seed, b.String())), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// faultGatewayKillMidTurn: kill -9 the gateway at a random line of the turn,
// start it again: the turn went on in the box, the new gateway follows it
// from the stored offset, and the log holds every line once.
func faultGatewayKillMidTurn(t *testing.T, seed uint64) faultRow {
	g := newFaultGateway(t)
	tr := transcript{seed: seed, n: 24, pause: 0.25}
	at := 2 + faultRNG(seed).IntN(tr.n-6)
	box := g.delegate(tr)
	g.waitLines(tr, box, at)
	g.signal(syscall.SIGKILL)
	t.Logf("killed the gateway after line %d of %d", at, tr.n)
	start := time.Now()
	g.run()
	b := g.waitState(box, 3*time.Minute, "done", "failed")
	took := time.Since(start)
	if b.State != "done" {
		t.Fatalf("after the restart the box is %s (%s), want done: the turn ran on in the box", b.State, b.Reason)
	}
	if got := tr.check(t, g.must("logs", box)); got != tr.n {
		t.Fatalf("the log holds %d of %d lines", got, tr.n)
	}
	if len(g.audit("box.done", box)) != 1 {
		t.Fatalf("audit: want one box.done row for %s, have %v", box, g.audit("box.done", box))
	}
	g.assertNoOrphans()
	return faultRow{outcome: fmt.Sprintf("done, %d/%d lines once each", tr.n, tr.n), recovery: took}
}

// faultGatewayKillDuringDelegate: kill -9 the gateway at one step of a
// delegation (the command arriving, the boot, the agent's start): after a
// restart the box either does not exist, failed saying the gateway stopped,
// or runs its turn to the end; never a box stuck in a state that lies.
func faultGatewayKillDuringDelegate(t *testing.T, seed uint64) faultRow {
	g := newFaultGateway(t)
	tr := transcript{seed: seed, n: 6, pause: 0.1}
	steps := []string{"command", "boot", "agent"}
	step := steps[faultRNG(seed+1).IntN(len(steps))]
	t.Logf("killing the gateway at step %q of the delegation", step)
	from := len(g.log())
	cmd := exec.Command("ssh", g.sshArgs("new", "--agent", "script", shellQuote(tr.task()))...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Progress arrives on stderr as "booting… 1.2 s" pieces, a step's
	// start before its end on one line.
	mark := map[string]string{"command": "", "boot": "booting", "agent": "starting the agent"}[step]
	stepSeen := make(chan struct{})
	go func() {
		var seen []byte
		buf := make([]byte, 256)
		for {
			n, err := stderr.Read(buf)
			seen = append(seen, buf[:n]...)
			if mark != "" && strings.Contains(string(seen), mark) {
				close(stepSeen)
				_, _ = io.Copy(io.Discard, stderr)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	if step == "command" {
		g.waitLog(from, `command="\[new `, time.Minute)
	} else {
		select {
		case <-stepSeen:
		case <-time.After(3 * time.Minute):
			t.Fatalf("the delegation never reached step %q\n%s", step, g.logTail(30))
		}
	}
	g.signal(syscall.SIGKILL)
	_ = cmd.Wait()
	start := time.Now()
	g.run()
	boxes := g.boxes()
	outcome := "no box"
	for name := range boxes {
		b := g.waitState(name, 3*time.Minute, "done", "failed")
		took := time.Since(start)
		switch b.State {
		case "failed":
			if !strings.Contains(b.Reason, "gateway stopped") && !strings.Contains(b.Reason, "machine") {
				t.Fatalf("box %s failed without saying the gateway stopped: %q", name, b.Reason)
			}
			if len(g.audit("box.fail", name)) == 0 {
				t.Fatalf("no box.fail audit row for %s", name)
			}
			outcome = "failed: " + b.Reason
		case "done":
			if got := tr.check(t, g.must("logs", name)); got != tr.n {
				t.Fatalf("the log holds %d of %d lines", got, tr.n)
			}
			outcome = "done, every line once"
		}
		g.assertNoOrphans()
		return faultRow{outcome: fmt.Sprintf("at %s: %s", step, outcome), recovery: took}
	}
	g.assertNoOrphans()
	return faultRow{outcome: fmt.Sprintf("at %s: %s", step, outcome)}
}

// faultGatewayStopped: SIGSTOP the gateway mid-turn for longer than its
// follow lease and every client timeout, then SIGCONT: it carries on.
func faultGatewayStopped(t *testing.T, seed uint64) faultRow {
	g := newFaultGateway(t)
	tr := transcript{seed: seed, n: 20, pause: 0.25}
	box := g.delegate(tr)
	g.waitLines(tr, box, 2+faultRNG(seed+2).IntN(6))
	g.signal(syscall.SIGSTOP)
	time.Sleep(20 * time.Second)
	g.signal(syscall.SIGCONT)
	start := time.Now()
	b := g.waitState(box, 3*time.Minute, "done", "failed")
	took := time.Since(start)
	if b.State != "done" {
		t.Fatalf("after SIGCONT the box is %s (%s), want done", b.State, b.Reason)
	}
	if got := tr.check(t, g.must("logs", box)); got != tr.n {
		t.Fatalf("the log holds %d of %d lines", got, tr.n)
	}
	g.assertNoOrphans()
	return faultRow{outcome: "done, every line once", recovery: took}
}

// faultMachineKilled: kill -9 the box's QEMU mid-turn: the box fails and
// says its machine failed, what it wrote before stays readable, and the
// audit log has the failure.
func faultMachineKilled(t *testing.T, seed uint64) faultRow {
	g := newFaultGateway(t)
	tr := transcript{seed: seed, n: 200, pause: 0.25}
	box := g.delegate(tr)
	g.waitLines(tr, box, 2+faultRNG(seed+3).IntN(5))
	pids := g.machines()
	if len(pids) != 1 {
		t.Fatalf("want the box's one QEMU process, have %v", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b := g.waitState(box, time.Minute, "failed")
	took := time.Since(start)
	if !strings.Contains(b.Reason, "machine") || !strings.Contains(b.Reason, "killed") {
		t.Fatalf("the box failed saying %q, want why (its machine was killed)", b.Reason)
	}
	got := tr.check(t, g.must("logs", box))
	if got < 2 {
		t.Fatalf("only %d lines readable after the machine died", got)
	}
	if len(g.audit("box.fail", box)) != 1 {
		t.Fatalf("want one box.fail row, have %v", g.audit("box.fail", box))
	}
	g.assertNoOrphans()
	return faultRow{outcome: fmt.Sprintf("failed (%s), %d lines kept", cut(b.Reason, 90), got), recovery: took}
}

// faultGuestDiskFull: /workspace filled to the last block: the agent's
// write fails and the turn ends saying so; freeing space lets the next
// turn work.
func faultGuestDiskFull(t *testing.T, seed uint64) faultRow {
	g := newFaultGateway(t)
	tr := transcript{seed: seed, n: 3}
	box := g.delegate(tr)
	g.waitState(box, 3*time.Minute, "done")
	if out, errOut, code := g.ssh("exec", "--root", box, "--", "sh", "-c",
		shellQuote("dd if=/dev/zero of=/workspace/fill bs=1M 2>/dev/null; sync; df -P /workspace | tail -1")); code != 0 {
		t.Fatalf("fill /workspace: exit %d %s%s", code, out, errOut)
	} else if !strings.Contains(out, "100%") {
		t.Fatalf("/workspace not full: %s", out)
	}
	g.must("answer", "--follow-up", box, shellQuote("!write notes.txt "+strings.Repeat("x", 4<<10)+"\n!say wrote it"))
	b := g.waitState(box, 3*time.Minute, "done", "failed")
	log := g.must("logs", box)
	wrote := regexp.MustCompile(`(?m)^wrote it$`) // the agent's line, not the echoed message
	if !strings.Contains(log, "no space left on device") || wrote.MatchString(log) {
		t.Fatalf("the full disk's turn: state %s (%s), log:\n%s", b.State, b.Reason, log)
	}
	if b.Reason == "" {
		t.Fatalf("the box ended the failed turn as %s without a reason", b.State)
	}
	if tr.check(t, log) != tr.n {
		t.Fatal("the first turn's lines are not all there")
	}
	start := time.Now()
	g.must("exec", "--root", box, "--", "rm", "-f", "/workspace/fill")
	g.must("answer", "--follow-up", box, shellQuote("!write notes.txt ok\n!say wrote it"))
	g.waitState(box, 3*time.Minute, "done")
	took := time.Since(start)
	if !wrote.MatchString(g.must("logs", box)) {
		t.Fatal("after freeing space the turn did not write")
	}
	g.assertNoOrphans()
	return faultRow{outcome: fmt.Sprintf("turn ended %s (%s); next turn fine", b.State, b.Reason), recovery: took}
}

// faultDatabaseLocked: another process holds SQLite's write lock for 10 s
// mid-turn: writes wait or fail with a clear error, and once the lock is
// gone the turn's record catches up with nothing lost.
func faultDatabaseLocked(t *testing.T, seed uint64) faultRow {
	g := newFaultGateway(t)
	tr := transcript{seed: seed, n: 30, pause: 0.25}
	box := g.delegate(tr)
	g.waitLines(tr, box, 2+faultRNG(seed+4).IntN(4))
	locker := exec.Command("sqlite3", filepath.Join(g.data, "sbx.db"))
	stdin, err := locker.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	locker.Stdout, locker.Stderr = io.Discard, io.Discard
	if err := locker.Start(); err != nil {
		t.Fatalf("sqlite3: %v", err)
	}
	fmt.Fprintln(stdin, "BEGIN EXCLUSIVE;")
	fmt.Fprintln(stdin, "SELECT 1;")
	time.Sleep(500 * time.Millisecond)
	// A write through a front while the lock is held: it waits or says why.
	out, errOut, code := g.ssh("title", box, shellQuote("locked out"))
	if code != 0 && !strings.Contains(strings.ToLower(out+errOut), "locked") && !strings.Contains(strings.ToLower(out+errOut), "busy") &&
		!strings.Contains(strings.ToLower(out+errOut), "unavailable") {
		t.Fatalf("a write while the database is locked failed without saying why: exit %d %s%s", code, out, errOut)
	}
	time.Sleep(10 * time.Second)
	fmt.Fprintln(stdin, "COMMIT;")
	stdin.Close()
	_ = locker.Wait()
	start := time.Now()
	b := g.waitState(box, 3*time.Minute, "done", "failed")
	took := time.Since(start)
	if b.State != "done" {
		t.Fatalf("after the lock the box is %s (%s)", b.State, b.Reason)
	}
	if got := tr.check(t, g.must("logs", box)); got != tr.n {
		t.Fatalf("the log holds %d of %d lines", got, tr.n)
	}
	g.assertNoOrphans()
	outcome := "write during the lock waited and landed"
	if code != 0 {
		outcome = "write during the lock refused (exit " + strconv.Itoa(code) + "): " + cut(firstLine(errOut), 70)
	}
	return faultRow{outcome: outcome + "; turn done, every line once", recovery: took}
}

// faultClockSteps: the clock jumps back an hour (a sleeping box is not
// destroyed early and wakes with its log), then forward past the sleep TTL
// (the box is destroyed, by the lifecycle, with its audit row).
func faultClockSteps(t *testing.T, seed uint64) faultRow {
	g := newFaultGateway(t)
	tr := transcript{seed: seed, n: 4}
	box := g.delegate(tr)
	g.waitState(box, 3*time.Minute, "done")
	g.must("sleep", box)
	g.waitState(box, time.Minute, "sleeping")
	clock := filepath.Join(g.dir, "clock")
	if err := os.WriteFile(clock, []byte("-1h"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(12 * time.Second) // two lifecycle ticks
	if b, ok := g.box(box); !ok || b.State != "sleeping" {
		t.Fatalf("an hour back the sleeping box is %+v (exists %v)", b, ok)
	}
	g.must("wake", box)
	g.waitState(box, time.Minute, "done")
	if tr.check(t, g.must("logs", box)) != tr.n {
		t.Fatal("the log after waking is not whole")
	}
	g.must("sleep", box)
	g.waitState(box, time.Minute, "sleeping")
	if err := os.WriteFile(clock, []byte("31m"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		if b, ok := g.box(box); !ok || b.State == "destroyed" {
			break
		}
		if time.Since(start) > time.Minute {
			b, _ := g.box(box)
			t.Fatalf("past the sleep TTL the box is still %s", b.State)
		}
		time.Sleep(250 * time.Millisecond)
	}
	took := time.Since(start)
	if len(g.audit("box.destroy", box)) != 1 {
		t.Fatalf("no box.destroy row for the TTL: %v", g.audit("box.destroy", box))
	}
	g.assertNoOrphans()
	return faultRow{outcome: "back 1 h: kept, woke whole; forward past TTL: destroyed, audited", recovery: took}
}

// faultReaderDropped: a `logs -f --json` reader is killed mid-stream and
// resumes with --from its last resume_from: no line twice, none missing.
func faultReaderDropped(t *testing.T, seed uint64) faultRow {
	g := newFaultGateway(t)
	tr := transcript{seed: seed, n: 24, pause: 0.25}
	box := g.delegate(tr)
	cut := 3 + faultRNG(seed+5).IntN(8)
	cmd := exec.Command("ssh", g.sshArgs("logs", "-f", "--json", box)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var resume int64
	dec := json.NewDecoder(stdout)
	for lines := 0; lines < cut; {
		var r struct {
			Text       string `json:"text"`
			ResumeFrom int64  `json:"resume_from"`
		}
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("logs -f --json ended early: %v", err)
		}
		text.WriteString(r.Text)
		resume = r.ResumeFrom
		lines = strings.Count(text.String(), "fault-line ")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	g.waitState(box, 3*time.Minute, "done")
	start := time.Now()
	out := g.must("logs", "--json", "--from", strconv.FormatInt(resume, 10), box)
	took := time.Since(start)
	dec = json.NewDecoder(strings.NewReader(out))
	for {
		var r struct {
			Text string `json:"text"`
		}
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("logs --json --from: %v\n%s", err, out)
		}
		text.WriteString(r.Text)
	}
	if got := tr.check(t, text.String()); got != tr.n {
		t.Fatalf("the two reads hold %d of %d lines", got, tr.n)
	}
	g.assertNoOrphans()
	return faultRow{outcome: fmt.Sprintf("cut after %d lines, resumed at byte %d: every line once", cut, resume), recovery: took}
}

// waitLines waits until the box's log holds at least n transcript lines.
func (g *faultGateway) waitLines(tr transcript, box string, n int) {
	g.t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		out, _, _ := g.ssh("logs", box)
		if tr.check(g.t, out) >= n {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("the box never wrote %d lines\n%s", n, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// faultGatewayKillMidSleepWake: kill -9 the gateway while it puts a box
// with a running turn to sleep, then while it wakes it: after each restart
// the box settles in a state that is true (asleep and wakeable, or awake),
// and its log holds each line once, the turn either whole or marked lost.
func faultGatewayKillMidSleepWake(t *testing.T, seed uint64) faultRow {
	g := newFaultGateway(t)
	rng := faultRNG(seed + 6)
	tr := transcript{seed: seed, n: 40, pause: 0.25}
	box := g.delegate(tr)
	g.waitLines(tr, box, 3)
	var took time.Duration
	for _, verb := range []string{"sleep", "wake"} {
		if verb == "wake" {
			if b, _ := g.box(box); b.State != "sleeping" {
				g.must("sleep", box)
				g.waitState(box, time.Minute, "sleeping")
			}
		}
		from := len(g.log())
		cmd := exec.Command("ssh", g.sshArgs(verb, box)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		g.waitLog(from, `"command":\["`+verb+`"`, time.Minute)
		delay := time.Duration(rng.IntN(400)) * time.Millisecond
		time.Sleep(delay)
		g.signal(syscall.SIGKILL)
		_ = cmd.Wait()
		t.Logf("killed the gateway %s into %s", delay, verb)
		start := time.Now()
		g.run()
		b := g.waitState(box, 2*time.Minute, "sleeping", "running", "done", "failed")
		if b.State == "failed" {
			t.Fatalf("after a kill mid-%s the box failed: %q", verb, b.Reason)
		}
		if b.State == "sleeping" {
			if out, errOut, code := g.ssh("wake", box); code != 0 {
				t.Fatalf("after a kill mid-%s the sleeping box does not wake: exit %d %s%s", verb, code, out, errOut)
			}
		}
		g.waitState(box, 3*time.Minute, "done", "running")
		took += time.Since(start)
	}
	b := g.waitState(box, 3*time.Minute, "done")
	log := g.must("logs", box)
	got := tr.check(t, log)
	lost := strings.Contains(log, "turn 1 lost")
	if got != tr.n && !lost {
		t.Fatalf("the log holds %d of %d lines and does not say the turn was lost:\n%s", got, tr.n, log)
	}
	outcome := fmt.Sprintf("%s, %d/%d lines once each", b.State, got, tr.n)
	if lost {
		outcome += ", the turn marked lost (cold wake)"
	}
	g.assertNoOrphans()
	return faultRow{outcome: outcome, recovery: took}
}

// cut shortens s to n runes for the table.
func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// faultWebAndMCPReadersDropped: a console's SSE log stream is cut mid-turn
// and resumed with Last-Event-ID; an MCP session reading with watch is
// dropped and a new one goes on from next_offset. Both read every line once.
func faultWebAndMCPReadersDropped(t *testing.T, seed uint64) faultRow {
	g := newFaultGateway(t)
	rng := faultRNG(seed + 7)
	tr := transcript{seed: seed, n: 24, pause: 0.25}
	box := g.delegate(tr)
	ctx := context.Background()

	// The console: log in with a one-time link, stream the box's log.
	jar, _ := cookiejar.New(nil)
	web := &http.Client{Jar: jar, Timeout: 3 * time.Minute}
	link := strings.TrimSpace(g.must("login"))
	if resp, err := web.Post(link, "application/x-www-form-urlencoded", nil); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("login: %s", resp.Status)
		}
	}
	var sseText strings.Builder
	lastID := ""
	read := func(cut int) {
		req, _ := http.NewRequestWithContext(ctx, "GET", g.url+"/boxes/"+box+"/stream", nil)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := web.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: %s", resp.Status)
		}
		sc := bufio.NewScanner(resp.Body)
		event, id, data := "", "", []string{}
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			case line == "":
				if event == "log" {
					sseText.WriteString(html.UnescapeString(strings.Join(data, "\n")))
					if id != "" {
						lastID = id
					}
				}
				event, id, data = "", "", nil
				if strings.Count(sseText.String(), "fault-line ") >= cut {
					return // the reader goes away mid-stream
				}
			}
		}
	}
	cut := 3 + rng.IntN(8)
	read(cut)
	// The MCP reader's first session reads while the turn still runs.
	mcpCut := cut + 1 + rng.IntN(4)
	g.waitLines(tr, box, mcpCut)
	token := strings.TrimSpace(g.must("token", "create", "--scope", "read", "--name", "faults"))
	connect := func() *sdk.ClientSession {
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "sbx-faults", Version: "v0"}, nil).Connect(ctx, &sdk.StreamableClientTransport{
			Endpoint: g.url + "/mcp", MaxRetries: -1, HTTPClient: &http.Client{Transport: bearerToken{token: token, base: http.DefaultTransport}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	var mcpText strings.Builder
	var next int64
	watch := func(cs *sdk.ClientSession) bool {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "watch", Arguments: map[string]any{"box": box, "from": next, "max_lines": 200}})
		if err != nil || res.IsError {
			t.Fatalf("watch from %d: %v %+v", next, err, res)
		}
		var out struct {
			Text       string `json:"text"`
			NextOffset int64  `json:"next_offset"`
			More       bool   `json:"more"`
			Truncated  bool   `json:"truncated"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &out); err != nil || out.Truncated {
			t.Fatalf("watch: %v %s", err, raw)
		}
		mcpText.WriteString(out.Text)
		next = out.NextOffset
		return out.More
	}
	first := connect()
	watch(first)
	_ = first.Close() // dropped mid-turn
	g.waitState(box, 3*time.Minute, "done")
	start := time.Now()
	read(tr.n)
	sseTook := time.Since(start)
	if got := tr.check(t, sseText.String()); got != tr.n {
		t.Fatalf("the SSE reads hold %d of %d lines", got, tr.n)
	}

	start = time.Now()
	second := connect()
	defer second.Close()
	for watch(second) {
	}
	mcpTook := time.Since(start)
	if got := tr.check(t, mcpText.String()); got != tr.n {
		t.Fatalf("the MCP reads hold %d of %d lines", got, tr.n)
	}
	g.assertNoOrphans()
	return faultRow{outcome: fmt.Sprintf("SSE cut after %d lines, resumed by Last-Event-ID; MCP session dropped, resumed at next_offset: every line once", cut),
		recovery: max(sseTook, mcpTook)}
}

// bearerToken sends an API key with every request.
type bearerToken struct {
	token string
	base  http.RoundTripper
}

func (b bearerToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// faultMachineKilledMidSleepWake: the box's QEMU is killed while the box
// goes to sleep, then (on a second box) while it wakes: each box ends in a
// state that is true — asleep with a whole snapshot, awake, or failed
// saying its machine died — and what it logged stays readable once.
func faultMachineKilledMidSleepWake(t *testing.T, seed uint64) faultRow {
	g := newFaultGateway(t)
	rng := faultRNG(seed + 8)
	var outcomes []string
	var took time.Duration
	for _, verb := range []string{"sleep", "wake"} {
		tr := transcript{seed: seed, n: 6, pause: 0.05}
		box := g.delegate(tr)
		g.waitState(box, 3*time.Minute, "done")
		if verb == "wake" {
			g.must("sleep", box)
			g.waitState(box, time.Minute, "sleeping")
		}
		from := len(g.log())
		cmd := exec.Command("ssh", g.sshArgs(verb, box)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		g.waitLog(from, `"command":\["`+verb+`"`, time.Minute)
		// The machine of this box: while it sleeps the old one ends and
		// while it wakes a new one starts, so look for it until the
		// command ends.
		delay := time.Duration(rng.IntN(300)) * time.Millisecond
		time.Sleep(delay)
		killed := false
		for range 50 {
			if pids := g.machines(); len(pids) == 1 {
				_ = syscall.Kill(pids[0], syscall.SIGKILL)
				killed = true
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = cmd.Wait()
		start := time.Now()
		b := g.waitState(box, 2*time.Minute, "sleeping", "done", "failed")
		took = max(took, time.Since(start))
		switch b.State {
		case "failed":
			if !strings.Contains(b.Reason, "machine") {
				t.Fatalf("the box failed saying %q, want why (its machine)", b.Reason)
			}
		case "sleeping":
			// A whole snapshot: it must wake.
			if out, errOut, code := g.ssh("wake", box); code != 0 {
				t.Fatalf("the sleeping box does not wake: exit %d %s%s", code, out, errOut)
			}
			b = g.waitState(box, time.Minute, "done", "failed")
		}
		if b.State == "done" {
			// Awake means a machine that answers.
			if out, errOut, code := g.ssh("exec", box, "--", "true"); code != 0 {
				b, _ = g.box(box)
				t.Fatalf("the box says it is awake (now %s %q) but its machine does not answer: exit %d %s%s", b.State, b.Reason, code, out, errOut)
			}
		}
		if got := tr.check(t, g.must("logs", box)); got != tr.n {
			t.Fatalf("the log holds %d of %d lines", got, tr.n)
		}
		o := fmt.Sprintf("mid-%s (QEMU killed %v, %s in): %s", verb, killed, delay, b.State)
		if b.Reason != "" {
			o += " (" + cut(b.Reason, 60) + ")"
		}
		outcomes = append(outcomes, o)
		if len(g.audit("box.fail", box)) == 0 && b.State == "failed" {
			t.Fatalf("no box.fail row for %s", box)
		}
		g.assertNoOrphans() // and the next round's box is the only machine
	}
	return faultRow{outcome: strings.Join(outcomes, "; "), recovery: took}
}
