package web

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"sbx.dev/sbx/keys"
)

// TestBrowserProfiles saves a project profile on /settings in Chromium
// over the real core (the row and the flash come back; Edit fills the form
// with it), a refused one shows the core's message with the form as typed,
// the delegate form offers the profile; no CSP violation on the way.
func TestBrowserProfiles(t *testing.T) {
	c := newFleetConsole(t)
	br := chromium(t)
	br.do("log in", chromedp.Navigate(c.link("alice")), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))
	br.do("settings", chromedp.Navigate(c.URL+"/settings"), chromedp.WaitVisible(chromedp.CSS("#profile-save")))
	br.do("save", chromedp.SendKeys(chromedp.CSS("#profile-name"), "node"), chromedp.SendKeys(chromedp.CSS("#profile-install"), "npm ci\nnpm run build"),
		chromedp.SendKeys(chromedp.CSS("#profile-env"), "NODE_ENV=test"), chromedp.SendKeys(chromedp.CSS("#profile-allow"), "@npm"),
		chromedp.SetValue(chromedp.CSS("#profile-agent"), "script"), chromedp.Click(chromedp.CSS("#profile-save")))
	br.waitFor("the saved profile", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('Profile node saved (user).') && document.querySelector('#profile-user-node')`)
	br.clean("settings after saving a profile")
	var text string
	br.eval(`document.querySelector('#profile-user-node').innerText`, &text)
	if !strings.Contains(text, "npm ci; npm run build") || !strings.Contains(text, "NODE_ENV=test") || !strings.Contains(text, "script") {
		t.Errorf("the row: %q", text)
	}
	br.do("edit", chromedp.Click(chromedp.CSS("#profile-user-node a")))
	br.waitFor("the form filled in", `document.querySelector('#profile-name').value === 'node' && document.querySelector('#profile-install').value === 'npm ci\nnpm run build'`)
	br.do("refused", chromedp.SetValue(chromedp.CSS("#profile-env"), "GH_TOKEN=x"), chromedp.Click(chromedp.CSS("#profile-save")))
	br.waitFor("the core's refusal", `document.querySelector('#profile-error')`)
	br.eval(`document.querySelector('#profile-error').innerText + '|' + document.querySelector('#profile-env').value`, &text)
	if !strings.Contains(text, "GH_TOKEN looks like it carries a secret") || !strings.HasSuffix(text, "|GH_TOKEN=x") {
		t.Errorf("after the refusal: %q", text)
	}
	br.clean("settings after a refused profile")
	p, err := c.fleet.Profile(context.Background(), keys.Actor{User: "alice", Role: keys.RoleOperator}, "node")
	if err != nil || len(p.Env) != 1 || p.Env[0] != "NODE_ENV=test" {
		t.Errorf("the core holds %+v, %v", p, err)
	}
	br.do("delegate form", chromedp.Navigate(c.URL+"/delegate"), chromedp.WaitVisible(chromedp.CSS("#profile")))
	br.eval(`[...document.querySelectorAll('#profile option')].map(o => o.value).join(',')`, &text)
	if text != ",node" {
		t.Errorf("the delegate form's profiles: %q", text)
	}
	br.clean("the delegate form")
}
