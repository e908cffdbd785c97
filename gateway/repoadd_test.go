package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/gittest"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm/agent"
)

// TestAddRepoToRunningBox: a repository added to a running box is cloned
// on the host, lands in /workspace on the box's branch with the gateway as
// its remote, belongs to the agent user, and the box may push that branch
// of that repo only, never another branch nor a repo it was not given; the
// token stays outside. The same box carries its title from the task, and a
// new one set by its owner, both seen by her and by nobody else.
func TestAddRepoToRunningBox(t *testing.T) {
	g := newBoxGateway(t, nil)
	g.git.CreateRepo("acme", "extra", map[string]string{"README.md": "extra\n"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bob := keys.Actor{User: "bob", Role: keys.RoleOperator, Front: "test"}
	events := g.f.Events(ctx, g.alice)

	b, err := g.f.Delegate(ctx, g.alice, fleet.DelegateRequest{Agent: "script", Task: "!say ready\n\nand more lines that the title leaves out",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget"}}})
	if err != nil {
		t.Fatal(err)
	}
	box := b.Name
	if b.Title.String() != "!say ready" {
		t.Errorf("default title %q, want the task's first line", b.Title)
	}
	g.waitState(box, fleet.Done)

	// Refusals before anything happens.
	for _, c := range []struct {
		who  keys.Actor
		repo fleet.RepoSpec
		want error
	}{
		{g.alice, fleet.RepoSpec{Repo: "acme/widget"}, fleet.ErrConflict},
		{g.alice, fleet.RepoSpec{Repo: "https://github.com/acme/other"}, fleet.ErrInvalid},
		{g.alice, fleet.RepoSpec{Repo: "../etc"}, fleet.ErrInvalid},
		{g.alice, fleet.RepoSpec{Repo: "acme/other", Ref: "--upload-pack=x"}, fleet.ErrInvalid},
		{g.alice, fleet.RepoSpec{Repo: "acme/other", Ref: "no-such-branch"}, fleet.ErrInvalid},
		{bob, fleet.RepoSpec{Repo: "acme/other"}, fleet.ErrNotFound},
	} {
		if _, err := g.f.AddRepo(ctx, c.who, box, c.repo); !errors.Is(err, c.want) {
			t.Errorf("%s adds %+v: %v, want %v", c.who.User, c.repo, err, c.want)
		}
	}
	if _, err := g.f.AddRepo(ctx, g.alice, "no-such-box", fleet.RepoSpec{Repo: "acme/other"}); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("add to a missing box: %v", err)
	}

	b, err = g.f.AddRepo(ctx, g.alice, box, fleet.RepoSpec{Repo: "acme/other"})
	if err != nil {
		t.Fatal(err)
	}
	branch := "sbx/" + box
	if len(b.Repos) != 2 || b.Repos[1].Name != "acme/other" || b.Repos[1].Dir != "other" || b.Repos[1].Branch != branch || !b.Repos[1].Push {
		t.Fatalf("repos after add: %+v", b.Repos)
	}
	if _, err := g.f.AddRepo(ctx, g.alice, box, fleet.RepoSpec{Repo: "acme/other"}); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("adding it again: %v, want a conflict", err)
	}

	// The box sees the files, on its branch, with the gateway as remote.
	out, code := g.sh(box, "cat /workspace/other/README.md; git -C /workspace/other rev-parse --abbrev-ref HEAD; git -C /workspace/other remote get-url origin; stat -c %u /workspace/other/README.md")
	if code != 0 || !strings.Contains(out, "other\n"+branch+"\nhttp://10.0.2.100/git/") || !strings.Contains(out, "/acme/other.git\n") {
		t.Fatalf("the added repo in the box: %d\n%s", code, out)
	}
	if strings.Contains(out, g.token) {
		t.Fatalf("the token is in the box's remote:\n%s", out)
	}
	// The agent user works on it and pushes the box's branch of it.
	out, code = g.shAs(box, agent.AgentUser, "cd /workspace/other && echo added >> README.md && git commit -qam added && git push -q origin HEAD:"+branch)
	if code != 0 {
		t.Fatalf("push of the box's branch of the added repo: %d\n%s", code, out)
	}
	if got := gittest.Git(t, "", "--git-dir", g.git.Root+"/acme/other.git", "log", "-1", "--format=%s", branch); got != "added" {
		t.Errorf("the pushed branch holds %q", got)
	}
	// Not another branch of it, not a repo the box was not given.
	if out, code := g.sh(box, "cd /workspace/other && git push origin HEAD:main"); code == 0 || !strings.Contains(out, "sbx:") {
		t.Errorf("push to main of the added repo: %d\n%s", code, out)
	}
	if out, code := g.sh(box, "cd /workspace/other && git push origin HEAD:sbx/another-box"); code == 0 {
		t.Errorf("push to another box's branch: %d\n%s", code, out)
	}
	if out, code := g.sh(box, "cd /workspace/other && git push http://10.0.2.100/git/"+b.Name+"/acme/extra.git HEAD:"+branch); code == 0 {
		t.Errorf("push to a repo the box was not given: %d\n%s", code, out)
	}
	if out, code := g.sh(box, "cd /tmp && git clone http://10.0.2.100/git/"+b.Name+"/acme/extra.git"); code == 0 {
		t.Errorf("clone of a repo the box was not given:\n%s", out)
	}
	if got := gittest.Git(t, "", "--git-dir", g.git.Root+"/acme/other.git", "log", "-1", "--format=%s", "main"); got == "added" {
		t.Errorf("main of acme/other moved")
	}
	ok, refused := 0, 0
	for _, r := range g.auditRows("box.repo.add") {
		switch {
		case r.Result == audit.ResultOK && r.Actor == "alice" && r.Target == box && r.Detail == "acme/other":
			ok++
		case r.Result != audit.ResultOK:
			refused++
		}
	}
	if ok != 1 || refused < 3 {
		t.Errorf("audit rows of box.repo.add: %d done, %d refused; want 1 and the refusals", ok, refused)
	}

	// Titles: set by the owner, refused when bad, invisible to bob.
	if _, err := g.f.SetTitle(ctx, bob, box, "mine now"); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("bob sets the title: %v", err)
	}
	for _, bad := range []string{"", "   ", "two\nlines", strings.Repeat("x", fleet.MaxTitleLen+1), "bell\a"} {
		if _, err := g.f.SetTitle(ctx, g.alice, box, bad); !errors.Is(err, fleet.ErrInvalid) {
			t.Errorf("title %q: %v, want invalid", bad, err)
		}
	}
	b, err = g.f.SetTitle(ctx, g.alice, box, "  widget and other  ")
	if err != nil || b.Title.String() != "widget and other" || b.Name != box {
		t.Fatalf("set title: %+v %v", b, err)
	}
	if rows := g.auditRows("box.title"); len(rows) != 1 || rows[0].Detail != "widget and other" {
		t.Errorf("audit rows of box.title: %+v", rows)
	}
	if list, _ := g.f.List(ctx, g.alice); len(fleet.FilterBoxes(list, "AND OTHER")) != 1 || len(fleet.FilterBoxes(list, "acme/oth")) != 1 || len(fleet.FilterBoxes(list, "nothing like it")) != 0 {
		t.Errorf("search by title and repo over %+v", list)
	}
	seen := map[string]bool{}
	for !seen[fleet.EventTitle] {
		select {
		case ev := <-events:
			if ev.Box == box {
				seen[ev.Kind] = true
			}
		case <-ctx.Done():
			t.Fatalf("no title event (saw %v)", seen)
		}
	}
}
