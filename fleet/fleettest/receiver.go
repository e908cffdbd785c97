package fleettest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Receiver is a real HTTP server that takes notifications of one kind and
// checks each against that kind's published format, independently of
// sbx's code: a webhook's Standard Webhooks signature with the official Go
// library, a Slack incoming webhook's {"text": …} body, an ntfy publish
// (docs.ntfy.sh/publish: POST /<topic>, the message as the body, Title,
// Priority 1-5, Tags, Click headers, an access token as Bearer). A real
// ntfy server is not available on these machines (its module is refused by
// the Go proxy and Debian has no package), so this checks its documented
// format.
type Receiver struct {
	*httptest.Server
	Kind string

	mu      sync.Mutex
	secret  string // webhook: the whsec_ secret; ntfy: the expected token
	got     []Received
	respond func(n int) (int, string)
	notify  chan struct{}
}

// Received is one request a Receiver took.
type Received struct {
	Header http.Header
	Path   string
	Body   []byte
	// Bad says how the request broke its kind's format ("" when it did
	// not).
	Bad string
	// Note is a webhook's JSON body (nil for other kinds).
	Note map[string]any
	// Text is the human text: Slack's text, ntfy's Title and body.
	Text string
}

// NewReceiver starts a receiver of kind ("webhook", "slack", "ntfy") that
// answers 200 until told otherwise.
func NewReceiver(t testing.TB, kind string) *Receiver {
	r := &Receiver{Kind: kind, notify: make(chan struct{}, 1)}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

// URL is where a channel of the receiver's kind points.
func (r *Receiver) URL() string {
	switch r.Kind {
	case "ntfy":
		return r.Server.URL + "/sbx-alerts"
	case "slack":
		return r.Server.URL + "/services/T000/B000/xoxsecretpath"
	}
	return r.Server.URL + "/hooks/sbx"
}

// HostPort is the receiver's address, for net.private_upstreams.
func (r *Receiver) HostPort() string {
	u, _ := url.Parse(r.Server.URL)
	return u.Host
}

// SetSecret is the webhook secret to verify with, or the ntfy token to
// expect.
func (r *Receiver) SetSecret(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secret = s
}

// Respond sets the answer to the n-th request (1-based): a status and a
// Retry-After value ("" for none).
func (r *Receiver) Respond(fn func(n int) (status int, retryAfter string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.respond = fn
}

// All is every request so far.
func (r *Receiver) All() []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Received(nil), r.got...)
}

// Wait waits up to a minute for a request that pred accepts.
func (r *Receiver) Wait(t testing.TB, what string, pred func(Received) bool) Received {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		for _, g := range r.All() {
			if pred(g) {
				return g
			}
		}
		select {
		case <-r.notify:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s receiver: no %s; got %d requests: %s", r.Kind, what, len(r.All()), r.summary())
			return Received{}
		}
	}
}

func (r *Receiver) summary() string {
	var b strings.Builder
	for _, g := range r.All() {
		fmt.Fprintf(&b, "\n  %s bad=%q %s", g.Path, g.Bad, g.Body)
	}
	return b.String()
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	g := Received{Header: req.Header.Clone(), Path: req.URL.Path, Body: body}
	r.mu.Lock()
	secret := r.secret
	r.mu.Unlock()
	g.Bad = r.check(req, body, secret, &g)
	r.mu.Lock()
	r.got = append(r.got, g)
	n := len(r.got)
	respond := r.respond
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	status, retry := http.StatusOK, ""
	if respond != nil {
		status, retry = respond(n)
	}
	if retry != "" {
		w.Header().Set("Retry-After", retry)
	}
	w.WriteHeader(status)
	if r.Kind == "ntfy" && status == http.StatusOK {
		_, _ = fmt.Fprintf(w, `{"id":"m%d","event":"message","topic":"sbx-alerts"}`, n)
	}
}

func (r *Receiver) check(req *http.Request, body []byte, secret string, g *Received) string {
	if req.Method != http.MethodPost {
		return "method " + req.Method
	}
	switch r.Kind {
	case "webhook":
		if secret == "" {
			return "no secret to verify with"
		}
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return "secret: " + err.Error()
		}
		// The timestamp is the core's clock, which tests move.
		if err := wh.VerifyIgnoringTimestamp(body, req.Header); err != nil {
			return "signature: " + err.Error()
		}
		if _, err := strconv.ParseInt(req.Header.Get("webhook-timestamp"), 10, 64); err != nil {
			return "timestamp: " + err.Error()
		}
		if !strings.HasPrefix(req.Header.Get("Content-Type"), "application/json") {
			return "content type " + req.Header.Get("Content-Type")
		}
		if err := json.Unmarshal(body, &g.Note); err != nil {
			return "body: " + err.Error()
		}
	case "slack":
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			return "body: " + err.Error()
		}
		text, ok := m["text"].(string)
		if !ok || text == "" || len(m) != 1 {
			return fmt.Sprintf("want {\"text\": \"…\"}, got %s", body)
		}
		g.Text = text
	case "ntfy":
		topic := strings.TrimPrefix(req.URL.Path, "/")
		if topic == "" || strings.Contains(topic, "/") {
			return "path " + req.URL.Path + ": want /<topic>"
		}
		if len(body) == 0 || len(body) > 4096 {
			return fmt.Sprintf("message of %d bytes (want 1 to 4096)", len(body))
		}
		if p, err := strconv.Atoi(req.Header.Get("Priority")); err != nil || p < 1 || p > 5 {
			return "priority " + req.Header.Get("Priority")
		}
		if req.Header.Get("Title") == "" {
			return "no title"
		}
		for _, tag := range strings.Split(req.Header.Get("Tags"), ",") {
			if tag == "" || strings.ContainsAny(tag, " \t") {
				return "tags " + req.Header.Get("Tags")
			}
		}
		if c := req.Header.Get("Click"); c != "" {
			if u, err := url.Parse(c); err != nil || u.Scheme == "" {
				return "click " + c
			}
		}
		if secret != "" && req.Header.Get("Authorization") != "Bearer "+secret {
			return "authorization " + req.Header.Get("Authorization")
		}
		g.Text = req.Header.Get("Title") + "\n" + string(body)
	default:
		return "unknown receiver kind " + r.Kind
	}
	return ""
}
