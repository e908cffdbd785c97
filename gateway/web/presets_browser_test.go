package web

import (
	"context"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"

	"sbx.dev/sbx/keys"
)

// TestBrowserPresets sets the default egress presets on /settings in
// Chromium over the real core: the table lists the presets, a saved set
// comes back canonical with a flash, an unknown name shows the core's
// message with the field as typed; no CSP violation on the way.
func TestBrowserPresets(t *testing.T) {
	c := newFleetConsole(t)
	br := chromium(t)
	br.do("log in", chromedp.Navigate(c.link("alice")), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))
	br.do("settings", chromedp.Navigate(c.URL+"/settings"), chromedp.WaitVisible(chromedp.CSS("#presets-save")))
	var text string
	br.eval(`document.querySelector('#preset-npm').innerText`, &text)
	if want := "@npm\tregistry.npmjs.org registry.yarnpkg.com repo.yarnpkg.com\tnpm registry (npm, pnpm, Yarn)"; text != want {
		t.Errorf("the @npm row: %q, want %q", text, want)
	}
	br.do("save", chromedp.SendKeys(chromedp.CSS("#presets-default"), "NPM, @github"), chromedp.Click(chromedp.CSS("#presets-save")))
	br.waitFor("the saved set", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('Default presets: @npm @github') && document.querySelector('#presets-default').value === '@npm @github'`)
	br.clean("settings after saving presets")
	br.do("refused", chromedp.SetValue(chromedp.CSS("#presets-default"), "@npm @nope"), chromedp.Click(chromedp.CSS("#presets-save")))
	br.waitFor("the core's refusal", `document.querySelector('#presets-error')`)
	br.eval(`document.querySelector('#presets-error').innerText + '|' + document.querySelector('#presets-default').value`, &text)
	if text != "default presets: unknown preset @nope (known: @apt, @crates, @github, @go, @maven, @npm, @pypi, @rubygems): invalid|@npm @nope" {
		t.Errorf("after the refusal: %q", text)
	}
	br.clean("settings after a refused preset")
	v, err := c.fleet.Presets(context.Background(), keys.Actor{User: "alice", Role: keys.RoleOperator})
	if err != nil || !slices.Equal(v.Default, []string{"@npm", "@github"}) {
		t.Errorf("the core holds %v, %v", v.Default, err)
	}
}
