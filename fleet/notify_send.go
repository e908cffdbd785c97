package fleet

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sbx.dev/sbx/internal/netpolicy"
)

// Sending one delivery: the request each kind of channel wants, the
// Standard Webhooks signature, the transport that dials only admitted
// addresses, and what the receiver's answer means for the next attempt.

// notification is the JSON body of a webhook delivery and what every kind
// renders from. Every text in it passed the redactor.
type notification struct {
	Type     string    `json:"type"`
	Box      string    `json:"box,omitempty"`
	Owner    string    `json:"owner"`
	Title    string    `json:"title,omitempty"`
	State    string    `json:"state,omitempty"`
	Question string    `json:"question,omitempty"`
	Note     string    `json:"note,omitempty"`
	URL      string    `json:"url,omitempty"`
	At       time.Time `json:"at"`
	Digest   *Digest   `json:"digest,omitempty"`
}

// Digest is a user's day: what ran, what waits, what merged.
type Digest struct {
	Since   time.Time   `json:"since"`
	Created []DigestBox `json:"created"`
	Done    []DigestBox `json:"done"`
	Failed  []DigestBox `json:"failed"`
	Waiting []DigestBox `json:"waiting"`
	// Merged lists the pull requests merged; MergedNote says why it is
	// empty when the gateway has no pull-request data.
	Merged     []string `json:"merged"`
	MergedNote string   `json:"merged_note,omitempty"`
}

// DigestBox is one box in a digest.
type DigestBox struct {
	Box   string `json:"box"`
	Title string `json:"title"`
	State string `json:"state"`
}

const webhookSecretPrefix = "whsec_"

// webhookKey is the HMAC key of a Standard Webhooks secret: the base64
// after "whsec_", 24 to 64 bytes.
func webhookKey(secret string) ([]byte, error) {
	rest, ok := strings.CutPrefix(secret, webhookSecretPrefix)
	if !ok {
		return nil, fmt.Errorf("webhook secret: want whsec_ and base64 (or none: sbx makes one): %w", ErrInvalid)
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: the part after whsec_ is not standard base64: %w", ErrInvalid)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("webhook secret: %d bytes of key (want 24 to 64): %w", len(key), ErrInvalid)
	}
	return key, nil
}

// signWebhook is the Standard Webhooks signature of a message:
// "v1," and the base64 HMAC-SHA256 of "id.timestamp.body" under the key.
func signWebhook(key []byte, id string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte("."))
	m.Write([]byte(strconv.FormatInt(ts, 10)))
	m.Write([]byte("."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// messageID is a delivery's webhook-id: the same on every attempt, so a
// receiver can drop a repeat.
func messageID(owner, channel, key string) string {
	h := sha256.Sum256([]byte(owner + "\x00" + channel + "\x00" + key))
	return "msg_" + hex.EncodeToString(h[:12])
}

// render is the request a channel of kind gets for n.
func render(oc openChannel, n notification, id string, now time.Time) (*http.Request, error) {
	var body []byte
	h := http.Header{}
	switch oc.Kind {
	case ChannelWebhook:
		b, err := json.Marshal(n)
		if err != nil {
			return nil, err
		}
		body = b
		key, err := webhookKey(oc.secret)
		if err != nil {
			return nil, err
		}
		ts := now.Unix()
		h.Set("Content-Type", "application/json")
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		h.Set("webhook-signature", signWebhook(key, id, ts, body))
	case ChannelNtfy:
		// docs.ntfy.sh/publish: the message is the body; title, priority
		// (1-5), tags (emoji short codes) and a click URL are headers.
		body = []byte(messageText(n))
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Title", headerSafe(titleLine(n)))
		h.Set("Priority", strconv.Itoa(ntfyPriority(n.Type)))
		h.Set("Tags", ntfyTags(n.Type))
		if n.URL != "" {
			h.Set("Click", n.URL)
		}
		if oc.secret != "" {
			h.Set("Authorization", "Bearer "+oc.secret)
		}
	case ChannelSlack:
		b, err := json.Marshal(map[string]string{"text": titleLine(n) + "\n" + messageText(n)})
		if err != nil {
			return nil, err
		}
		body = b
		h.Set("Content-Type", "application/json")
	default:
		return nil, fmt.Errorf("channel kind %q: %w", oc.Kind, ErrInvalid)
	}
	if len(body) > maxPayload {
		return nil, fmt.Errorf("notification of %d bytes (max %d): %w", len(body), maxPayload, ErrLimit)
	}
	req, err := http.NewRequest(http.MethodPost, oc.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("channel %q: bad URL: %w", oc.Name, ErrInvalid)
	}
	req.Header = h
	req.Header.Set("User-Agent", "sbx-notify/1")
	return req, nil
}

// headerSafe keeps a header value to one line of printable text.
func headerSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return truncate(s, 250)
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// titleLine is a notification's one-line summary.
func titleLine(n notification) string {
	name := n.Box
	if n.Title != "" {
		name = n.Box + " (" + n.Title + ")"
	}
	switch n.Type {
	case NotifyWaiting:
		return "sbx: " + name + " is waiting for an answer"
	case NotifyDone:
		return "sbx: " + name + " is done"
	case NotifyFailed:
		return "sbx: " + name + " failed"
	case NotifyPRChecks:
		return "sbx: " + name + ": pull request checks finished"
	case NotifyExpiring:
		return "sbx: " + name + " will be destroyed soon (sleep TTL)"
	case NotifyDigest:
		return "sbx: your daily digest"
	case NotifyTest:
		return "sbx: test notification"
	}
	return "sbx: " + n.Type
}

// messageText is a notification's body for a human.
func messageText(n notification) string {
	var b strings.Builder
	switch {
	case n.Digest != nil:
		d := n.Digest
		fmt.Fprintf(&b, "Since %s UTC:\n", d.Since.UTC().Format("2006-01-02 15:04"))
		section := func(label string, boxes []DigestBox) {
			fmt.Fprintf(&b, "%s: %d\n", label, len(boxes))
			for _, x := range boxes {
				fmt.Fprintf(&b, "  %s %s\n", x.Box, x.Title)
			}
		}
		section("created", d.Created)
		section("done", d.Done)
		section("failed", d.Failed)
		section("waiting", d.Waiting)
		fmt.Fprintf(&b, "merged: %d\n", len(d.Merged))
		for _, m := range d.Merged {
			fmt.Fprintf(&b, "  %s\n", m)
		}
		if d.MergedNote != "" {
			fmt.Fprintf(&b, "  (%s)\n", d.MergedNote)
		}
	case n.Question != "":
		b.WriteString(n.Question)
	case n.Note != "":
		b.WriteString(n.Note)
	default:
		b.WriteString("state: " + n.State)
	}
	if n.URL != "" {
		b.WriteString("\n" + n.URL)
	}
	return b.String()
}

func ntfyPriority(event string) int {
	switch event {
	case NotifyWaiting, NotifyFailed, NotifyExpiring:
		return 4
	case NotifyDigest, NotifyTest:
		return 2
	}
	return 3
}

func ntfyTags(event string) string {
	switch event {
	case NotifyWaiting:
		return "question,sbx"
	case NotifyDone:
		return "white_check_mark,sbx"
	case NotifyFailed:
		return "x,sbx"
	case NotifyPRChecks:
		return "traffic_light,sbx"
	case NotifyExpiring:
		return "hourglass,sbx"
	}
	return "bell,sbx"
}

// outcome is what one attempt came to.
type outcome struct {
	status     int
	err        string // "" when delivered
	permanent  bool
	retryAfter time.Duration
}

// checkedTransport dials only the addresses the policy admits: every
// address a name resolves to is judged at the moment it is dialed, so a
// second DNS answer cannot point a send at the gateway's own network. It
// uses no proxy and keeps no connection.
func checkedTransport(private []netpolicy.Trust) *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("notify: dial %s: not an address", address)
		}
		if r := netpolicy.Refused(ap, private); r != "" {
			return fmt.Errorf("notify: refused: %s (the gateway notifies public addresses only)", r)
		}
		return nil
	}}
	return &http.Transport{
		DialContext:            d.DialContext,
		TLSHandshakeTimeout:    5 * time.Second,
		ResponseHeaderTimeout:  sendTimeout,
		MaxResponseHeaderBytes: 16 << 10,
		DisableKeepAlives:      true,
		ForceAttemptHTTP2:      true,
	}
}

