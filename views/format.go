package views

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
)

// Page is what every page's frame needs.
type Page struct {
	Title string
	User  string // empty: not logged in (no nav)
	Admin bool
	// Flash is a one-line notice (e.g. "box destroyed"); Error one in red.
	Flash string
	Error string
}

// BoxURL is the path of a box's page, with suffix appended.
func BoxURL(box, suffix string) string {
	return "/boxes/" + url.PathEscape(box) + suffix
}

// ago says how long ago t was, roughly; "—" for the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "in " + span(-d)
	case d < 5*time.Second:
		return "just now"
	}
	return span(d) + " ago"
}

func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func size(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// stateClass is the CSS class of a state badge.
func stateClass(s fleet.State) string { return "state state-" + string(s) }

func repoNames(b fleet.Box) string {
	names := make([]string, len(b.Repos))
	for i, r := range b.Repos {
		names[i] = r.Name
	}
	return strings.Join(names, ", ")
}

// canAddRepo: a repository goes into a box whose machine runs or sleeps
// (the core wakes it), below delegate's limit.
func canAddRepo(b fleet.Box) bool {
	switch b.State {
	case fleet.Running, fleet.Waiting, fleet.Done, fleet.Sleeping:
		return len(b.Repos) < fleet.MaxRepos
	}
	return false
}

// fleetEventsURL is the fleet's event stream, with the page's search.
func fleetEventsURL(q string) string {
	if q == "" {
		return "/events"
	}
	return "/events?q=" + url.QueryEscape(q)
}

// firstLine shortens a task for the fleet table.
func firstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// canAct lists what the state allows, for the action buttons.
// hasMachine: the box runs a machine its diff and files can be read from
// (the states the core's reads accept); the others answer "conflict".
func hasMachine(b fleet.Box) bool {
	return b.State == fleet.Running || b.State == fleet.Waiting || b.State == fleet.Done
}

func canSleep(b fleet.Box) bool { return hasMachine(b) }

// The box page's panels that read from the machine.
const (
	panelDiff  = "diff"
	panelFiles = "files"
)

// unavailable says why a panel of a box with no machine shows nothing, and
// what to do, instead of a request that can only fail.
func unavailable(b fleet.Box, panel string) string {
	what, none := "The diff is", "No diff"
	if panel == panelFiles {
		what, none = "Files are", "No files"
	}
	switch b.State {
	case fleet.Sleeping:
		return what + " unavailable while the box is sleeping — wake it."
	case fleet.Creating:
		return none + " yet: the box is still being set up — reload when it runs."
	case fleet.Failed:
		if r := b.Reason.String(); r != "" {
			return none + ": the box failed: " + r
		}
		return none + ": the box failed."
	}
	return none + ": the box is " + string(b.State) + "."
}
func canWake(b fleet.Box) bool { return b.State == fleet.Sleeping }

func joinPath(dir, name string) string {
	if dir == "" || dir == "." {
		return name
	}
	return strings.TrimSuffix(dir, "/") + "/" + name
}

func parentPath(dir string) string {
	dir = strings.TrimSuffix(dir, "/")
	i := strings.LastIndexByte(dir, '/')
	if i < 0 {
		return ""
	}
	return dir[:i]
}

func filesURL(box, path string) string {
	return BoxURL(box, "/files?path="+url.QueryEscape(path))
}

func artifactURL(box, path string) string {
	return BoxURL(box, "/artifact?path="+url.QueryEscape(path))
}

func statusText(code int) string {
	switch code {
	case 400:
		return "Bad request"
	case 403:
		return "Not allowed"
	case 404:
		return "Not found"
	case 409:
		return "Not now"
	case 413:
		return "Too large"
	case 429:
		return "Too many requests"
	case 503:
		return "Unavailable"
	}
	if code >= 500 {
		return "Something failed"
	}
	return "Error"
}

func accountURL(name, suffix string) string {
	return "/settings/accounts/" + url.PathEscape(name) + suffix
}

// accountLogin is whose the token is, "-" for an account added before
// sbx kept the host's answer.
func accountLogin(id accounts.Identity) string {
	if !id.Checked() {
		return "-"
	}
	return id.Login
}

// expiryClass flags a token past its expiry (error) or within a week of
// it (warn).
func expiryClass(id accounts.Identity, now time.Time) string {
	switch {
	case id.Expired(now):
		return "expiry expired"
	case id.ExpiresSoon(now):
		return "expiry soon"
	}
	return "expiry"
}

func mcpURL(name, suffix string) string {
	return "/settings/mcp/" + url.PathEscape(name) + suffix
}

// pushable names the box's repositories it may push (pull requests).
func pushable(b fleet.Box) []string {
	var out []string
	for _, r := range b.Repos {
		if r.Push {
			out = append(out, r.Name)
		}
	}
	return out
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// prState is a pull request's state, a draft said.
func prState(p fleet.PR) string {
	if p.Draft && p.State == "open" {
		return "open (draft)"
	}
	return p.State
}

func checksText(outcome string) string {
	if outcome == "" {
		return "none"
	}
	return outcome
}

func reviewText(r string) string { return strings.ReplaceAll(r, "_", " ") }

// shownRepoRows is the delegate form's rows: at least one.
func shownRepoRows(rows []RepoRow) []RepoRow {
	if len(rows) == 0 {
		return []RepoRow{{}}
	}
	return rows
}

// rowID is the id of a delegate form row's element: the first row's
// bare (prefix), the next ones numbered from 2 (prefix-2, …).
func rowID(prefix string, i int) string {
	if i == 0 {
		return prefix
	}
	return prefix + "-" + strconv.Itoa(i+1)
}
