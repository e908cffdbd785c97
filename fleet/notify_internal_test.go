package fleet

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"sbx.dev/sbx/internal/netpolicy"
)

// The spec's example (standard-webhooks/spec/standard-webhooks.md):
// secret, id, timestamp and body, and the signature they make.
func TestSignWebhookSpecExample(t *testing.T) {
	key, err := webhookKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := signWebhook(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("signature %q, want %q", got, want)
	}
}

func TestWebhookKey(t *testing.T) {
	for secret, ok := range map[string]bool{
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 24)): true,
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 64)): true,
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 23)): false,
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65)): false,
		base64.StdEncoding.EncodeToString(make([]byte, 32)):            false,
		"whsec_not base64!": false,
		"whsec_":            false,
		"":                  false,
	} {
		_, err := webhookKey(secret)
		if (err == nil) != ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%q: %v, want ok=%v", secret, err, ok)
		}
		if err != nil && strings.Contains(err.Error(), strings.TrimPrefix(secret, "whsec_")) && len(secret) > 6 {
			t.Errorf("%q: the error quotes the secret: %v", secret, err)
		}
	}
}

func TestClassify(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		status    int
		retry     string
		delivered bool
		permanent bool
		after     time.Duration
	}{
		{200, "", true, false, 0},
		{204, "", true, false, 0},
		{301, "", false, true, 0},
		{400, "", false, true, 0},
		{404, "", false, true, 0},
		{410, "", false, true, 0},
		{408, "", false, false, 0},
		{429, "30", false, false, 30 * time.Second},
		{429, now.Add(2 * time.Minute).Format(http.TimeFormat), false, false, 2 * time.Minute},
		{503, "86400", false, false, time.Hour},
		{503, "soon", false, false, 0},
		{500, "-5", false, false, 0},
	} {
		o := classify(c.status, c.retry, now)
		if (o.err == "") != c.delivered || o.permanent != c.permanent || o.retryAfter != c.after || o.status != c.status {
			t.Errorf("%d %q: %+v", c.status, c.retry, o)
		}
	}
}

func TestBackoff(t *testing.T) {
	total := time.Duration(0)
	for a := 1; a < maxAttempts; a++ {
		base := retryBase << (a - 1)
		for range 50 {
			d := backoff(a, 0)
			if d < base*3/4 || d > base*5/4 {
				t.Fatalf("attempt %d: %v outside %v ±25%%", a, d, base)
			}
		}
		total += base
		if d := backoff(a, 3*time.Hour); d != 3*time.Hour {
			t.Errorf("Retry-After beyond the backoff: %v", d)
		}
	}
	if total < 50*time.Minute || total > 70*time.Minute {
		t.Errorf("six attempts span %v, want about an hour", total)
	}
}

func TestCheckChannelURL(t *testing.T) {
	trust, _ := netpolicy.ParseTrusts([]string{"10.9.0.0/16"})
	for raw, ok := range map[string]bool{
		"https://hooks.example.com/x":       true,
		"http://ntfy.example.com/topic":     true,
		"http://10.9.1.1:8080/t":            true,
		"http://10.8.1.1/t":                 false,
		"https://127.0.0.1/x":               false,
		"https://[::ffff:127.0.0.1]/x":      false,
		"http://169.254.169.254/":           false,
		"https://foo.localhost/x":           false,
		"https://u:p@example.com/":          false,
		"javascript:alert(1)":               false,
		"mailto:x@example.com":              false,
		"https:///nohost":                   false,
		"https://example.com/#f":            false,
		"https://exa mple.com/":             false,
		"https://example.com:99999/":        false,
		"//example.com/x":                   false,
		"https://example.com/" + "\x00":     false,
		"HTTPS://EXAMPLE.COM/upper":         true,
		"https://example.com/?token=abcdef": true,
	} {
		_, err := checkChannelURL(raw, trust)
		if (err == nil) != ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%q: %v, want ok=%v", raw, err, ok)
		}
	}
}

func TestCleanEvents(t *testing.T) {
	if got, _ := cleanEvents(nil); strings.Join(got, ",") != strings.Join(NotifyEvents, ",") {
		t.Errorf("default events %v", got)
	}
	if got, err := cleanEvents([]string{"done", " waiting", "done"}); err != nil || strings.Join(got, ",") != "waiting,done" {
		t.Errorf("%v %v", got, err)
	}
	for _, bad := range [][]string{{"digest"}, {"test"}, {""}, {"Done"}} {
		if _, err := cleanEvents(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// FuzzSignWebhook: every signature verifies with the official library and
// fails for any other body; every secret webhookKey takes, the library
// takes too.
func FuzzSignWebhook(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdef"), "msg_1", int64(1614265330), []byte(`{"type":"done"}`))
	f.Add([]byte("k"), "", int64(0), []byte{})
	f.Fuzz(func(t *testing.T, key []byte, id string, ts int64, body []byte) {
		if len(key) < 24 || len(key) > 64 || strings.ContainsAny(id, "\r\n\x00") || ts < 0 {
			return
		}
		secret := webhookSecretPrefix + base64.StdEncoding.EncodeToString(key)
		k, err := webhookKey(secret)
		if err != nil {
			t.Fatalf("webhookKey(%q): %v", secret, err)
		}
		sig := signWebhook(k, id, ts, body)
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		h.Set("webhook-signature", sig)
		if id != "" {
			if err := wh.VerifyIgnoringTimestamp(body, h); err != nil {
				t.Fatalf("the library refuses our signature: %v", err)
			}
		}
		if err := wh.VerifyIgnoringTimestamp(append(append([]byte{}, body...), 'x'), h); err == nil && id != "" {
			t.Fatal("a changed body verifies")
		}
	})
}

// FuzzChannelInput: no URL, secret or event list panics the checks, and
// an accepted URL is http(s) with a host the policy admits.
func FuzzChannelInput(f *testing.F) {
	f.Add("https://example.com/x", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "done,waiting", "webhook")
	f.Add("http://127.0.0.1/", "", "", "ntfy")
	f.Add("http://[::1]/", "tk_x", "lunch", "slack")
	f.Fuzz(func(t *testing.T, raw, secret, events, kind string) {
		if u, err := checkChannelURL(raw, nil); err == nil {
			if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || netpolicy.CheckUpstream(u, nil) != nil {
				t.Fatalf("accepted %q", raw)
			}
		} else if !errors.Is(err, ErrInvalid) {
			t.Fatalf("%q: %v", raw, err)
		}
		if s, _, err := checkSecret(kind, secret); err == nil && kind == ChannelWebhook {
			if _, err := webhookKey(s); err != nil {
				t.Fatalf("kept webhook secret %q fails: %v", s, err)
			}
		}
		if ev, err := cleanEvents(strings.Split(events, ",")); err == nil {
			for _, e := range ev {
				if !strings.Contains(strings.Join(NotifyEvents, ","), e) {
					t.Fatalf("event %q", e)
				}
			}
		}
		_ = headerSafe(raw)
	})
}
