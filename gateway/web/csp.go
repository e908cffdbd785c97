package web

import (
	"io"
	"net/http"
	"sync"
	"time"

	"sbx.dev/sbx/audit"
)

// CSP violation reports: browsers POST them to /csp-report. Anyone can
// post, so a report is read under a small limit and logged under a budget
// of cspReportsPerMinute lines; the rest are counted and summarised.
const (
	cspReportLimit      = 16 << 10
	cspReportsPerMinute = 30
)

// cspLog is the report budget: a fixed window per minute.
type cspLog struct {
	mu      sync.Mutex
	window  time.Time
	n       int
	dropped int
}

// allow reports whether one more line may be logged now, and how many were
// dropped in the window that just closed.
func (l *cspLog) allow(now time.Time) (ok bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Minute {
		dropped, l.dropped = l.dropped, 0
		l.window, l.n = now, 0
	}
	if l.n >= cspReportsPerMinute {
		l.dropped++
		return false, dropped
	}
	l.n++
	return true, dropped
}

func (s *Server) cspReport(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cspReportLimit))
	if err != nil {
		writeError(w, r, http.StatusRequestEntityTooLarge, "report too large")
		return
	}
	ok, dropped := s.csp.allow(s.now())
	log := Logger(r.Context())
	if dropped > 0 {
		log.WarnContext(r.Context(), "csp reports dropped over the log budget", "dropped", dropped)
	}
	if ok {
		log.WarnContext(r.Context(), "csp violation", "client", s.clientAddr(r),
			"content_type", r.Header.Get("Content-Type"), "report", audit.Printable(string(body)))
	}
	w.WriteHeader(http.StatusNoContent)
}
