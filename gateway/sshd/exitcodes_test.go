package sshd

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
	"sbx.dev/sbx/fleet/fleettest"
)

// Exit codes of README's "Exit codes" table.
const (
	exitInvalid   = 2
	exitNotFound  = 3
	exitForbidden = 4
)

// TestCommandsOverSSH runs every command through the real OpenSSH client:
// a wrong command line exits 2 with the usage line (a JSON object under
// --json), a missing target exits 3, an operator at an admin command 4,
// each with the kind in the JSON error; and --json output parses, for
// every command that can succeed without a box (the box commands'
// --json runs in TestBoxCommands). A command without a row fails.
func TestCommandsOverSSH(t *testing.T) {
	hook := fleettest.NewReceiver(t, "webhook")
	g := newGatewayFrom(t, fleettest.Options{NoAccount: true, Configure: trustReceivers(t, hook)},
		func(o *Options) { o.WebURL = func() string { return "http://127.0.0.1:8080" } })
	const nobox = "no-such-box"
	type row struct {
		notFound []string // arguments naming something missing (as root)
		box      bool     // succeeds only with a box: TestBoxCommands
	}
	rows := map[string]*row{
		"account add":     {},
		"account default": {notFound: []string{"nosuch"}},
		"account ls":      {},
		"account rm":      {notFound: []string{"nosuch"}},
		"allow":           {notFound: []string{nobox}, box: true},
		"answer":          {notFound: []string{nobox, "x"}, box: true},
		"ask":             {notFound: []string{nobox, "q"}, box: true},
		"attach":          {box: true}, // needs -t: below
		"audit":           {},
		"checkpoint":      {notFound: []string{nobox}, box: true},
		"checkpoints":     {notFound: []string{nobox}, box: true},
		"checkpoints rm":  {notFound: []string{nobox, "cp-abcdefgh"}, box: true},
		"fork":            {notFound: []string{nobox}, box: true},
		"rewind":          {notFound: []string{nobox, "cp-abcdefgh"}, box: true},
		"diff":            {notFound: []string{nobox}, box: true},
		"exec":            {notFound: []string{nobox, "--", "true"}, box: true},
		"extend":          {notFound: []string{nobox, "1h"}, box: true},
		"inbox":           {notFound: []string{nobox}, box: true},
		"inbox rm":        {notFound: []string{nobox, "1"}, box: true},
		"keep":            {notFound: []string{nobox}, box: true},
		"key add":         {},
		"key ls":          {notFound: []string{"--user", "nobody"}},
		"key rm":          {notFound: []string{"SHA256:nope"}},
		"login":           {notFound: []string{"--user", "nobody"}},
		"logs":            {notFound: []string{nobox}, box: true},
		"ls":              {},
		"mcp add":         {},
		"mcp ls":          {},
		"mcp rm":          {notFound: []string{"nosuch"}},
		"mirror add":      {},
		"mirror ls":       {},
		"mirror rm":       {notFound: []string{"nosuch"}},
		"notify add":      {},
		"notify ls":       {},
		"notify rm":       {notFound: []string{"nosuch"}},
		"notify enable":   {notFound: []string{"nosuch"}},
		"notify disable":  {notFound: []string{"nosuch"}},
		"notify test":     {notFound: []string{"nosuch"}},
		"notify log":      {notFound: []string{"nosuch"}},
		"new":             {box: true},
		"pool":            {},
		"pr":              {notFound: []string{nobox}, box: true}, // with a real forge: gateway's TestPullRequestEndToEnd
		"presets":         {},
		"presets default": {},
		"profile default": {notFound: []string{"acme/widget", "nosuch"}},
		"profile ls":      {},
		"profile rm":      {notFound: []string{"nosuch"}},
		"profile set":     {},
		"profile show":    {notFound: []string{"nosuch"}},
		"pr close":        {notFound: []string{nobox}, box: true},
		"pr merge":        {notFound: []string{nobox}, box: true},
		"repo add":        {notFound: []string{nobox, "acme/widget"}, box: true},
		"repos":           {},
		"rm":              {notFound: []string{nobox}, box: true},
		"sleep":           {notFound: []string{nobox}, box: true},
		"status":          {notFound: []string{nobox}, box: true},
		"title":           {notFound: []string{nobox, "x"}, box: true},
		"token create":    {},
		"token ls":        {},
		"token rm":        {notFound: []string{"nosuch"}},
		"unkeep":          {notFound: []string{nobox}, box: true},
		"user add":        {},
		"user disable":    {notFound: []string{"nobody"}},
		"user enable":     {notFound: []string{"nobody"}},
		"user ls":         {},
		"user rm":         {notFound: []string{"nobody"}},
		"wake":            {notFound: []string{nobox}, box: true},
		"whoami":          {},
	}
	usagePrefix := "ssh -p " + g.port + " localhost"
	for _, cmd := range (&Server{}).Commands() {
		row := rows[cmd.Path]
		if row == nil {
			t.Errorf("%s: no row in TestCommandsOverSSH", cmd.Path)
			continue
		}
		path := strings.Fields(cmd.Path)
		// A wrong command line: an unknown flag.
		bad := append(slices.Clone(path), "--no-such-flag")
		r := g.run("root", "", bad...)
		if r.code != exitInvalid || r.stderr != "error: unknown flag: --no-such-flag\nusage: "+useLine(cmd.Path, usagePrefix)+"\n" || r.stdout != "" {
			t.Errorf("%s --no-such-flag: exit %d stdout %q stderr %q; want exit 2 and the usage line", cmd.Path, r.code, r.stdout, r.stderr)
		}
		jsonErr(t, g.run("root", "", append(bad, "--json")...), exitInvalid, "usage", cmd.Path+" --no-such-flag --json")
		if row.notFound != nil {
			args := append(slices.Clone(path), row.notFound...)
			if r := g.run("root", "", args...); r.code != exitNotFound || !strings.HasPrefix(r.stderr, "error: ") || !strings.Contains(r.stderr, "not found") {
				t.Errorf("%v: exit %d stderr %q; want exit 3, not found", args, r.code, r.stderr)
			}
			if cmd.Path != "exec" { // exec's --json would be the box command's argument
				jsonErr(t, g.run("root", "", append(args[:len(path):len(path)], append([]string{"--json"}, row.notFound...)...)...),
					exitNotFound, "not_found", cmd.Path+" --json (missing)")
			}
		}
		if cmd.Admin { // with arguments that fit: a wrong command line is said first
			args := append(append(slices.Clone(path), "--json"), row.notFound...)
			if cmd.Path == "user add" {
				args = append(args, "dave")
			}
			if cmd.Path == "mirror add" {
				args = append(args, "corp", "10.1.2.3:8080")
			}
			jsonErr(t, g.run("alice", "", args...), exitForbidden, "forbidden", cmd.Path+" as an operator")
		}
	}
	if r := g.run("alice", "", "-tt", "attach", nobox); r.code != exitNotFound || !strings.Contains(r.stdout+r.stderr, "not found") {
		t.Errorf("attach %s: exit %d %q %q; want exit 3", nobox, r.code, r.stdout, r.stderr)
	}

	// --json output parses: one value (an object or a list), in an order
	// where each step has what it needs.
	carol, carolKey := authorized(newSigner(t)), authorized(newSigner(t))
	var token struct{ ID string }
	var account struct{ Login, Probed string }
	var repos []struct{ Repo string }
	steps := []struct {
		user, stdin string
		args        []string
		into        any
	}{
		{"alice", "", []string{"whoami", "--json"}, nil},
		{"alice", "", []string{"ls", "--json"}, nil},
		{"root", "", []string{"user", "add", "carol", "--json"}, nil},
		{"root", "", []string{"user", "ls", "--json"}, nil},
		{"root", "", []string{"user", "disable", "carol", "--json"}, nil},
		{"root", "", []string{"user", "enable", "carol", "--json"}, nil},
		{"alice", carolKey, []string{"key", "add", "--json"}, nil},
		{"alice", "", []string{"key", "ls", "--json"}, nil},
		{"alice", "", []string{"key", "rm", "--json", fingerprintOf(t, carolKey)}, nil},
		{"alice", "", []string{"token", "create", "--json"}, &token},
		{"alice", "", []string{"token", "ls", "--json"}, nil},
		{"alice", "", []string{"token", "rm", "--json", "TOKEN"}, nil},
		{"alice", g.token + "\n", []string{"account", "add", "work", "--probe", "acme/widget", "--json"}, &account},
		{"alice", "", []string{"account", "ls", "--json"}, nil},
		{"alice", "", []string{"account", "default", "work", "--json"}, nil},
		{"alice", "", []string{"repos", "--json", "widget"}, &repos},
		{"alice", "", []string{"account", "rm", "work", "--json"}, nil},
		{"alice", "", []string{"mcp", "add", "docs", "https://example.com/mcp", "--json"}, nil},
		{"alice", "", []string{"mcp", "ls", "--json"}, nil},
		{"alice", "", []string{"mcp", "rm", "docs", "--json"}, nil},
		{"alice", "", []string{"notify", "add", "hook", "--kind", "webhook", "--url", hook.URL(), "--json"}, nil},
		{"alice", "", []string{"notify", "ls", "--json"}, nil},
		{"alice", "", []string{"notify", "disable", "hook", "--json"}, nil},
		{"alice", "", []string{"notify", "enable", "hook", "--json"}, nil},
		{"alice", "", []string{"notify", "test", "hook", "--json"}, nil},
		{"alice", "", []string{"notify", "log", "hook", "--json"}, nil},
		{"alice", "", []string{"notify", "rm", "hook", "--json"}, nil},
		{"alice", "", []string{"presets", "--json"}, nil},
		{"root", "", []string{"mirror", "add", "npm-corp", "npm.corp.example:4873", "--range", "10.20.0.0/16", "--json"}, nil},
		{"alice", "", []string{"mirror", "ls", "--json"}, nil},
		{"root", "", []string{"mirror", "rm", "npm-corp", "--json"}, nil},
		{"alice", "", []string{"presets", "default", "@npm", "github", "--json"}, nil},
		{"alice", "", []string{"presets", "default", "--json"}, nil},
		{"alice", "", []string{"presets", "default", "--clear", "--json"}, nil},
		{"alice", "", []string{"profile", "set", "node", "--install", "'npm ci'", "--env", "NODE_ENV=test", "--allow", "@npm", "--json"}, nil},
		{"alice", "", []string{"profile", "ls", "--json"}, nil},
		{"alice", "", []string{"profile", "show", "node", "--json"}, nil},
		{"alice", "", []string{"profile", "default", "acme/widget", "node", "--json"}, nil},
		{"alice", "", []string{"profile", "default", "acme/widget", "--json"}, nil},
		{"alice", "", []string{"profile", "default", "acme/widget", "--clear", "--json"}, nil},
		{"alice", "", []string{"profile", "rm", "node", "--json"}, nil},
		{"alice", "", []string{"login", "--json"}, nil},
		{"root", "", []string{"pool", "--json"}, nil},
		{"root", "", []string{"audit", "--json", "--limit", "3"}, nil},
		{"root", "", []string{"user", "rm", "carol", "--json"}, nil},
	}
	defer func() {
		if account.Login == "" || account.Probed != "acme/widget" {
			t.Errorf("account add --json: %+v, want the token's login and the probed repository", account)
		}
		if len(repos) != 1 || repos[0].Repo != "acme/widget" {
			t.Errorf("repos --json widget: %+v, want acme/widget", repos)
		}
	}()
	covered := map[string]bool{}
	for _, s := range steps {
		args := slices.Clone(s.args)
		if i := slices.Index(args, "TOKEN"); i >= 0 {
			args[i] = token.ID
		}
		if args[0] == "user" && args[1] == "add" {
			args = append(args, carol)
		}
		r := g.run(s.user, s.stdin, args...)
		var v any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil || v == nil {
			t.Errorf("%s %v: exit %d, stdout %q is not one JSON value; stderr %q", s.user, args, r.code, r.stdout, r.stderr)
			continue
		}
		if m, ok := v.(map[string]any); ok && m["action"] != nil && m["ok"] != true {
			t.Errorf("%v: %q: an action without \"ok\": true", args, r.stdout)
		}
		if s.into != nil {
			if err := json.Unmarshal([]byte(r.stdout), s.into); err != nil {
				t.Fatal(err)
			}
		}
		for n := 2; n >= 1; n-- {
			if p := strings.Join(s.args[:n], " "); rows[p] != nil {
				covered[p] = true
				break
			}
		}
	}
	for _, cmd := range (&Server{}).Commands() {
		if row := rows[cmd.Path]; row != nil && !row.box && !covered[cmd.Path] {
			t.Errorf("%s: no --json step in TestCommandsOverSSH", cmd.Path)
		}
	}
}