// newClient is the notifier's HTTP client: bounded in time, never
// following a redirect.
func newClient(rt http.RoundTripper) *http.Client {
	return &http.Client{Transport: rt, Timeout: sendTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// send makes one attempt at delivering n to oc.
func (n *notifier) send(ctx context.Context, oc openChannel, note notification, id string) outcome {
	req, err := render(oc, note, id, n.now())
	if err != nil {
		return outcome{err: err.Error(), permanent: true}
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	resp, err := n.client.Do(req.WithContext(ctx))
	if err != nil {
		return outcome{err: sendError(err)}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return classify(resp.StatusCode, resp.Header.Get("Retry-After"), n.now())
}

// sendError is a failed request's reason without its URL (a Slack URL's
// path, an ntfy topic, a query are credentials of a kind).
func sendError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer within " + sendTimeout.String()
	}
	return truncate(err.Error(), 300)
}

// classify reads a receiver's answer: 2xx delivered; 408, 429 and 5xx are
// worth another attempt (after Retry-After if it says); anything else (a
// redirect, another 4xx) is given up at once.
func classify(status int, retryAfter string, now time.Time) outcome {
	o := outcome{status: status}
	switch {
	case status >= 200 && status < 300:
		return o
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
		o.err = fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
		o.retryAfter = parseRetryAfter(retryAfter, now)
	case status >= 300 && status < 400:
		o.err = fmt.Sprintf("HTTP %d %s: redirects are not followed (give the final URL)", status, http.StatusText(status))
		o.permanent = true
	default:
		o.err = fmt.Sprintf("HTTP %d %s: the receiver refused it", status, http.StatusText(status))
		o.permanent = true
	}
	return o
}

// parseRetryAfter reads Retry-After (seconds or an HTTP date), bounded by
// maxRetryAfter; 0 when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.Atoi(v); err == nil {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(0, min(d, maxRetryAfter))
}

// backoff is the wait after the attempts-th failed attempt: retryBase
// doubling each time, ±25% jitter, at least what the receiver asked for.
func backoff(attempts int, retryAfter time.Duration) time.Duration {
	d := retryBase << max(0, attempts-1)
	jitter := time.Duration(rand.Int64N(int64(d)/2+1)) - d/4
	return max(d+jitter, retryAfter)
}
