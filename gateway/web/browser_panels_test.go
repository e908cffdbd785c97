package web

import (
	"fmt"
	"testing"
	"time"

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
