package web

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"sbx.dev/sbx/fleet"
)

// pacedSteps is a scripted core's delegation whose steps the test ends one
// at a time: each step is reported started, then waits for its outcome on
// next (nil: done), then reported ended.
type pacedSteps struct {
	texts []string
	next  chan error
}

func newPacedSteps(texts ...string) *pacedSteps {
	return &pacedSteps{texts: texts, next: make(chan error)}
}

func (p *pacedSteps) run(req fleet.DelegateRequest) error {
	for i, text := range p.texts {
		s := fleet.Step{Name: fmt.Sprint("step", i), Text: text, N: i + 1, Of: len(p.texts)}
		req.Progress(s)
		err := <-p.next
		s.Done, s.Took, s.Err = true, 1200*time.Millisecond, err
		req.Progress(s)
		if err != nil {
			return err
		}
	}
	return nil
}

// sseEvents reads a stream's events ("event\ndata") as they come.
func sseEvents(t *testing.T, b *http.Client, u string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("stream %s: %d %q", u, resp.StatusCode, ct)
	}
	out := make(chan string, 16)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev strings.Builder
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && ev.Len() > 0:
				out <- ev.String()
				ev.Reset()
			case strings.HasPrefix(line, "event: "):
				ev.WriteString(strings.TrimPrefix(line, "event: ") + "\n")
			case strings.HasPrefix(line, "data: "):
				ev.WriteString(strings.TrimPrefix(line, "data: "))
			}
		}
	}()
	return out
}

func nextEvent(t *testing.T, events <-chan string) (kind, data string) {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("the stream ended early")
		}
		kind, data, _ = strings.Cut(ev, "\n")
		return kind, data
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return "", ""
}

// waitSteps skips "steps" events until one contains want.
func waitSteps(t *testing.T, events <-chan string, want string) string {
	t.Helper()
	for {
		kind, data := nextEvent(t, events)
		if kind != "steps" {
			t.Fatalf("%s before the steps show %q: %s", kind, want, data)
		}
		if strings.Contains(data, want) {
			return data
		}
	}
}

// TestDelegateFormOffersKnownRepos: the delegate form's repository fields
// offer what the caller's account reaches (the core's Repos) through a
// datalist, and still take anything else.
func TestDelegateFormOffersKnownRepos(t *testing.T) {
	c := newConsole(t, Options{})
	alice := c.login("alice")
	resp, body := send(t, alice, "GET", c.URL+"/delegate", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `<datalist id="known-repos"><option value="acme/widget"></option><option value="acme/gadget"></option></datalist>`) ||
		!strings.Contains(body, `name="repo" value="" placeholder="owner/name" list="known-repos"`) {
		t.Fatalf("GET /delegate: %d\n%s", resp.StatusCode, body)
	}
	resp, body = send(t, alice, "POST", c.URL+"/delegate", url.Values{"task": {"x"}, "repo": {"other/thing"}, "op": {"add-repo"}})
	if resp.StatusCode != 200 || strings.Count(body, `list="known-repos"`) != 2 || !strings.Contains(body, `value="other/thing"`) {
		t.Fatalf("add a row: %d\n%s", resp.StatusCode, body)
	}
}

