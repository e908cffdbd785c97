package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/fleet/forge/giteatest"
	"sbx.dev/sbx/gateway/config"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// TestPullRequestEndToEnd runs the pull-request loop against a real Gitea
// (git.kind gitea): a script agent commits on the box's branch; `ssh pr
// BOX` (real OpenSSH) pushes it from the box through the gateway's git
// endpoint and opens the pull request on Gitea with the account's token;
// a commit status set on Gitea reaches the card through the watcher
// (EventPRChecks) and shows on the web box page; a follow-up turn's new
// commit becomes the card's head; a merge at a head the branch has left
// is refused; MCP's pr_merge lands the branch on main. Alice's
// notification channels, added over SSH, are real HTTP receivers that check
// each request against its kind's published format (a webhook's Standard
// Webhooks signature with the official library, Slack's body): "done" and
// "pr_checks" reach them. It logs the time from "agent done" to "PR open".
func TestPullRequestEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Fatalf("needs the OpenSSH client: %v", err)
	}
	testutil.SkipShort(t, "starts Gitea and boots a QEMU box behind a real gateway")
	gt := giteatest.New(t)
	repo := gt.CreateRepo(t, "widget", map[string]string{"README.md": "widget\n"})
	hook, chat := fleettest.NewReceiver(t, "webhook"), fleettest.NewReceiver(t, "slack")
	g := newBoxGatewayWith(t, nil, func(c *config.Config) {
		c.Git.Host, c.Git.Kind = gt.URL, "gitea"
		// The receivers run on loopback: the operator trusts them as it
		// would an on-premises endpoint.
		c.Net.PrivateUpstreams = append(c.Net.PrivateUpstreams, urlHostPort(t, gt.URL), hook.HostPort(), chat.HostPort())
	})
	ctx := context.Background()
	if err := g.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	acct, err := g.f.AddAccount(ctx, g.alice, "gitea", gt.Token, repo.String())
	if err != nil {
		t.Fatalf("add the Gitea account: %v", err)
	}
	if acct.Identity.Login != gt.Admin {
		t.Errorf("the token's identity (asked of /api/v1/user) is %q, want %q", acct.Identity.Login, gt.Admin)
	}

	// Alice's SSH key and MCP key.
	cli := keys.Actor{User: "test", Role: keys.RoleAdmin, Front: keys.FrontCLI}
	keyFile, signer := testutil.OpenSSHKey(t)
	if _, err := g.s.keys.AddKeys(ctx, cli, "alice", string(gossh.MarshalAuthorizedKey(signer.PublicKey()))); err != nil {
		t.Fatal(err)
	}
	_, sshPort, _ := net.SplitHostPort(g.s.SSHAddr().String())
	ssh := func(args ...string) (string, int) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, "ssh", append([]string{"-i", keyFile, "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-p", sshPort, "127.0.0.1"}, args...)...)
		cmd.Stdin = strings.NewReader("")
		return runCode(t, cmd)
	}

	// Notifications: a signed webhook for everything, a Slack channel for
	// what is worth a ping.
	out, code := ssh("notify", "add", "hook", "--kind", "webhook", "--url", hook.URL(), "--json")
	var added struct {
		Channel fleet.AddedChannel `json:"channel"`
	}
	if err := json.Unmarshal([]byte(out), &added); code != 0 || err != nil || !strings.HasPrefix(added.Channel.Secret, "whsec_") {
		t.Fatalf("ssh notify add hook: exit %d %v\n%s", code, err, out)
	}
	hook.SetSecret(added.Channel.Secret)
	if out, code := ssh("notify", "add", "chat", "--kind", "slack", "--url", chat.URL(), "--events", "done,pr_checks"); code != 0 {
		t.Fatalf("ssh notify add chat: exit %d\n%s", code, out)
	}
	notified := func(r *fleettest.Receiver, kind, box string) {
		t.Helper()
		r.Wait(t, kind+" of "+box, func(g fleettest.Received) bool {
			if r.Kind == "slack" {
				phrase := map[string]string{"done": " is done", "pr_checks": "checks finished"}[kind]
				return g.Bad == "" && strings.Contains(g.Text, box) && strings.Contains(g.Text, phrase)
			}
			return g.Bad == "" && g.Note["type"] == kind && g.Note["box"] == box
		})
	}

	events := g.f.Events(ctx, g.alice)
	b, err := g.f.Delegate(ctx, g.alice, fleet.DelegateRequest{Agent: "script",
		Task:  "!write feature.txt hello from the box\n!commit add feature.txt\n!say added feature.txt, ready for review",
		Repos: []fleet.RepoSpec{{Repo: repo.String()}}})
	if err != nil {
		t.Fatal(err)
	}
	box := b.Name
	branch := b.Repos[0].Branch
	g.waitState(box, fleet.Done)
	agentDone := time.Now()

	// Nothing is on Gitea's side until pr pushes it.
	out, code = ssh("pr", "--json", box)
	opened := time.Since(agentDone)
	if code != 0 {
		t.Fatalf("ssh pr: exit %d\n%s", code, out)
	}
	var card fleet.PR
	if err := json.Unmarshal([]byte(out), &card); err != nil {
		t.Fatalf("ssh pr --json: %v\n%s", err, out)
	}
	t.Logf("agent done → PR open (ssh pr: push from the box, open on Gitea): %v", opened.Round(time.Millisecond))
	pushed := gt.BranchSHA(t, repo, branch)
	if !card.Opened || card.State != forge.StateOpen || card.Number == 0 || card.HeadSHA != pushed || card.Head != branch || card.Base != "main" {
		t.Fatalf("card after pr: %+v (branch %s at %s)", card, branch, pushed)
	}
	if card.Title != "!write feature.txt hello from the box" || !strings.Contains(card.Body, "ready for review") || !strings.Contains(card.Body, box) {
		t.Errorf("title %q body %q: want the task's first line, the agent's summary and the box", card.Title, card.Body)
	}
	if rows := g.auditRows("pr.open"); len(rows) != 1 || !strings.Contains(rows[0].Detail, card.URL) || rows[0].Result != "ok" {
		t.Errorf("audit pr.open: %+v", rows)
	}
	// The account's repositories, from the forge: an audit row like every
	// forge call made for someone.
	if out, code := ssh("repos", "--json", "widget"); code != 0 || !strings.Contains(out, `"repo": "`+repo.String()+`"`) {
		t.Errorf("ssh repos widget: exit %d\n%s", code, out)
	}
	if rows := g.auditRows("repos.list"); len(rows) != 1 || rows[0].Actor != "alice" || rows[0].Result != "ok" {
		t.Errorf("audit repos.list: %+v", rows)
	}
	// A second pr shows the card, opens nothing.
	if out, code := ssh("pr", box); code != 0 || !strings.Contains(out, "state:") || strings.Contains(out, "opened") {
		t.Errorf("second ssh pr: exit %d\n%s", code, out)
	}

	// A status on Gitea: the watcher (30 s) sends EventPRChecks.
	gt.SetStatus(t, repo, card.HeadSHA, "success", "ci/test")
	deadline := time.After(75 * time.Second)
	for done := false; !done; {
		select {
		case e := <-events:
			if e.Box == box && e.Kind == fleet.EventPRChecks {
				if e.PR == nil || e.PR.Checks != forge.CheckSuccess || e.PR.Number != card.Number {
					t.Fatalf("checks event: %+v", e)
				}
				done = true
			}
		case <-deadline:
			t.Fatal("no pr_checks event within 75 s of the status")
		}
	}
	if rows := g.auditRows("pr.get"); len(rows) == 0 || !strings.Contains(rows[0].Detail, card.URL) {
		t.Errorf("audit pr.get (the card read from the forge for alice): %+v", rows)
	}
	notified(hook, "done", box)
	notified(chat, "done", box)
	notified(hook, "pr_checks", box)
	notified(chat, "pr_checks", box)
	card, err = g.f.PR(ctx, g.alice, box, "")
	if err != nil || card.ChecksOutcome != forge.CheckSuccess || len(card.Checks) != 1 || card.Checks[0].Name != "ci/test" {
		t.Fatalf("card after the status: %+v %v", card, err)
	}
	// The web box page shows it.
	page := webPage(t, g, "/boxes/"+box)
	for _, want := range []string{"pr-outcome-success", "ci/test", card.URL, `action="/boxes/` + box + `/pr/merge"`} {
		if !strings.Contains(page, want) {
			t.Errorf("box page lacks %q", want)
		}
	}

	// A follow-up turn commits again; pr pushes it and the card follows.
	if _, err := g.f.FollowUp(ctx, g.alice, box, "!write second.txt more\n!commit second change", false); err != nil {
		t.Fatal(err)
	}
	// The second turn's end, not the first's (a box may still read done
	// for a moment after the follow-up is accepted).
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if b, err := g.f.Get(ctx, g.alice, box); err == nil && b.Turns >= 2 && b.State == fleet.Done {
			break
		}
		if time.Since(start) > 4*time.Minute {
			t.Fatal("the follow-up turn did not end")
		}
	}
	again, err := g.f.OpenPR(ctx, g.alice, box, fleet.PRRequest{})
	if err != nil || again.Opened || again.Number != card.Number || again.HeadSHA == card.HeadSHA || again.HeadSHA != gt.BranchSHA(t, repo, branch) {
		t.Fatalf("after the follow-up: %+v %v (was %s)", again, err, card.HeadSHA)
	}

	// The branch moves behind the card's back: a merge is refused.
	if out, code := g.shAs(box, fleet.AgentUser, "cd /workspace/widget && echo late >> second.txt && git commit -qam late && git push -q origin HEAD"); code != 0 {
		t.Fatalf("push from the box: %d\n%s", code, out)
	}
	moved := gt.BranchSHA(t, repo, branch)
	// Gitea moves the pull request's head after a push on its own time.
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		var pr struct {
			Head struct {
				SHA string `json:"sha"`
			} `json:"head"`
		}
		gt.API(t, "GET", "/repos/"+repo.Owner+"/"+repo.Name+"/pulls/"+strconv.Itoa(card.Number), nil, &pr)
		if pr.Head.SHA == moved {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("Gitea's pull request head stayed %s, the branch is at %s", pr.Head.SHA, moved)
		}
	}
	if _, err := g.f.MergePR(ctx, g.alice, box, "", forge.Merge); !errors.Is(err, fleet.ErrConflict) || !strings.Contains(err.Error(), "the branch moved") {
		t.Fatalf("merge at a stale head: %v", err)
	}

	// Merged from MCP at the head the card shows now.
	tok, _, err := g.s.keys.CreateAPIKey(ctx, cli, "alice", "pr", []string{"write"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "sbx-test", Version: "v0"}, nil).Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint: g.s.HTTPURL() + "/mcp", MaxRetries: -1, HTTPClient: &http.Client{Transport: bearer{token: tok, base: http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// The refused merge saved the head the branch moved to: this one
	// lands exactly it.
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "pr_merge", Arguments: map[string]any{"box": box, "method": "squash"}})
	if err != nil || res.IsError {
		t.Fatalf("mcp pr_merge: %v %s", err, resultText(res))
	}
	var merged struct {
		State string `json:"state"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &merged)
	if merged.State != forge.StateMerged {
		t.Fatalf("mcp pr_merge: %s", resultText(res))
	}
	var file struct {
		Name string `json:"name"`
	}
	gt.API(t, "GET", "/repos/"+repo.Owner+"/"+repo.Name+"/contents/second.txt?ref=main", nil, &file)
	if file.Name != "second.txt" {
		t.Errorf("main lacks the box's commits: %+v", file)
	}
	if rows := g.auditRows("pr.merge"); len(rows) != 2 || rows[0].Result == rows[1].Result {
		t.Errorf("audit pr.merge (one refused, one done): %+v", rows)
	}
	if _, err := g.f.ClosePR(ctx, g.alice, box, ""); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("close a merged pull request: %v", err)
	}
	for _, r := range []*fleettest.Receiver{hook, chat} {
		for _, got := range r.All() {
			if got.Bad != "" {
				t.Errorf("%s receiver: a request broke the format: %s (%s)", r.Kind, got.Bad, got.Body)
			}
		}
	}
}

// webPage is path of the console as alice, through a real login link.
func webPage(t *testing.T, g *boxGateway, path string) string {
	t.Helper()
	ctx := context.Background()
	link, _, err := g.s.keys.CreateLoginLink(ctx, keys.Actor{User: "test", Role: keys.RoleAdmin, Front: keys.FrontCLI}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(g.s.HTTPURL()+"/login/"+link, url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = c.Get(g.s.HTTPURL() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", path, resp.StatusCode, body)
	}
	return string(body)
}
