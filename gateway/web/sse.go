package web

import (
	"bytes"
	"context"
	"errors"
	"html"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/views"
)

// Server-sent events: the fleet table and a box's status and log, live.
// The log events carry the chunk's raw offset as their id, so a browser
// that reconnects sends Last-Event-ID and resumes exactly where it was.

// SSEHeartbeat keeps idle streams open through proxies.
const SSEHeartbeat = 25 * time.Second

// fleetDebounce coalesces bursts of events into one table render.
const fleetDebounce = 200 * time.Millisecond

// sse is one open event stream.
type sse struct {
	w  io.Writer
	rc *http.ResponseController
	b  bytes.Buffer
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// Streams outlive any write deadline the server sets for pages.
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.Flush()
	return &sse{w: w, rc: rc}
}

// send writes one event; data may span lines (each becomes a data: line).
func (e *sse) send(event, id, data string) error {
	e.b.Reset()
	if id != "" {
		e.b.WriteString("id: " + id + "\n")
	}
	e.b.WriteString("event: " + event + "\n")
	for line := range strings.SplitSeq(data, "\n") {
		e.b.WriteString("data: ")
		e.b.WriteString(strings.TrimSuffix(line, "\r"))
		e.b.WriteByte('\n')
	}
	e.b.WriteByte('\n')
	if _, err := e.w.Write(e.b.Bytes()); err != nil {
		return err
	}
	return e.rc.Flush()
}

func (e *sse) comment() error {
	if _, err := io.WriteString(e.w, ": keep-alive\n\n"); err != nil {
		return err
	}
	return e.rc.Flush()
}

func renderString(ctx context.Context, c templ.Component) (string, error) {
	var b strings.Builder
	err := c.Render(ctx, &b)
	return b.String(), err
}

// fleetEvents re-renders the fleet table when a box the caller sees changes.
func (s *Server) fleetEvents(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	ctx := r.Context()
	q := fleetQuery(r)
	events := core.Events(ctx, c.actor())
	out := startSSE(w)
	beat := time.NewTicker(SSEHeartbeat)
	defer beat.Stop()
	// The rows start with a refresh: a change between rendering the page
	// and subscribing here is otherwise missed until the next one.
	debounce := time.After(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		case _, ok := <-events:
			if !ok {
				return
			}
			if debounce == nil {
				debounce = time.After(fleetDebounce)
			}
		case <-debounce:
			debounce = nil
			list, err := core.List(ctx, c.actor())
			if err != nil {
				Logger(ctx).WarnContext(ctx, "fleet stream", "err", err)
				continue
			}
			body, err := renderString(ctx, views.FleetRows(fleet.FilterBoxes(list, q), q, s.now()))
			if err != nil || out.send("fleet", "", body) != nil {
				return
			}
		case <-beat.C:
			if out.comment() != nil {
				return
			}
		}
	}
}

// boxStream is a box page's live part: "log" events (escaped text, id =
// offset to resume from) and "status" events (the status panel, re-rendered
// when the box changes).
func (s *Server) boxStream(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	from, err := resumeFrom(r)
	if err != nil {
		s.htmlError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ls, err := core.Logs(ctx, c.actor(), name, from, true)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	defer ls.Close()
	events := core.Events(ctx, c.actor())

	chunks := make(chan fleet.Chunk, 16)
	logDone := make(chan error, 1)
	go func() {
		for {
			ch, err := ls.Next(ctx)
			if err != nil {
				logDone <- err
				return
			}
			select {
			case chunks <- ch:
			case <-ctx.Done():
				logDone <- ctx.Err()
				return
			}
		}
	}()

	out := startSSE(w)
	sendStatus := func() error {
		b, err := core.Get(ctx, c.actor(), name)
		if err != nil {
			return err
		}
		body, err := renderString(ctx, views.BoxStatus(b))
		if err != nil {
			return err
		}
		if err := out.send("status", "", body); err != nil {
			return err
		}
		if body, err = renderString(ctx, views.PRPanel(b)); err != nil {
			return err
		}
		return out.send("prs", "", body)
	}
	// The page's status panel may be stale: a reconnect, or a change
	// between rendering the page and subscribing here (a turn that reaches
	// its question in that gap would never show the question).
	if sendStatus() != nil {
		return
	}
	beat := time.NewTicker(SSEHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		case ch := <-chunks:
			if out.send("log", strconv.FormatInt(ch.Offset, 10), html.EscapeString(ch.Text.String())) != nil {
				return
			}
		case err := <-logDone:
			if !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) {
				Logger(ctx).WarnContext(ctx, "box log stream", "box", name, "err", err)
			}
			// The box is gone or the log ended: say so, then close.
			s.sendGone(ctx, out, "The log ended.")
			return
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if e.Box != name || e.Kind == fleet.EventOutput {
				continue
			}
			if e.Kind == fleet.EventRemoved {
				s.sendGone(ctx, out, "This box was destroyed.")
				return
			}
			if err := sendStatus(); err != nil {
				if errors.Is(err, fleet.ErrNotFound) {
					s.sendGone(ctx, out, "This box was destroyed.")
				}
				return
			}
		case <-beat.C:
			if out.comment() != nil {
				return
			}
		}
	}
}

// resumeFrom is where a log stream starts: the browser's Last-Event-ID on
// a reconnect, else ?from=, else the beginning.
func resumeFrom(r *http.Request) (int64, error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("from")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("log offset: want a non-negative integer")
	}
	return n, nil
}

// sendGone replaces the box page's status panel for good.
func (s *Server) sendGone(ctx context.Context, out *sse, msg string) {
	if body, err := renderString(ctx, views.BoxGone(msg)); err == nil {
		_ = out.send("status", "", body)
	}
}
