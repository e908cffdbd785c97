package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestCheckpointsAndForkThroughTheConsole: the box page offers checkpoint
// and fork forms and loads the checkpoint list (each with a Rewind
// button); each form makes its one core call, a refused input is the
// failure page of its kind, another user's box is not found, and a fork
// goes to the new box's page.
func TestCheckpointsAndForkThroughTheConsole(t *testing.T) {
	c := newConsole(t, Options{})
	alice := c.login("alice")
	now := c.clock.Now()
	c.core.add("b1", "alice", "task", "acme/widget", now)
	c.core.add("theirs", "admin", "task", "", now)

	_, body := send(t, alice, "GET", c.URL+"/boxes/b1", nil)
	for _, want := range []string{`id="checkpoint-form"`, `id="fork-form"`, `id="checkpoint-list"`, `hx-get="/boxes/b1/checkpoints"`} {
		if !strings.Contains(body, want) {
			t.Errorf("box page lacks %s", want)
		}
	}
	if _, body := send(t, alice, "GET", c.URL+"/boxes/b1/checkpoints", nil, "HX-Request", "true"); !strings.Contains(body, `id="no-checkpoints"`) {
		t.Errorf("empty checkpoint list: %s", body)
	}
	resp, body := send(t, alice, "POST", c.URL+"/boxes/b1/checkpoint", url.Values{"label": {"before <b>it</b>"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/boxes/b1" {
		t.Fatalf("checkpoint: %d %s", resp.StatusCode, body)
	}
	_, body = send(t, alice, "GET", c.URL+"/boxes/b1/checkpoints", nil, "HX-Request", "true")
	if !strings.Contains(body, `id="checkpoint-cp-test0000"`) || !strings.Contains(body, "before &lt;b&gt;it&lt;/b&gt;") ||
		!strings.Contains(body, `name="checkpoint" value="cp-test0000"`) || strings.Contains(body, "<html") {
		t.Errorf("checkpoint list fragment: %s", body)
	}
	if _, body := send(t, alice, "GET", c.URL+"/boxes/b1/checkpoints", nil); !strings.Contains(body, "<h1>Checkpoints</h1>") || !strings.Contains(body, "cp-test0000") {
		t.Errorf("checkpoint list page: %s", body)
	}
	if resp, body := send(t, alice, "POST", c.URL+"/boxes/b1/checkpoint", url.Values{"label": {"two\nlines"}}); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "one line") {
		t.Errorf("checkpoint with a bad label: %d %s", resp.StatusCode, body)
	}
	if resp, _ := send(t, alice, "POST", c.URL+"/boxes/b1/rewind", url.Values{"checkpoint": {"cp-test0000"}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("rewind: %d", resp.StatusCode)
	}
	if resp, _ := send(t, alice, "POST", c.URL+"/boxes/b1/rewind", url.Values{"checkpoint": {"cp-nosuch1"}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("rewind to a missing checkpoint: %d", resp.StatusCode)
	}
	if resp, _ := send(t, alice, "POST", c.URL+"/boxes/b1/rewind", url.Values{"checkpoint": {"../box.json"}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("rewind to a bad id: %d", resp.StatusCode)
	}
	if !strings.Contains(body, `action="/boxes/b1/checkpoints/cp-test0000/delete"`) {
		t.Errorf("the list has no Remove button: %s", body)
	}
	if resp, _ := send(t, alice, "POST", c.URL+"/boxes/b1/checkpoints/cp-test0000/delete", url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("remove a checkpoint: %d", resp.StatusCode)
	}
	if resp, _ := send(t, alice, "POST", c.URL+"/boxes/b1/checkpoints/cp-test0000/delete", url.Values{}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("remove it again: %d, want 404", resp.StatusCode)
	}
	if list, _ := c.core.Checkpoints(t.Context(), cli, "b1"); len(list) != 0 {
		t.Errorf("after removing: %v", list)
	}
	resp, body = send(t, alice, "POST", c.URL+"/boxes/b1/fork", url.Values{"task": {"try it another way"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/boxes/b1-fork" {
		t.Fatalf("fork: %d %s %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	for _, p := range []string{"/boxes/theirs/checkpoint", "/boxes/theirs/fork", "/boxes/theirs/rewind", "/boxes/theirs/checkpoints/cp-test0000/delete"} {
		if resp, _ := send(t, alice, "POST", c.URL+p, url.Values{"checkpoint": {"cp-test0000"}}); resp.StatusCode != http.StatusNotFound {
			t.Errorf("POST %s as another user: %d, want 404", p, resp.StatusCode)
		}
	}
	if resp, _ := send(t, alice, "GET", c.URL+"/boxes/theirs/checkpoints", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another user's checkpoints: %d, want 404", resp.StatusCode)
	}
	if list, err := c.core.Checkpoints(t.Context(), cli, "theirs"); err != nil || len(list) != 0 {
		t.Errorf("refused calls checkpointed another user's box: %v %v", list, err)
	}
	if _, err := c.core.Get(t.Context(), cli, "theirs-fork"); err == nil {
		t.Error("a refused fork made a box")
	}
}

// TestBrowserCheckpointsAndFork: in Chromium, under the console's CSP,
// the box page's checkpoint form saves one, the list loads into the page
// (htmx) with the label as text, its Rewind button posts, and the fork
// form lands on the new box's page.
func TestBrowserCheckpointsAndFork(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("b1", "alice", "a task", "acme/widget", c.clock.Now())
	br := chromium(t)
	br.do("log in", chromedp.Navigate(c.link("alice")), chromedp.Click(chromedp.CSS("#login")), chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))
	br.do("box page", chromedp.Navigate(c.URL+"/boxes/b1"), chromedp.WaitVisible(chromedp.CSS("#checkpoint-form")))
	br.waitFor("the empty list", `document.querySelector('#no-checkpoints')`)
	br.do("checkpoint", chromedp.SendKeys(chromedp.CSS("#checkpoint-label"), xssCorpus[0]), chromedp.Click(chromedp.CSS("#checkpoint")))
	br.waitFor("the list with it", `document.querySelector('#checkpoint-cp-test0000') && document.querySelector('#checkpoint-cp-test0000').innerText.includes(`+jsString(xssCorpus[0])+`)`)
	br.clean("box page with a checkpoint")
	br.screenshot("box-checkpoints.png")
	br.do("rewind", chromedp.Click(chromedp.CSS("#checkpoint-cp-test0000 button")))
	br.waitFor("the box page again", `location.pathname === '/boxes/b1' && document.body.innerText.includes('Rewound to cp-test0000')`)
	br.do("fork", chromedp.SendKeys(chromedp.CSS("#fork-task"), "try it another way"), chromedp.Click(chromedp.CSS("#fork")))
	br.waitFor("the fork's page", `location.pathname === '/boxes/b1-fork' && document.querySelector('#log')`)
	br.clean("the fork's page")
}
