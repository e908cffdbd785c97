package web

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"sbx.dev/sbx/fleet"
)

// TestBrowserDelegateRepoRows: in Chromium, under the console's CSP and
// with no script of ours, the delegate form's buttons add and remove
// repository rows (the server answers the form again), keep what was
// typed, and the delegation hands the core every filled row in order.
func TestBrowserDelegateRepoRows(t *testing.T) {
	c := newConsole(t, Options{})
	got := make(chan []fleet.RepoSpec, 1)
	c.core.delegating = func(req fleet.DelegateRequest) error { got <- req.Repos; return nil }
	br := chromium(t)
	br.do("log in", chromedp.Navigate(c.link("alice")), chromedp.Click(chromedp.CSS("#login")), chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))

	br.do("delegate form", chromedp.Navigate(c.URL+"/delegate"), chromedp.WaitVisible(chromedp.CSS("#task")),
		chromedp.SendKeys(chromedp.CSS("#repo"), "acme/widget"), chromedp.SendKeys(chromedp.CSS("#ref"), "v1"),
		chromedp.Click(chromedp.CSS("#add-repo")))
	// The task is still empty: formnovalidate lets the row buttons post.
	br.waitRows("#repo-2")
	br.waitFor("a second row", `document.querySelector('#repo-2') && document.querySelector('#repo').value === 'acme/widget' && document.querySelector('#ref').value === 'v1'`)
	br.clean("the form with two rows")
	br.do("fill the second row and add a third", chromedp.SendKeys(chromedp.CSS("#repo-2"), "acme/gadget"),
		chromedp.SendKeys(chromedp.CSS("#ref-2"), "main"), chromedp.SendKeys(chromedp.CSS("#task"), "fix "+xssCorpus[1]),
		chromedp.Click(chromedp.CSS("#add-repo")))
	br.waitRows("#repo-3")
	br.waitFor("a third row", `document.querySelector('#repo-3') && document.querySelector('#ref-2').value === 'main'`)
	br.do("fill the third and remove the first", chromedp.SendKeys(chromedp.CSS("#repo-3"), "acme/third"),
		chromedp.Click(chromedp.CSS("#remove-repo")))
	br.waitFor("two rows, shifted up", `!document.querySelector('#repo-3') && document.querySelector('#repo').value === 'acme/gadget' && document.querySelector('#repo-2').value === 'acme/third'`)
	br.waitRows("#delegate")
	var task string
	br.eval(`document.querySelector('#task').value`, &task)
	if task != "fix "+xssCorpus[1] {
		t.Fatalf("the task after the row buttons: %q", task)
	}
	br.clean("the form after a removal")
	br.screenshot("delegate-repo-rows.png")
	br.do("submit", chromedp.Click(chromedp.CSS("#delegate")))
	br.waitFor("the box page", `location.pathname.startsWith('/boxes/box-') && document.querySelector('#log')`)
	if repos := <-got; len(repos) != 2 || repos[0] != (fleet.RepoSpec{Repo: "acme/gadget", Ref: "main"}) || repos[1] != (fleet.RepoSpec{Repo: "acme/third"}) {
		t.Fatalf("the core got repos %+v", repos)
	}
	br.clean("the started box")
}

// TestBrowserBoxTools: in Chromium, the side question's answer replaces
// its panel in place (htmx under the CSP) and renders as text, XSS corpus
// and all; a refusal shows in the panel; the allow-list editor adds and
// removes entries with plain form posts.
func TestBrowserBoxTools(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("b1", "alice", "a task", "acme/widget", c.clock.Now())
	br := chromium(t)
	br.do("log in", chromedp.Navigate(c.link("alice")), chromedp.Click(chromedp.CSS("#login")), chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))
	br.do("box page", chromedp.Navigate(c.URL+"/boxes/b1"), chromedp.WaitVisible(chromedp.CSS("#ask-question")))
	br.clean("box page with its tools")
	// The textarea is replaced with its panel at every answer: set it by
	// script, then type.
	setQuestion := func(v string) {
		var done bool
		br.eval(`(document.querySelector('#ask-question').value = `+jsString(v)+`, true)`, &done)
	}

	for i, payload := range xssCorpus {
		setQuestion("")
		br.do("ask", chromedp.SendKeys(chromedp.CSS("#ask-question"), payload), chromedp.Click(chromedp.CSS("#ask-send")))
		br.waitFor("the answer", `document.querySelector('#ask-answer') && document.querySelector('#ask-answer').innerText.endsWith(`+jsString(payload)+`)`)
		if i == 0 {
			br.screenshot("box-side-question.png")
		}
	}
	if loc := br.location(); loc != c.URL+"/boxes/b1" {
		t.Errorf("the side question left the page for %s", loc)
	}
	setQuestion("")
	br.do("fresh", chromedp.Click(chromedp.CSS("#ask-fresh")), chromedp.SendKeys(chromedp.CSS("#ask-question"), "and now?"), chromedp.Click(chromedp.CSS("#ask-send")))
	br.waitFor("a fresh answer", `document.querySelector('#ask-answer') && document.querySelector('#ask-answer').innerText === 'side answer (fresh true) to: and now?'`)
	setQuestion("  ")
	br.do("a blank question", chromedp.Click(chromedp.CSS("#ask-send")))
	br.waitFor("the refusal in the panel", `document.querySelector('#ask-error') && document.querySelector('#ask-error').innerText.includes('question is empty') && !document.querySelector('#ask-answer')`)
	br.clean("side questions")

	br.do("allow", chromedp.SendKeys(chromedp.CSS("#allow-add"), "pypi.org *.example.com:8443"), chromedp.Click(chromedp.CSS("#allow-send")))
	br.waitFor("the new list", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('may reach: pypi.org *.example.com:8443')`)
	br.do("remove pypi.org", chromedp.Click(chromedp.CSS(`.allow-list button[aria-label="Remove pypi.org"]`)))
	br.waitFor("pypi.org gone", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('may reach: *.example.com:8443.') && document.querySelectorAll('.allow-list li').length === 1`)
	br.clean("allow-list edited")
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}

// waitRows waits, through chromedp's own view of the DOM, for the element
// the delegate form's answer brings: each row button loads a new page, and
// an action aimed at the old page's nodes fails ("could not find node").
func (c *chrome) waitRows(sel string) {
	c.t.Helper()
	c.do("the form's answer", chromedp.WaitVisible(chromedp.CSS(sel)))
}