// TestDelegationSteps: the delegate form's POST answers at the first step
// with the delegation's page, whose stream sends every step as it starts
// and ends, then the failure with its reason and the form as filled. Only
// the user who started it sees it.
func TestDelegationSteps(t *testing.T) {
	c := newConsole(t, Options{})
	steps := newPacedSteps("cloning acme/widget", "booting (small kernel)")
	c.core.delegating = steps.run
	alice, other := c.login("alice"), c.login("admin")

	resp, body := send(t, alice, "POST", c.URL+"/delegate", url.Values{"task": {"fix <it>"}, "repo": {"acme/widget"}, "agent": {"script"}})
	page := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(page, "/delegate/") {
		t.Fatalf("POST /delegate: %d %q: %s", resp.StatusCode, page, body)
	}
	resp, body = send(t, alice, "GET", c.URL+page, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "cloning acme/widget…") ||
		!strings.Contains(body, `sse-connect="`+page+`/stream"`) || !strings.Contains(body, "fix &lt;it&gt;") {
		t.Fatalf("delegation page: %d %s", resp.StatusCode, body)
	}
	for _, p := range []string{page, page + "/stream"} {
		if resp, _ := send(t, other, "GET", c.URL+p, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("another user GET %s: %d, want 404", p, resp.StatusCode)
		}
	}

	events := sseEvents(t, alice, c.URL+page+"/stream")
	if kind, data := nextEvent(t, events); kind != "steps" || !strings.Contains(data, "cloning acme/widget…") || strings.Contains(data, "took") {
		t.Fatalf("first event %s: %s", kind, data)
	}
	// Changes close together may come as one event: the list is whole.
	steps.next <- nil
	data := waitSteps(t, events, "booting (small kernel)…")
	if !strings.Contains(data, `cloning acme/widget…`) || !strings.Contains(data, `<span class="took">1.2 s</span>`) {
		t.Fatalf("after the clone: %s", data)
	}
	steps.next <- errors.New("boot box: the machine did not answer")
	data = waitSteps(t, events, "failed after 1.2 s")
	if !strings.Contains(data, "step-failed") {
		t.Fatalf("the failed boot: %s", data)
	}
	kind, data := nextEvent(t, events)
	if kind != "done" || !strings.Contains(data, "the machine did not answer") || !strings.Contains(data, `value="acme/widget"`) {
		t.Fatalf("the end %s: %s", kind, data)
	}
	if _, ok := <-events; ok {
		t.Error("the stream goes on after its end")
	}
	// Reloaded, the page shows the same end.
	if resp, body = send(t, alice, "GET", c.URL+page, nil); resp.StatusCode != 200 || !strings.Contains(body, "the machine did not answer") ||
		strings.Contains(body, "sse-connect") {
		t.Fatalf("the ended delegation's page: %d %s", resp.StatusCode, body)
	}

	// A delegation that starts its box moves the browser on to it.
	steps = newPacedSteps("booting (small kernel)")
	c.core.mu.Lock()
	c.core.delegating = steps.run
	c.core.mu.Unlock()
	resp, _ = send(t, alice, "POST", c.URL+"/delegate", url.Values{"task": {"second"}})
	page = resp.Header.Get("Location")
	events = sseEvents(t, alice, c.URL+page+"/stream")
	nextEvent(t, events)
	steps.next <- nil
	for kind = ""; kind != "done"; {
		kind, data = nextEvent(t, events)
	}
	if !strings.Contains(data, `hx-get="`+page+`"`) || !strings.Contains(data, "started") {
		t.Fatalf("the end of a started box: %s", data)
	}
	resp, _ = send(t, alice, "GET", c.URL+page, nil, "HX-Request", "true")
	if to := resp.Header.Get("HX-Redirect"); resp.StatusCode != 200 || !strings.HasPrefix(to, "/boxes/box-") {
		t.Fatalf("htmx GET of a started delegation: %d HX-Redirect %q", resp.StatusCode, to)
	}
	resp, _ = send(t, alice, "GET", c.URL+page, nil)
	if to := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(to, "/boxes/box-") {
		t.Fatalf("GET of a started delegation: %d %q", resp.StatusCode, to)
	}

	// A refusal before any step keeps the form, as it always did.
	resp, body = send(t, alice, "POST", c.URL+"/delegate", url.Values{"task": {" "}, "repo": {"acme/widget"}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "task is empty") || !strings.Contains(body, `value="acme/widget"`) {
		t.Fatalf("empty task: %d %s", resp.StatusCode, body)
	}
}

// TestBrowserDelegationSteps: in Chromium, submitting the delegate form
// shows each step as the core reports it (HTMX over SSE, under the
// console's CSP), then moves on to the started box; a failing step shows
// its reason and the form as it was filled.
func TestBrowserDelegationSteps(t *testing.T) {
	c := newConsole(t, Options{})
	br := chromium(t)
	br.do("log in", chromedp.Navigate(c.link("alice")), chromedp.Click(chromedp.CSS("#login")), chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))
	delegate := func(steps *pacedSteps, task string) {
		c.core.mu.Lock()
		c.core.delegating = steps.run
		c.core.mu.Unlock()
		br.do("delegate", chromedp.Navigate(c.URL+"/delegate"), chromedp.SendKeys(chromedp.CSS("#task"), task),
			chromedp.SendKeys(chromedp.CSS("#repo"), "acme/widget"), chromedp.Click(chromedp.CSS("#delegate")))
		br.waitFor("the delegation's page", `location.pathname.startsWith('/delegate/') && document.querySelector('#step-1')`)
	}

	steps := newPacedSteps("cloning acme/widget", "booting (small kernel)")
	delegate(steps, "fix it "+xssCorpus[0])
	br.waitFor("the clone running", `document.querySelector('#step-1.step-running') && document.querySelector('#step-1').innerText.includes('cloning acme/widget…')`)
	br.clean("delegation, cloning")
	steps.next <- nil
	br.waitFor("the clone done and the boot running", `document.querySelector('#step-1.step-done .took') && document.querySelector('#step-2.step-running')`)
	var text string
	br.eval(`document.querySelector('#steps').innerText`, &text)
	if !strings.Contains(text, "cloning acme/widget… 1.2 s") || !strings.Contains(text, "booting (small kernel)…") {
		t.Errorf("steps read %q", text)
	}
	br.screenshot("delegation-steps.png")
	br.clean("delegation, booting")
	steps.next <- nil
	br.waitFor("the box page", `location.pathname.startsWith('/boxes/box-') && document.querySelector('#log')`)
	br.waitFor("the flash", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('started')`)
	br.clean("the started box")

	steps = newPacedSteps("cloning acme/widget")
	delegate(steps, "fail it")
	steps.next <- errors.New("repo acme/widget: clone failed: host unreachable")
	br.waitFor("the failure", `document.querySelector('#delegate-error') && document.querySelector('#step-1.step-failed')`)
	br.eval(`document.querySelector('#delegate-error').innerText`, &text)
	if !strings.Contains(text, "clone failed: host unreachable") {
		t.Errorf("failure reads %q", text)
	}
	br.eval(`document.querySelector('#task').value + '|' + document.querySelector('#repo').value`, &text)
	if text != "fail it|acme/widget" {
		t.Errorf("the form after a failure holds %q", text)
	}
	br.screenshot("delegation-failed.png")
	br.clean("the failed delegation")
}
