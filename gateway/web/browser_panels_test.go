package web

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"sbx.dev/sbx/fleet"
)

// TestBrowserBoxPanelsNeverHang is the regression test for a failed box's
// page saying "Loading the diff…" and "Loading files…" for ever: a box with
// no machine (failed, sleeping) says why in both panels, and a panel
// request that errors shows the error in place of "Loading…".
func TestBrowserBoxPanelsNeverHang(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("dead", "alice", "crash", "", time.Now())
	c.core.fail("dead", "the agent exited with status 2")
	c.core.add("nap", "alice", "rest", "", time.Now())
	if _, err := c.core.setState(cli, "nap", fleet.Sleeping); err != nil {
		t.Fatal(err)
	}
	c.core.add("lost", "alice", "vanish", "", time.Now())
	c.core.failReads("lost", fmt.Errorf("box %q has failed (machine lost): %w", "lost", fleet.ErrConflict))
	br := chromium(t)
	br.do("log in", chromedp.Navigate(c.link("alice")), chromedp.Click(chromedp.CSS("#login")), chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))

	for _, tc := range []struct{ box, diff, files string }{
		{"dead", "No diff: the box failed: the agent exited with status 2", "No files: the box failed: the agent exited with status 2"},
		{"nap", "The diff is unavailable while the box is sleeping — wake it.", "Files are unavailable while the box is sleeping — wake it."},
		{"lost", `box "lost" has failed (machine lost): conflict`, `box "lost" has failed (machine lost): conflict`},
	} {
		br.do("open "+tc.box, chromedp.Navigate(c.URL+"/boxes/"+tc.box), chromedp.WaitVisible(chromedp.CSS("#log")))
		br.waitForLong(tc.box+": both panels say why, nothing is loading", fmt.Sprintf(
			`document.querySelector('#diff').innerText.trim() === %q && document.querySelector('#files').innerText.trim() === %q && !document.body.innerText.includes('Loading')`,
			tc.diff, tc.files), 5*time.Second)
		br.clean(tc.box + " box page")
	}
}

// TestBrowserBoxPanelsSurviveNetworkFailure: when the network fails under a
// panel's request (Chromium fails it as a refused connection, as for a
// gateway that stopped mid-page), htmx gets no answer and swaps nothing;
// static/sbx.js puts the error and a Retry button in place of "Loading…",
// and Retry, the network back, loads the panel. A failed directory click in
// the files panel retries that directory, not the panel's first page.
func TestBrowserBoxPanelsSurviveNetworkFailure(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("live", "alice", "work", "", time.Now())
	c.core.setFile("live", "report.txt", []byte("the report\n"))
	c.core.setFile("live", "docs/guide.md", []byte("the guide\n"))
	c.core.setDiff("live", "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-old\n+new\n")
	br := chromium(t)
	br.do("log in", chromedp.Navigate(c.link("alice")), chromedp.Click(chromedp.CSS("#login")), chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))

	// The network is down for the panels' requests while down is set.
	var down atomic.Bool
	var failed atomic.Int32
	paused := make(chan *fetch.EventRequestPaused, 64)
	if err := chromedp.Listen(br.ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			paused <- e
		}
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			var e *fetch.EventRequestPaused
			select {
			case e = <-paused:
			case <-br.ctx.Done():
				return
			}
			var err error
			if down.Load() {
				failed.Add(1)
				_, err = chromedp.Call(br.ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: e.RequestID, ErrorReason: network.ErrorReasonConnectionRefused})
			} else {
				_, err = chromedp.Call(br.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID})
			}
			if err != nil && br.ctx.Err() == nil {
				t.Errorf("answer the paused request %s: %v", e.Request.URL, err)
			}
		}
	}()
	if _, err := chromedp.Call(br.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
		{URLPattern: "*/boxes/live/diff*"}, {URLPattern: "*/boxes/live/files*"}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = chromedp.Call(br.ctx, fetch.Disable, cdp.Empty{}) })

	const unreachable = "Could not reach the gateway: the network failed or the gateway stopped."
	down.Store(true)
	br.do("open the box with the network down", chromedp.Navigate(c.URL+"/boxes/live"), chromedp.WaitVisible(chromedp.CSS("#log")))
	br.waitForLong("both panels say the gateway is unreachable, with a Retry, nothing loading", fmt.Sprintf(
		`['#diff', '#files'].every(id => document.querySelector(id + ' p.error').innerText.includes(%q) && document.querySelector(id + ' button.retry')) && !document.body.innerText.includes('Loading')`,
		unreachable), 10*time.Second)
	if n := failed.Load(); n < 2 {
		t.Fatalf("%d panel requests failed, want both", n)
	}
	br.clean("box page, network down")

	down.Store(false)
	// One panel at a time: the diff's answer grows the page, and a click
	// aimed before that lands where the files' Retry no longer is (a flake
	// under load).
	br.do("retry the diff", chromedp.Click(chromedp.CSS("#diff button.retry")))
	br.waitFor("the diff after Retry", `document.querySelector('#diff table.changed')`)
	br.do("retry the files", chromedp.Click(chromedp.CSS("#files button.retry")))
	br.waitFor("the files after Retry", `document.querySelector('#files a[href$="report.txt"]')`)
	br.clean("box page, panels retried")

	// A directory click that fails offers its own Retry, which opens that
	// directory.
	down.Store(true)
	br.do("open docs/ with the network down", chromedp.Click(chromedp.CSS(`#files a[hx-get*="docs"]`)))
	br.waitFor("the files panel says the gateway is unreachable", fmt.Sprintf(`document.querySelector('#files p.error') && document.querySelector('#files').innerText.includes(%q)`, unreachable))
	down.Store(false)
	br.do("retry docs/", chromedp.Click(chromedp.CSS("#files button.retry")))
	br.waitFor("docs/ after Retry", `document.querySelector('#files a[href$="guide.md"]')`)
	br.clean("files panel, directory retried")
}
