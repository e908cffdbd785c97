package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"sbx.dev/sbx/vm/agent"
)

// dialTimeout bounds connecting to a loopback port (a listener with a full
// backlog).
const dialTimeout = 10 * time.Second

// dial connects to a port on the box's loopback and joins it to st (the
// frames are in vm/agent/dial.go). The host's request is checked here again:
// nothing but 127.0.0.1 and ::1 is ever dialled.
func (c *connState) dial(ctx context.Context, st *yamux.Stream, req agent.Request) {
	s := c.srv
	answer := func(err error) error {
		return agent.WriteFrame(st, agent.Reply{ID: req.ID, Err: agent.ToWire(err)})
	}
	if req.Dial == nil {
		_ = answer(fmt.Errorf("dial: no address: %w", errInvalid))
		return
	}
	d := *req.Dial
	if err := agent.CheckDial(d); err != nil {
		_ = answer(fmt.Errorf("dial: %w: %w", err, errInvalid))
		return
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	var nd net.Dialer
	conn, err := nd.DialContext(dctx, "tcp", d.Addr())
	cancel()
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			err = fmt.Errorf("nothing listens on %s in the box: %w", d.Addr(), fs.ErrNotExist)
		}
		_ = answer(err)
		return
	}
	tc := conn.(*net.TCPConn)
	defer tc.Close()
	if err := answer(nil); err != nil {
		s.log.Debug("agent: dial reply", "addr", d.Addr(), "err", err)
		return
	}
	joinStream(st, tc)
}

// joinStream pumps tc's bytes to st as data frames and st's data frames to
// tc until both directions are over: each side's end of data is a
// half-close of the other; the host ending the stream ends tc.
func joinStream(st *yamux.Stream, tc *net.TCPConn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // box → host
		defer wg.Done()
		buf := make([]byte, agent.FrameHead+agent.MaxExecData)
		for {
			n, err := tc.Read(buf[agent.FrameHead:])
			if n > 0 {
				if _, werr := st.Write(agent.PutFrameHead(buf[:agent.FrameHead+n], agent.FrameData)); werr != nil {
					tc.Close()
					return
				}
			}
			if err == io.EOF {
				var h [agent.FrameHead]byte
				_, _ = st.Write(agent.PutFrameHead(h[:], agent.FrameDataEOF))
				return
			}
			if err != nil {
				// A reset (or the host's end closing tc): the stream ends
				// without 'D', which the host reads as a broken connection.
				st.Close()
				return
			}
		}
	}()
	// host → box
	fr := agent.NewFrameReader(st)
	for {
		kind, b, err := fr.Next()
		if err != nil { // the host closed the stream, or it broke
			tc.Close()
			break
		}
		if kind == agent.FrameData {
			if _, err := tc.Write(b); err != nil {
				tc.Close()
				break
			}
			continue
		}
		if kind == agent.FrameDataEOF && len(b) == 0 {
			_ = tc.CloseWrite()
			// Keep reading: the host's close of the stream ends tc.
			continue
		}
		tc.Close() // a bad frame ends the connection
		break
	}
	wg.Wait()
	st.Close()
}
