package sshd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/testutil"
)

// TestNewReportsSteps: `new` through the real OpenSSH client writes one
// line per step on stderr while it runs — each line's text as the step
// starts, its duration when it ends, in the core's order — and with --json
// nothing but the box's JSON, as before.
func TestNewReportsSteps(t *testing.T) {
	g := newGateway(t)
	if _, err := g.fleet.AddAccount(context.Background(), g.actors["alice"], "work", g.token, "acme/widget"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := g.sshCmd(ctx, "alice", nil, "new", "--agent", "script", "--repo", "acme/widget", "--setup", "true", `"!say hi"`)
	var stdout testutil.SyncBuffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The steps arrive while new runs: the boot line starts before the
	// box's name (printed at the end) is on stdout.
	rd := bufio.NewReader(stderr)
	var got strings.Builder
	for !strings.Contains(got.String(), "booting (") {
		b, err := rd.ReadByte()
		if err != nil {
			t.Fatalf("stderr ended before the boot step: %q (%v)", got.String(), err)
		}
		got.WriteByte(b)
	}
	if stdout.String() != "" {
		t.Errorf("stdout %q before the boot step ended", stdout.String())
	}
	rest := new(bytes.Buffer)
	_, _ = rest.ReadFrom(rd)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("new: %v\nstderr: %s%s", err, got.String(), rest)
	}
	name := strings.TrimSpace(stdout.String())
	lines := strings.Split(strings.TrimSuffix(got.String()+rest.String(), "\n"), "\n")
	took := ` \d+(\.\d)? (ms|s)$`
	want := []string{
		`^cloning acme/widget…` + took,
		`^booting \((small|stock) kernel\)…` + took,
		`^copying acme/widget in…` + took,
		`^running the setup script…` + took,
		`^starting the agent \(script\)…` + took,
		`^box ` + regexp.QuoteMeta(name) + ` is (running|done); follow it with: `,
	}
	t.Logf("new's stderr:\n%s", strings.Join(lines, "\n"))
	if len(lines) != len(want) {
		t.Fatalf("stderr has %d lines, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("stderr line %d %q, want %s", i+1, lines[i], re)
		}
	}
	g.waitState("alice", name, fleet.Done)

	// --json: stdout is the box as JSON and nothing else, stderr is empty.
	r := g.run("alice", "", "new", "--json", "--agent", "script", "--repo", "acme/widget", `"!say json"`)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("new --json: exit %d, stderr %q", r.code, r.stderr)
	}
	// One JSON object, whose keys are the box's (fleet.Box's JSON names)
	// and new's own: mentioned_repos, the repositories the task names
	// that it was not given.
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || dec.More() {
		t.Fatalf("new --json is not one object: %v\n%s", err, r.stdout)
	}
	keys := map[string]bool{}
	for _, typ := range []reflect.Type{reflect.TypeFor[fleet.Box](), reflect.TypeFor[newResult]()} {
		for i := range typ.NumField() {
			if f := typ.Field(i); !f.Anonymous {
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				keys[name] = true
			}
		}
	}
	for k := range obj {
		if !keys[k] {
			t.Errorf("new --json has %q, no field of the box", k)
		}
	}
	if _, ok := obj["mentioned_repos"]; !ok {
		t.Errorf("new --json has no mentioned_repos: %s", r.stdout)
	}
	name, _ = obj["name"].(string)
	if state := obj["state"]; name == "" || (state != "running" && state != "done") {
		t.Fatalf("new --json: %s", r.stdout)
	}
	g.waitState("alice", name, fleet.Done)
}