// jsonErr checks a failure under --json: the exit code, nothing on stdout,
// one JSON object on stderr with the error and its kind.
func jsonErr(t *testing.T, r result, code int, kind, what string) {
	t.Helper()
	var e struct{ Error, Kind, Usage string }
	err := json.Unmarshal([]byte(r.stderr), &e)
	if r.code != code || r.stdout != "" || err != nil || e.Kind != kind || e.Error == "" || strings.Count(r.stderr, "\n") != 1 ||
		(kind == "usage") != (e.Usage != "") {
		t.Errorf("%s: exit %d stdout %q stderr %q; want exit %d and a JSON error of kind %s", what, r.code, r.stdout, r.stderr, code, kind)
	}
}

// useLine is the usage line of the command at path, as a session reached
// through prefix ("ssh -p PORT localhost") shows it.
func useLine(path, prefix string) string {
	c := &call{srv: &Server{}}
	cmd, _, err := c.root().Find(strings.Fields(path))
	if err != nil {
		panic(err)
	}
	return strings.Replace(usageLine(cmd), c.usagePrefix(), prefix, 1)
}

// fingerprintOf is the SHA256 fingerprint of an authorized_keys line.
func fingerprintOf(t *testing.T, line string) string {
	t.Helper()
	pk, _, _, _, err := gossh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	return fingerprint(pk)
}
