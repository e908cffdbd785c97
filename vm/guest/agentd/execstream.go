package agentd

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/hashicorp/yamux"

	"sbx.dev/sbx/vm/agent"
)

// execStream runs one process with all its traffic on st.
func (c *connState) execStream(st *yamux.Stream, req agent.Request) {
	s := c.srv
	fail := func(err error) {
		_ = agent.WriteFrame(st, agent.Reply{ID: req.ID, Err: agent.ToWire(err)})
	}
	if req.Exec == nil || len(req.Exec.Argv) == 0 {
		fail(fmt.Errorf("exec: empty argv: %w", errInvalid))
		return
	}
	c.mu.Lock()
	_, dup := c.procs[req.ID]
	if !dup {
		c.procs[req.ID] = nil // reserved until started
	}
	c.mu.Unlock()
	if dup {
		fail(fmt.Errorf("exec id %d already in use: %w", req.ID, errInvalid))
		return
	}
	p, err := s.startProcess(*req.Exec)
	c.mu.Lock()
	if err != nil {
		delete(c.procs, req.ID)
	} else {
		c.procs[req.ID] = p
	}
	c.mu.Unlock()
	if err != nil {
		fail(err)
		return
	}
	// The exec is no longer addressable once the process is gone, before
	// the host hears its exit: a resize or signal after Wait is refused.
	gone := func() {
		c.mu.Lock()
		delete(c.procs, req.ID)
		c.mu.Unlock()
	}
	defer gone()
	// As with the four-stream exec, a failed write does not end the process.
	if err := agent.WriteFrame(st, agent.Reply{ID: req.ID, PID: p.pid}); err != nil {
		s.log.Debug("agent: exec reply", "pid", p.pid, "err", err)
	}
	p.runStream(st, s.log, gone)
}

// control applies a resize or signal sent on its own stream to a process
// started by execStream on this connection.
func (c *connState) control(req agent.Request) error {
	c.mu.Lock()
	p := c.procs[req.Exe]
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%s: no running process for exec %d: %w", req.Op, req.Exe, os.ErrNotExist)
	}
	return p.control(req)
}

// runStream pumps input from st and output and the exit status to st,
// calling exited before it sends the status.
func (p *process) runStream(st *yamux.Stream, log *slog.Logger, exited func()) {
	defer p.closeAll()
	var mu sync.Mutex // one frame per Write, whole
	send := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := st.Write(b)
		return err
	}
	go p.feedStdin(st)

	var outs sync.WaitGroup
	var pumps []*pump
	out := func(src *os.File, kind, eof byte) {
		pm := &pump{src: src, tty: src == p.tty}
		pumps = append(pumps, pm)
		outs.Add(1)
		go func() {
			defer outs.Done()
			pm.copy(agent.FrameHead, func(b []byte) error { return send(agent.PutFrameHead(b, kind)) })
			// The exit frame ends every output; an EOF frame is only worth
			// its write while the process runs on.
			if !p.gone.Load() {
				var b [agent.FrameHead]byte
				_ = send(agent.PutFrameHead(b[:], eof))
			}
		}()
	}
	if p.tty != nil {
		out(p.tty, agent.FrameStdout, agent.FrameStdoutEOF)
	} else {
		out(p.stdout, agent.FrameStdout, agent.FrameStdoutEOF)
		out(p.stderr, agent.FrameStderr, agent.FrameStderrEOF)
	}
	exit := p.finish(pumps, &outs)
	exited()
	b, _ := json.Marshal(exit)
	if err := send(agent.PutFrameHead(append(make([]byte, agent.FrameHead, agent.FrameHead+len(b)), b...), agent.FrameExit)); err != nil {
		log.Debug("agent: send exit", "pid", p.pid, "err", err)
	}
}

// feedStdin copies input frames to the process until the host ends the
// stream. It reads the stream to its end even when the process no longer
// takes input, so a host writing to a finished process is never blocked.
func (p *process) feedStdin(st io.Reader) {
	w := p.stdin
	if p.tty != nil {
		w = p.tty
	}
	open := true
	end := func() {
		if !open {
			return
		}
		open = false
		if p.tty != nil {
			_, _ = p.tty.Write([]byte{4})
		} else {
			p.stdin.Close()
		}
	}
	defer end()
	fr := agent.NewFrameReader(st)
	for {
		kind, b, err := fr.Next()
		if err != nil {
			return
		}
		switch kind {
		case agent.FrameStdin:
			if open {
				if _, err := w.Write(b); err != nil && p.tty == nil {
					end() // the process closed its input: drop the rest
				}
			}
		case agent.FrameStdinEOF:
			end()
		}
	}
}
