package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
)

// TestSizesAndExtendThroughTheConsole: the delegate form's memory and vCPU
// fields reach the core parsed (a bad number is the form again, 400, as
// typed, and nothing delegated); the box page shows the size and the
// deadline with its extend form, whose bad duration is a 400 and another
// user's box not found. The core's caps and its real timer are checked
// over the real core (sshd's TestSizesAndExtend, the access matrix).
func TestSizesAndExtendThroughTheConsole(t *testing.T) {
	c := newConsole(t, Options{})
	var mu sync.Mutex
	var got []fleet.DelegateRequest
	c.core.delegating = func(req fleet.DelegateRequest) error { mu.Lock(); got = append(got, req); mu.Unlock(); return nil }
	alice := c.login("alice")

	for _, bad := range []url.Values{{"memory": {"lots"}}, {"cpus": {"0"}}, {"cpus": {"1.5"}}} {
		form := url.Values{"task": {"t"}, "memory": {""}, "cpus": {""}}
		for k, v := range bad {
			form[k] = v
		}
		resp, body := send(t, alice, "POST", c.URL+"/delegate", form)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "want a positive whole number") ||
			!strings.Contains(body, `value="`+form.Get("memory")+`"`) {
			t.Errorf("delegate with %v: %d %s", bad, resp.StatusCode, body)
		}
	}
	resp, body := send(t, alice, "POST", c.URL+"/delegate", url.Values{"task": {"t"}, "memory": {"768"}, "cpus": {" 2 "}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delegate with a size: %d %s", resp.StatusCode, body)
	}
	mu.Lock()
	if len(got) != 1 || got[0].MemoryMiB != 768 || got[0].VCPUs != 2 {
		t.Errorf("the core got %+v", got)
	}
	mu.Unlock()
	if _, body := send(t, alice, "GET", c.URL+"/delegate", nil); !strings.Contains(body, `id="memory"`) || !strings.Contains(body, `id="cpus"`) {
		t.Errorf("the delegate form has no size fields: %s", body)
	}

	now := c.clock.Now()
	c.core.add("b1", "alice", "task", "", now)
	c.core.add("theirs", "admin", "task", "", now)
	c.core.mu.Lock()
	b := c.core.boxes["b1"]
	b.box.MemoryMiB, b.box.VCPUs, b.box.Deadline = 768, 2, now.Add(time.Hour)
	c.core.mu.Unlock()
	_, body = send(t, alice, "GET", c.URL+"/boxes/b1", nil)
	if !strings.Contains(body, `<dd id="size">768 MiB, 2 vCPUs</dd>`) || !strings.Contains(body, `id="deadline"`) || !strings.Contains(body, `id="extend-form"`) {
		t.Fatalf("box page: %s", body)
	}
	resp, body = send(t, alice, "POST", c.URL+"/boxes/b1/extend", url.Values{"by": {"30m"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/boxes/b1" {
		t.Fatalf("extend: %d %s", resp.StatusCode, body)
	}
	if b, _ := c.core.Get(context.Background(), cli, "b1"); !b.Deadline.Equal(now.Add(90 * time.Minute)) {
		t.Errorf("deadline after extend 30m: %v", b.Deadline)
	}
	for _, by := range []string{"", "soon", "-1h"} {
		if resp, body = send(t, alice, "POST", c.URL+"/boxes/b1/extend", url.Values{"by": {by}}); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "positive duration") {
			t.Errorf("extend by %q: %d %s", by, resp.StatusCode, body)
		}
	}
	for _, box := range []string{"nosuch", "theirs"} {
		if resp, _ = send(t, alice, "POST", c.URL+"/boxes/"+box+"/extend", url.Values{"by": {"1h"}}); resp.StatusCode != http.StatusNotFound {
			t.Errorf("extend box %s: %d", box, resp.StatusCode)
		}
	}
	if b, _ := c.core.Get(context.Background(), cli, "b1"); !b.Deadline.Equal(now.Add(90 * time.Minute)) {
		t.Errorf("refused extends moved the deadline: %v", b.Deadline)
	}
}
