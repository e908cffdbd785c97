package web

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"sbx.dev/sbx/keys"
)

// TestBrowserPool drives the warm pool's page in Chromium over the real
// core and QEMU: the admin's navigation leads there, the form sets the
// target to 1, a machine boots and the page shows it ready; a size over
// the core's limit (sent past the field's own min/max) comes back with the
// core's message and the size as typed; 0 stops the machine. No CSP
// violation on any of it.
func TestBrowserPool(t *testing.T) {
	c := newFleetConsole(t)
	ctx := context.Background()
	br := chromium(t)
	br.do("log in", chromedp.Navigate(c.link("admin")), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))
	br.do("follow the navigation", chromedp.Click(chromedp.CSS(`nav a[href="/pool"]`)), chromedp.WaitVisible(chromedp.CSS("#pool-status")))
	var text string
	br.eval(`[...document.querySelectorAll('#pool-status td')].map(td => td.innerText).join(' ')`, &text)
	if text != "0 0 0" {
		t.Errorf("target, ready, booting shown: %q, want 0 0 0", text)
	}
	br.clean("pool page")

	br.do("set 1", chromedp.SetValue(chromedp.CSS("#pool-size"), ""), chromedp.SendKeys(chromedp.CSS("#pool-size"), "1"),
		chromedp.Click(chromedp.CSS("#pool-set")))
	br.waitFor("the flash", `document.querySelector('.flash') && document.querySelector('.flash').innerText.startsWith('Warm pool target set to 1') && document.querySelector('#pool-target').innerText === '1'`)
	br.clean("pool page after set")
	// A boot under load takes a while: reload until the machine is ready.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		br.do("reload", chromedp.Navigate(c.URL+"/pool"), chromedp.WaitVisible(chromedp.CSS("#pool-ready")))
		br.eval(`[...document.querySelectorAll('#pool-status td')].map(td => td.innerText).join(' ')`, &text)
		if text == "1 1 0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warm machine ready after 3 minutes: target, ready, booting %q", text)
		}
		time.Sleep(time.Second)
	}
	br.clean("pool page with a ready machine")
	br.screenshot("pool-ready.png")

	// The field's min and max stop a browser that validates; the core's own
	// refusal is what the page shows to one that does not.
	var off bool
	br.eval(`(document.querySelector('#pool-set').form.noValidate = true)`, &off)
	br.do("set 65", chromedp.SetValue(chromedp.CSS("#pool-size"), "65"), chromedp.Click(chromedp.CSS("#pool-set")))
	br.waitFor("the core's refusal", `document.querySelector('#pool-error')`)
	br.eval(`document.querySelector('#pool-error').innerText`, &text)
	if text != "pool size 65: want 0 to 64: invalid" {
		t.Errorf("refusal shown: %q", text)
	}
	br.eval(`document.querySelector('#pool-size').value`, &text)
	if text != "65" {
		t.Errorf("after the refusal the field holds %q, want 65 as typed", text)
	}
	br.clean("pool page after a refusal")

	br.do("set 0", chromedp.SetValue(chromedp.CSS("#pool-size"), "0"), chromedp.Click(chromedp.CSS("#pool-set")))
	// The answer waits for the surplus machine to stop.
	br.waitForLong("the flash", `document.querySelector('.flash') && document.querySelector('.flash').innerText.startsWith('Warm pool target set to 0: 0 ready')`, 3*time.Minute)
	st, err := c.fleet.Pool(ctx, keys.Actor{User: "admin", Role: keys.RoleAdmin})
	if err != nil || st.Target != 0 || st.Ready != 0 {
		t.Errorf("the core's pool after setting 0: %+v, %v", st, err)
	}
	br.clean("pool page after set 0")
}
