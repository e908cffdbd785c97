package sshd

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"charm.land/ssh"
	gossh "golang.org/x/crypto/ssh"
)

// Window changes are handled here, not by charm.land/ssh: the library
// (v0.4.3) writes each one into a one-slot channel that only the session
// handler drains (so a resize before exec blocked the request loop and exec
// with it) and updates the PTY's size without a lock (a data race with
// Session.Pty). The request filter keeps window changes away from the
// library and hands them to the session through Windows.

// sessionEnv tags each session channel so the handler finds its resizes. The
// filter injects it as an env request and drops any client-sent copy.
const sessionEnv = "SBX_SSH_CHANNEL"

// resizes holds the latest window of one session channel, and what attach
// and exec need beyond the library's session: the raw channel and signals.
type resizes struct {
	mu     sync.Mutex
	latest ssh.Window
	have   bool
	notify chan struct{} // one slot: "latest changed"
	done   chan struct{} // closed when the channel's requests end

	// raw is the channel itself: the library's session rewrites \n to \r\n
	// on a PTY, which a real PTY passthrough must not do.
	raw gossh.Channel
	// signals receives the client's signal requests once a process that
	// takes them runs (wantSignals); before that they are refused.
	signals     chan string
	wantSignals atomic.Bool
}

func newResizes(raw gossh.Channel) *resizes {
	return &resizes{notify: make(chan struct{}, 1), done: make(chan struct{}), raw: raw, signals: make(chan string, 8)}
}

func (r *resizes) set(w ssh.Window) {
	r.mu.Lock()
	r.latest, r.have = w, true
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default: // a wake-up is already pending; it will read the latest
	}
}

// Windows streams the window sizes a PTY session's client reports after
// pty-req (the first comes from Session.Pty). Changes coalesce: a slow reader
// sees the latest size, never a backlog. The channel closes when the session
// ends. Sessions without a PTY get a closed channel.
func (s *Server) Windows(sess ssh.Session) <-chan ssh.Window {
	out := make(chan ssh.Window)
	r := s.resizesOf(sess)
	if r == nil {
		close(out)
		return out
	}
	go func() {
		defer close(out)
		for {
			select {
			case <-r.notify:
				r.mu.Lock()
				w, ok := r.latest, r.have
				r.mu.Unlock()
				if !ok {
					continue
				}
				select {
				case out <- w:
				case <-r.done:
					return
				}
			case <-r.done:
				return
			}
		}
	}()
	return out
}

func (s *Server) resizesOf(sess ssh.Session) *resizes {
	if _, _, isPty := sess.Pty(); !isPty {
		return nil
	}
	return s.channelOf(sess)
}

// channelOf is the state of sess's channel, PTY or not.
func (s *Server) channelOf(sess ssh.Session) *resizes {
	for _, kv := range sess.Environ() {
		if v, ok := strings.CutPrefix(kv, sessionEnv+"="); ok {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.channels[v]
		}
	}
	return nil
}

// register creates the resize state of a new session channel.
func (s *Server) register(raw gossh.Channel) (id string, r *resizes) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextChannel++
	id = strconv.FormatUint(s.nextChannel, 10)
	r = newResizes(raw)
	s.channels[id] = r
	return id, r
}

func (s *Server) unregister(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.channels[id]; ok {
		close(r.done)
		delete(s.channels, id)
	}
}

// parseWindow reads a window-change payload: cols, rows, width px, height px.
func parseWindow(payload []byte) (ssh.Window, bool) {
	var w struct{ Cols, Rows, WidthPx, HeightPx uint32 }
	if err := gossh.Unmarshal(payload, &w); err != nil {
		return ssh.Window{}, false
	}
	const limit = 1 << 16 // no terminal is wider; bounds what reaches a PTY
	if w.Cols > limit || w.Rows > limit || w.WidthPx > limit*64 || w.HeightPx > limit*64 {
		return ssh.Window{}, false
	}
	return ssh.Window{Width: int(w.Cols), Height: int(w.Rows), WidthPixels: int(w.WidthPx), HeightPixels: int(w.HeightPx)}, true
}
