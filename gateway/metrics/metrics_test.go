package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestScrape(t *testing.T) {
	m := New()
	m.Auth("ssh", ResultOK)
	m.Auth("http", ResultThrottled)
	m.SessionStarted()
	m.SessionStarted()
	m.SessionEnded()
	m.HTTPRequest("GET /healthz", 200)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`sbx_auth_attempts_total{front="ssh",result="ok"} 1`,
		`sbx_auth_attempts_total{front="http",result="throttled"} 1`,
		`sbx_ssh_sessions 1`,
		`sbx_http_requests_total{code="200",route="GET /healthz"} 1`,
		`go_build_info{`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	// Two registries never collide: no global state.
	New().Auth("ssh", ResultFail)
}
