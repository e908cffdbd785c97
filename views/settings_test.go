package views

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"sbx.dev/sbx/fleet/accounts"
)

// TestSettingsAccountIdentity: the accounts table shows whose each token is
// and when it expires, the expiry cell flagged a week before and after it;
// an account from before identities were kept shows "-" and says so.
func TestSettingsAccountIdentity(t *testing.T) {
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	acct := func(name, login string, expires time.Time) accounts.Account {
		return accounts.Account{Owner: "alice", Name: name, Host: "https://github.com", Masked: "ghp_…ABCD", Created: now.Add(-time.Hour),
			Identity: accounts.Identity{Login: login, Expires: expires}}
	}
	var buf bytes.Buffer
	err := SettingsPage(Page{Title: "Settings", User: "alice"}, Settings{Now: now, Accounts: []accounts.Account{
		acct("fresh", "alice-gh", now.Add(30*24*time.Hour)),
		acct("soon", "alice-gh", now.Add(3*24*time.Hour+time.Hour)),
		acct("gone", "alice-old", now.Add(-time.Hour)),
		acct("forever", "alice-gh", time.Time{}),
		acct("old", "", time.Time{}),
	}}).Render(context.Background(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for name, want := range map[string]string{
		"fresh":   `<td>alice-gh</td><td class="mono">ghp_…ABCD</td><td class="expiry">2027-01-01 08:00 UTC \(in 30 days\)</td>`,
		"soon":    `<td>alice-gh</td><td class="mono">ghp_…ABCD</td><td class="expiry soon">2026-12-05 09:00 UTC \(in 3 days: expires soon\)</td>`,
		"gone":    `<td>alice-old</td><td class="mono">ghp_…ABCD</td><td class="expiry expired">2026-12-02 07:00 UTC \(expired\)</td>`,
		"forever": `<td>alice-gh</td><td class="mono">ghp_…ABCD</td><td class="expiry">never \(or not reported\)</td>`,
		"old":     `<td>-</td><td class="mono">ghp_…ABCD</td><td class="expiry">unknown \(added before sbx checked tokens`,
	} {
		row := regexp.MustCompile(`(?s)<tr><td>` + name + `.*?</tr>`).FindString(page)
		if !regexp.MustCompile(want).MatchString(row) {
			t.Errorf("%s: row\n%s\nwant it to match %s", name, row, want)
		}
	}
}
