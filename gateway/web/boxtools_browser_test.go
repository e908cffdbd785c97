package web

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
)

// TestBrowserBoxToolsRealFleet drives, in Chromium against the real core
// (a QEMU box, the script agent, git over smart HTTP), what the console
// gained to match SSH: a delegation of two repositories through the form's
// add and remove buttons (no script of ours), a side question answered in
// the box page by htmx, and the allow-list editor showing the core's own
// refusal of a bad entry, then adding and removing entries.
func TestBrowserBoxToolsRealFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a QEMU box")
	}
	ctx := context.Background()
	h := fleettest.New(t, fleettest.Options{MaxBoxes: 2})
	h.Git.CreateRepo("acme", "gadget", map[string]string{"GADGET.md": "gadget\n"})
	alice := h.Actors["alice"]
	ts := httptest.NewServer(New(Options{Identity: h.Keys, Logger: h.Logger, Audit: h.Audit, Fleet: h.Fleet,
		Sessions: h.Store.SessionStore(nil), Throttle: throttle.NewAuth(20, 10*time.Minute, nil)}))
	t.Cleanup(ts.Close)
	link, _, err := h.Keys.CreateLoginLink(ctx, cli, "alice")
	if err != nil {
		t.Fatal(err)
	}
	br := chromium(t)
	br.do("log in", chromedp.Navigate(ts.URL+"/login/"+link), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))

	// Two rows through the buttons: add, add, remove the third; what was
	// typed survives every round trip.
	br.do("delegate form", chromedp.Navigate(ts.URL+"/delegate"), chromedp.WaitVisible(chromedp.CSS("#task")),
		chromedp.SendKeys(chromedp.CSS("#task"), "!say two repos here"), chromedp.SendKeys(chromedp.CSS("#repo"), "acme/widget"),
		chromedp.Click(chromedp.CSS("#add-repo")))
	br.waitRows("#repo-2")
	br.waitFor("a second row", `document.querySelector('#repo-2') && document.querySelector('#repo').value === 'acme/widget'`)
	br.do("fill the second row", chromedp.SendKeys(chromedp.CSS("#repo-2"), "acme/gadget"), chromedp.SendKeys(chromedp.CSS("#ref-2"), "main"),
		chromedp.Click(chromedp.CSS("#add-repo")))
	br.waitRows("#repo-3")
	br.waitFor("a third row", `document.querySelector('#repo-3') && document.querySelector('#ref-2').value === 'main'`)
	br.do("fill and remove the third", chromedp.SendKeys(chromedp.CSS("#repo-3"), "acme/nosuch"), chromedp.Click(chromedp.CSS("#remove-repo-3")))
	br.waitFor("two rows again", `!document.querySelector('#repo-3') && document.querySelector('#repo-2') && document.querySelector('#repo-2').value === 'acme/gadget'`)
	br.waitRows("#delegate")
	var task string
	br.eval(`document.querySelector('#task').value`, &task)
	if task != "!say two repos here" {
		t.Fatalf("the task after the row buttons: %q", task)
	}
	br.clean("delegate form with two rows")
	br.do("submit", chromedp.SetValue(chromedp.CSS("#agent"), "script"), chromedp.Click(chromedp.CSS("#delegate")))
	br.waitForLong("the box page", `location.pathname.startsWith('/boxes/') && document.querySelector('#log')`, 3*time.Minute)
	name := strings.TrimPrefix(br.location(), ts.URL+"/boxes/")
	b, err := h.Fleet.Get(ctx, alice, name)
	if err != nil {
		t.Fatal(err)
	}
	var repos []string
	for _, r := range b.Repos {
		repos = append(repos, r.Name)
	}
	if !slices.Equal(repos, []string{"acme/widget", "acme/gadget"}) {
		t.Fatalf("box %s holds repos %q", name, repos)
	}
	br.waitForLong("done", `document.querySelector('#state') && document.querySelector('#state').innerText === 'done'`, 2*time.Minute)

	// The side question: htmx swaps the panel in place with the answer of
	// the box's read-only lane, which sees both repositories.
	br.do("ask", chromedp.SendKeys(chromedp.CSS("#ask-question"), "what is here?"), chromedp.Click(chromedp.CSS("#ask-send")))
	br.waitForLong("the side answer", `document.querySelector('#ask-answer')`, 3*time.Minute)
	var answer string
	br.eval(`document.querySelector('#ask-answer').innerText`, &answer)
	for _, want := range []string{`side answer to "what is here?"`, "widget", "gadget", "read-only hook denied a write"} {
		if !strings.Contains(answer, want) {
			t.Errorf("side answer %q lacks %q", answer, want)
		}
	}
	if loc := br.location(); loc != ts.URL+"/boxes/"+name {
		t.Errorf("the side question left the page for %s", loc)
	}
	br.clean("side answer")
	br.screenshot("box-side-question.png")

	// The allow-list: the core refuses a bad entry and says why, the
	// typed text stays; then two entries in, one out.
	br.do("allow a bad entry", chromedp.SendKeys(chromedp.CSS("#allow-add"), "pypi.org http://x/"), chromedp.Click(chromedp.CSS("#allow-send")))
	// Under load the core's answer took 23 s here (2 shared cores, three
	// boxes booting): these waits allow a minute.
	br.waitForLong("the core's refusal", `document.querySelector('#allow-error') && document.querySelector('#allow-error').innerText.includes('allowed domain "http://x/"')`, time.Minute)
	var typed string
	br.eval(`document.querySelector('#allow-add').value`, &typed)
	if typed != "pypi.org http://x/" {
		t.Errorf("the refused entry reads %q afterwards", typed)
	}
	if b, _ := h.Fleet.Get(ctx, alice, name); len(b.Allow) != 0 {
		t.Fatalf("a refused change changed the list: %q", b.Allow)
	}
	br.clean("allow-list refused")
	var cleared bool
	br.eval(`(document.querySelector('#allow-add').value = '', true)`, &cleared)
	br.do("allow two", chromedp.SendKeys(chromedp.CSS("#allow-add"), "pypi.org *.example.com:8443"), chromedp.Click(chromedp.CSS("#allow-send")))
	br.waitForLong("the new list", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('may reach: pypi.org *.example.com:8443')`, time.Minute)
	br.do("remove pypi.org", chromedp.Click(chromedp.CSS(`.allow-list button[aria-label="Remove pypi.org"]`)))
	br.waitForLong("pypi.org gone", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('may reach: *.example.com:8443.')`, time.Minute)
	br.clean("allow-list edited")
	if b, _ := h.Fleet.Get(ctx, alice, name); !slices.Equal(b.Allow, []string{"*.example.com:8443"}) {
		t.Fatalf("the core's list: %q", b.Allow)
	}
}
