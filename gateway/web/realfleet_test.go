package web

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/testutil"
)

// TestBrowserRealFleet drives the console in Chromium against the real
// core: a QEMU box from the Debian agent image, the script agent, a git
// repository over smart HTTP. Delegate through the form, watch the log
// arrive live, answer the agent's question, see the diff, download the
// file it changed, destroy the box.
func TestBrowserRealFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a QEMU box")
	}
	ctx := context.Background()
	h := fleettest.New(t, fleettest.Options{MaxBoxes: 2})
	svc, al, st, logger, core, token := h.Keys, h.Audit, h.Store, h.Logger, h.Fleet, h.Token
	alice := h.Actors["alice"]
	ts := httptest.NewServer(New(Options{Identity: svc, Logger: logger, Audit: al, Fleet: core,
		Sessions: st.SessionStore(nil), Throttle: throttle.NewAuth(20, 10*time.Minute, nil)}))
	t.Cleanup(ts.Close)
	link, _, err := svc.CreateLoginLink(ctx, cli, "alice")
	if err != nil {
		t.Fatal(err)
	}

	br := chromium(t)
	br.do("log in", chromedp.Navigate(ts.URL+"/login/"+link), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))
	br.clean("empty fleet")
	br.do("delegate", chromedp.Navigate(ts.URL+"/delegate"), chromedp.WaitVisible(chromedp.CSS("#task")))
	br.clean("delegate form with an account")
	br.do("fill", chromedp.SendKeys(chromedp.CSS("#task"), "add a word to the README"),
		chromedp.SendKeys(chromedp.CSS("#repo"), "acme/widget"),
		chromedp.SendKeys(chromedp.CSS("#setup"), "echo set up by $(id -un)"),
		chromedp.SetValue(chromedp.CSS("#agent"), "script"))
	// The form's POST answers at the first step: the browser follows the
	// steps (a boot under TCG) until the agent has started, then the box.
	br.do("submit", chromedp.Click(chromedp.CSS("#delegate")))
	br.waitForLong("the delegation's steps", `location.pathname.startsWith('/delegate/') && document.querySelector('#step-1') && document.querySelector('#step-1').innerText.includes('cloning acme/widget…')`, time.Minute)
	br.clean("delegation steps")
	dctx, cancel := context.WithTimeout(br.ctx, 3*time.Minute)
	defer cancel()
	if err := chromedp.Do(dctx, chromedp.WaitVisible(chromedp.CSS("#log"))); err != nil {
		t.Fatalf("delegate: %v", err)
	}
	loc := br.location()
	name := strings.TrimPrefix(loc, ts.URL+"/boxes/")
	if name == loc || name == "" {
		t.Fatalf("after delegate at %s", loc)
	}
	br.waitForLong("the question in the live log", `document.querySelector('#log').innerText.includes('Which word should I add')`, 2*time.Minute)
	br.waitForLong("the root setup step in the live log", `document.querySelector('#log').innerText.includes('set up by root')`, time.Minute)
	br.waitForLong("the question panel", `document.querySelector('#question') && document.querySelector('input[name=mode][value=answer]')`, time.Minute)
	br.clean("box waiting")
	br.screenshot("real-box-question.png")
	br.do("answer", chromedp.SendKeys(chromedp.CSS("#answer-text"), "banana"), chromedp.Click(chromedp.CSS("#answer-send")))
	br.waitForLong("the answer's flash", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('Answer sent')`, 2*time.Minute)
	br.waitForLong("the agent's commit in the live log", `document.querySelector('#log').innerText.includes('committed')`, 2*time.Minute)
	br.waitForLong("done", `document.querySelector('#state') && document.querySelector('#state').innerText === 'done'`, time.Minute)
	var logText string
	br.eval(`document.querySelector('#log').innerText`, &logText)
	if strings.Contains(logText, token) {
		t.Errorf("the account token reached the browser")
	}
	// The diff and files load when the page does: reload now it is done.
	br.do("reload", chromedp.Navigate(ts.URL+"/boxes/"+name), chromedp.WaitVisible(chromedp.CSS("#log")))
	br.waitForLong("the diff", `document.querySelector('#diff .patch') && document.querySelector('#diff .patch').innerText.includes('+banana')`, time.Minute)
	br.waitForLong("the files", `document.querySelector('#files a[href$="path=widget"]')`, time.Minute)
	br.do("open widget/", chromedp.Click(chromedp.CSS(`#files a[href$="path=widget"]`)))
	br.waitFor("README.md", `document.querySelector('#files a[href$="README.md"]')`)
	br.do("download", chromedp.Click(chromedp.CSS(`#files a[href$="README.md"]`)))
	if got := waitFile(t, filepath.Join(br.download, "README.md")); !strings.Contains(got, "banana") {
		t.Errorf("downloaded README.md: %q", got)
	}
	br.clean("box done")
	br.screenshot("real-box-done.png")
	// Destroy stops the machine: under TCG on a loaded host that took 30-60 s.
	xctx, xcancel := context.WithTimeout(br.ctx, 3*time.Minute)
	defer xcancel()
	// A destroy slower than a minute is a hang worth diagnosing: dump every
	// goroutine of the gateway and the test.
	hang := time.AfterFunc(time.Minute, func() {
		var buf strings.Builder
		pprof.Lookup("goroutine").WriteTo(&buf, 1)
		t.Logf("destroy still running after 1m; goroutines:\n%s", buf.String())
	})
	defer hang.Stop()
	// From the box page afresh: the files panel the download came from may
	// have been swapped out by then (seen under load: the button was gone).
	br.do("back to the box", chromedp.Navigate(ts.URL+"/boxes/"+name), chromedp.WaitVisible(chromedp.CSS(`form[action$="/destroy"] button`)))
	if err := chromedp.Do(xctx, chromedp.Click(chromedp.CSS(`form[action$="/destroy"] button`))); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	br.waitForLong("the fleet page", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('destroyed')`, 3*time.Minute)
	if _, err := core.Get(ctx, alice, name); err == nil {
		t.Errorf("box %s still there after destroy", name)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveGuestBinary()
	os.Exit(code)
}
