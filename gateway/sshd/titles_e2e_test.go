package sshd

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet"
)

// TestTitleSearchAndRepoAdd drives titles, ls QUERY, the repositories a
// task names and repo add through the real OpenSSH client against real
// boxes and a real git server.
func TestTitleSearchAndRepoAdd(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	if _, err := g.fleet.AddAccount(ctx, g.actors["alice"], "work", g.token, "acme/widget"); err != nil {
		t.Fatal(err)
	}
	g.git.CreateRepo("acme", "docs", map[string]string{"README.md": "the docs\n"})

	// The task names acme/docs: offered on stderr, not added.
	r := g.run("alice", "", "new", "--agent", "script", "--repo", "acme/widget",
		`"!say update the widget docs in acme/docs, and/or src/main.go, like acme/widget"`)
	if r.code != 0 {
		t.Fatalf("new: %+v", r)
	}
	first := strings.TrimSpace(r.stdout)
	if !strings.Contains(r.stderr, "the task names acme/docs: add it with --repo acme/docs") ||
		strings.Contains(r.stderr, "the task names acme/widget") || strings.Contains(r.stderr, "and/or") || strings.Contains(r.stderr, "src/main.go") {
		t.Fatalf("new's offers on stderr:\n%s", r.stderr)
	}
	g.waitState("alice", first, fleet.Done)
	var made struct {
		Name           string   `json:"name"`
		Title          string   `json:"title"`
		MentionedRepos []string `json:"mentioned_repos"`
	}
	// The test's git host is http on loopback: its repository URLs count.
	out := g.must("alice", "new", "--json", "--agent", "script", `"!say second box, see `+g.git.URL+`/acme/docs"`)
	if err := json.Unmarshal([]byte(out), &made); err != nil || made.Title != "!say second box, see "+g.git.URL+"/acme/docs" {
		t.Fatalf("new --json: %v %s", err, out)
	}
	if !slices.Equal(made.MentionedRepos, []string{"acme/docs"}) {
		t.Errorf("new --json mentioned_repos %q, want [acme/docs] (%s)", made.MentionedRepos, out)
	}
	second := made.Name
	g.waitState("alice", second, fleet.Done)

	// Titles: shown by ls (TITLE) and status, set by title and rename.
	if out := g.must("alice", "ls"); !strings.Contains(out, "TITLE") || !strings.Contains(out, "!say update the widget docs") {
		t.Fatalf("ls:\n%s", out)
	}
	if out := g.must("alice", "title", first, "Widget", "docs", "pass"); !strings.Contains(out, `"Widget docs pass"`) || !strings.Contains(out, first) {
		t.Fatalf("title: %q", out)
	}
	if out := g.must("alice", "rename", "--json", second, `"second: renamed"`); !strings.Contains(out, `"title": "second: renamed"`) {
		t.Fatalf("rename --json: %q", out)
	}
	if out := g.must("alice", "status", first); !strings.Contains(out, "title:") || !strings.Contains(out, "Widget docs pass") {
		t.Fatalf("status:\n%s", out)
	}
	for _, c := range []struct {
		user string
		args []string
		code int
	}{
		{"bob", []string{"title", first, "mine"}, 3},
		{"alice", []string{"title", first}, 2},
		{"alice", []string{"title", first, strings.Repeat("x", fleet.MaxTitleLen+1)}, 2},
		{"alice", []string{"title", "no-such-box", "x"}, 3},
	} {
		if r := g.run(c.user, "", c.args...); r.code != c.code {
			t.Errorf("%s: %v: exit %d, want %d: %s", c.user, c.args, r.code, c.code, r.stderr)
		}
	}
	if out := g.must("alice", "help", "title"); !strings.Contains(out, "name never changes") || !strings.Contains(out, "rename") {
		t.Errorf("help title does not say the name stays:\n%s", out)
	}

	// ls QUERY: name, title, task's first line, repos; case-insensitive.
	lsNames := func(query ...string) []string {
		var boxes []struct{ Name, Title string }
		out := g.must("alice", append([]string{"ls", "--json"}, query...)...)
		if err := json.Unmarshal([]byte(out), &boxes); err != nil {
			t.Fatalf("ls --json %v: %v %s", query, err, out)
		}
		var names []string
		for _, b := range boxes {
			names = append(names, b.Name)
		}
		slices.Sort(names)
		return names
	}
	both := []string{first, second}
	slices.Sort(both)
	for q, want := range map[string][]string{
		"":               both,
		"WIDGET DOCS":    {first},
		"renamed":        {second},
		"acme/widget":    {first},
		second:           {second},
		"update the":     {first},
		"nothing-at-all": nil,
	} {
		var args []string
		if q != "" {
			args = strings.Fields(q)
		}
		if got := lsNames(args...); !slices.Equal(got, want) {
			t.Errorf("ls %q: %v, want %v", q, got, want)
		}
	}
	if r := g.run("alice", "", "ls", "nothing-at-all"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no box matches") {
		t.Errorf("ls with no match: %+v", r)
	}
	if got := lsNames(); len(got) != 2 {
		t.Errorf("ls: %v", got)
	}

	// repo add: the offered repo goes into the running box.
	if out := g.must("alice", "repo", "add", first, "acme/docs"); !strings.Contains(out, "added acme/docs to "+first+" in /workspace/docs (branch sbx/"+first) {
		t.Fatalf("repo add: %q", out)
	}
	if out := g.must("alice", "exec", first, "--", "cat", "/workspace/docs/README.md"); out != "the docs\n" {
		t.Fatalf("the added repo's file in the box: %q", out)
	}
	var added struct {
		OK   bool
		Repo struct{ Name, Dir, Branch string }
	}
	if err := json.Unmarshal([]byte(g.must("alice", "repo", "add", "--json", second, "acme/docs@main")), &added); err != nil ||
		!added.OK || added.Repo.Name != "acme/docs" || added.Repo.Branch != "sbx/"+second {
		t.Fatalf("repo add --json: %v %+v", err, added)
	}
	for _, c := range []struct {
		user string
		args []string
		code int
	}{
		{"alice", []string{"repo", "add", first, "acme/docs"}, 5},
		{"alice", []string{"repo", "add", first, "acme/nosuch"}, -1},
		{"alice", []string{"repo", "add", first, "not a repo"}, 2},
		{"alice", []string{"repo", "add", first, "acme/widget@--bad"}, 2},
		{"bob", []string{"repo", "add", first, "acme/docs"}, 3},
		{"alice", []string{"repo", "add", first}, 2},
	} {
		if r := g.run(c.user, "", c.args...); r.code != c.code && (c.code != -1 || r.code == 0) {
			t.Errorf("%s: %v: exit %d, want %d: %s", c.user, c.args, r.code, c.code, r.stderr)
		}
	}
	if b, err := g.fleet.Get(ctx, g.actors["alice"], first); err != nil || len(b.Repos) != 2 {
		t.Errorf("after the refused adds: %+v %v", b.Repos, err)
	}
	if out := g.must("alice", "ls", "acme/docs"); !strings.Contains(out, first) || !strings.Contains(out, second) {
		t.Errorf("ls acme/docs after repo add:\n%s", out)
	}
}
