// Package metrics holds the gateway's Prometheus collectors in one registry
// owned by the process (no global registry), shared by every front.
package metrics

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Auth results counted by AuthAttempts.
const (
	ResultOK        = "ok"
	ResultFail      = "fail"
	ResultThrottled = "throttled"
)

// Metrics is the set of collectors the fronts update.
type Metrics struct {
	reg          *prometheus.Registry
	authAttempts *prometheus.CounterVec
	sshSessions  prometheus.Gauge
	httpRequests *prometheus.CounterVec
}

// New registers the gateway's collectors, the Go runtime's and build info.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		authAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbx_auth_attempts_total",
			Help: "Authentication attempts by front (ssh, http) and result (ok, fail, throttled).",
		}, []string{"front", "result"}),
		sshSessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sbx_ssh_sessions",
			Help: "Live SSH sessions.",
		}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbx_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
	}
	m.reg.MustRegister(m.authAttempts, m.sshSessions, m.httpRequests,
		collectors.NewBuildInfoCollector(), collectors.NewGoCollector())
	return m
}

// Auth counts one authentication attempt.
func (m *Metrics) Auth(front, result string) { m.authAttempts.WithLabelValues(front, result).Inc() }

// SessionStarted and SessionEnded track live SSH sessions.
func (m *Metrics) SessionStarted() { m.sshSessions.Inc() }

// SessionEnded is the counterpart of SessionStarted.
func (m *Metrics) SessionEnded() { m.sshSessions.Dec() }

// HTTPRequest counts one answered request. route is the mux pattern, never the
// raw path, so label cardinality stays bounded.
func (m *Metrics) HTTPRequest(route string, code int) {
	m.httpRequests.WithLabelValues(route, strconv.Itoa(code)).Inc()
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}
