package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
)

// The scripted core's side question answers with the question it got (as
// the script agent's side lane does); an empty one is refused like the
// core refuses it. Its allow-list edit takes what it is given: the core's
// validation is checked over the real core (TestBrowserBoxToolsRealFleet).

func (c *scriptedCore) Ask(_ context.Context, caller keys.Actor, name, question string, fresh bool) (redact.Safe, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.box(caller, name); err != nil {
		return redact.Safe{}, err
	}
	if strings.TrimSpace(question) == "" {
		return redact.Safe{}, fmt.Errorf("question is empty: %w", fleet.ErrInvalid)
	}
	return c.red.String(fmt.Sprintf("side answer (fresh %v) to: %s", fresh, question)), nil
}

func (c *scriptedCore) EditAllow(_ context.Context, caller keys.Actor, name string, add, remove []string) (fleet.Box, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return fleet.Box{}, err
	}
	if len(add) == 0 && len(remove) == 0 {
		return fleet.Box{}, fmt.Errorf("allow-list: name a domain to add or remove: %w", fleet.ErrInvalid)
	}
	b.box.Allow = append(slices.DeleteFunc(slices.Clone(b.box.Allow), func(d string) bool { return slices.Contains(remove, d) }), add...)
	return b.box, nil
}

// TestBoxToolsThroughTheConsole: the side question answers in the page
// (the panel alone to htmx), refusals keep their kind's status and what
// was typed, another user's box is not found; the allow-list editor adds
// and removes entries and refuses an empty change.
func TestBoxToolsThroughTheConsole(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("b1", "alice", "task", "acme/widget", c.clock.Now())
	c.core.add("theirs", "admin", "task", "", c.clock.Now())
	alice := c.login("alice")

	resp, body := send(t, alice, "POST", c.URL+"/boxes/b1/ask", url.Values{"question": {"what <b>is</b> here?"}, "fresh": {"1"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="ask-answer"`) ||
		!strings.Contains(body, "side answer (fresh true) to: what &lt;b&gt;is&lt;/b&gt; here?") || !strings.Contains(body, `id="log"`) {
		t.Fatalf("ask: %d %s", resp.StatusCode, body)
	}
	resp, body = send(t, alice, "POST", c.URL+"/boxes/b1/ask", url.Values{"question": {"again"}}, "HX-Request", "true")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(strings.TrimSpace(body), `<section class="side-question" id="ask">`) ||
		!strings.Contains(body, "side answer (fresh false) to: again") || strings.Contains(body, "<html") {
		t.Fatalf("ask over htmx: %d %s", resp.StatusCode, body)
	}
	resp, body = send(t, alice, "POST", c.URL+"/boxes/b1/ask", url.Values{"question": {"  "}, "fresh": {"1"}}, "HX-Request", "true")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `id="ask-error"`) || !strings.Contains(body, "question is empty") ||
		!strings.Contains(body, `checked`) {
		t.Fatalf("empty question: %d %s", resp.StatusCode, body)
	}
	for _, box := range []string{"nosuch", "theirs"} {
		resp, body = send(t, alice, "POST", c.URL+"/boxes/"+box+"/ask", url.Values{"question": {"q"}})
		if resp.StatusCode != http.StatusNotFound || strings.Contains(body, "side answer") {
			t.Fatalf("ask of box %s: %d %s", box, resp.StatusCode, body)
		}
	}

	// The allow-list: add two (comma or space), remove one, refuse nothing.
	resp, body = send(t, alice, "POST", c.URL+"/boxes/b1/allow", url.Values{"add": {"pypi.org, *.example.com"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/boxes/b1" {
		t.Fatalf("allow add: %d %s", resp.StatusCode, body)
	}
	resp, body = send(t, alice, "GET", c.URL+"/boxes/b1", nil)
	if !strings.Contains(body, "may reach: pypi.org *.example.com.") || !strings.Contains(body, `name="remove" value="pypi.org"`) {
		t.Fatalf("box page after allow add: %d %s", resp.StatusCode, body)
	}
	resp, _ = send(t, alice, "POST", c.URL+"/boxes/b1/allow", url.Values{"remove": {"pypi.org"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("allow remove: %d", resp.StatusCode)
	}
	if b, _ := c.core.Get(context.Background(), cli, "b1"); strings.Join(b.Allow, " ") != "*.example.com" {
		t.Fatalf("allow-list after remove: %q", b.Allow)
	}
	resp, body = send(t, alice, "POST", c.URL+"/boxes/b1/allow", url.Values{"add": {" "}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `id="allow-error"`) {
		t.Fatalf("allow with nothing: %d %s", resp.StatusCode, body)
	}
	for _, box := range []string{"nosuch", "theirs"} {
		if resp, _ = send(t, alice, "POST", c.URL+"/boxes/"+box+"/allow", url.Values{"add": {"pypi.org"}}); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("allow on box %s: %d", box, resp.StatusCode)
		}
	}
	if b, _ := c.core.Get(context.Background(), cli, "theirs"); len(b.Allow) != 0 {
		t.Fatalf("alice changed another user's allow-list: %q", b.Allow)
	}
}

// TestDelegateRepoRows: the delegate form's add and remove buttons answer
// the form with a row more or less, as typed, and delegate nothing; the
// submitted rows reach the core in order, empty rows left out.
func TestDelegateRepoRows(t *testing.T) {
	c := newConsole(t, Options{})
	var mu sync.Mutex
	var got []fleet.RepoSpec
	c.core.delegating = func(req fleet.DelegateRequest) error { mu.Lock(); got = req.Repos; mu.Unlock(); return nil }
	repos := func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprint(got) }
	alice := c.login("alice")
	form := url.Values{"task": {""}, "repo": {"acme/widget"}, "ref": {"v1"}, "op": {"add-repo"}}
	resp, body := send(t, alice, "POST", c.URL+"/delegate", form)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="repo" name="repo" value="acme/widget"`) ||
		!strings.Contains(body, `id="repo-2" name="repo" value=""`) || !strings.Contains(body, `id="remove-repo-2"`) {
		t.Fatalf("add a row: %d %s", resp.StatusCode, body)
	}
	form = url.Values{"task": {"t"}, "repo": {"acme/widget", "acme/gone", "acme/gadget"}, "ref": {"v1", "", "main"}, "op": {"remove-1"}}
	resp, body = send(t, alice, "POST", c.URL+"/delegate", form)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="repo-2" name="repo" value="acme/gadget"`) ||
		!strings.Contains(body, `id="ref-2" name="ref" value="main"`) || strings.Contains(body, "acme/gone") || strings.Contains(body, `id="repo-3"`) {
		t.Fatalf("remove a row: %d %s", resp.StatusCode, body)
	}
	for _, op := range []string{"remove-7", "remove-x", "explode"} {
		if resp, _ := send(t, alice, "POST", c.URL+"/delegate", url.Values{"task": {"t"}, "repo": {"a/b"}, "op": {op}}); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("op %s: %d, want 400", op, resp.StatusCode)
		}
	}
	if r := repos(); r != "[]" {
		t.Fatalf("an add or remove delegated %s", r)
	}
	// At the core's cap the form offers no more rows.
	many := url.Values{"task": {"t"}, "op": {"add-repo"}}
	for i := range fleet.MaxRepos {
		many.Add("repo", fmt.Sprintf("acme/r%d", i))
	}
	if _, body = send(t, alice, "POST", c.URL+"/delegate", many); strings.Contains(body, `id="add-repo"`) || strings.Contains(body, fmt.Sprintf(`id="repo-%d"`, fleet.MaxRepos+1)) {
		t.Fatalf("past the cap: %s", body)
	}
	form = url.Values{"task": {"t"}, "repo": {"acme/widget", "", "acme/gadget"}, "ref": {"v1", "", "main"}}
	if resp, body = send(t, alice, "POST", c.URL+"/delegate", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delegate: %d %s", resp.StatusCode, body)
	}
	if r := repos(); r != "[{acme/widget v1} {acme/gadget main}]" {
		t.Fatalf("the core got repos %s", r)
	}
}
