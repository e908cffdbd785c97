package agent

import (
	"encoding/binary"
	"io"
	"sync"
)

// yamux frame header: version, type, flags (2), stream id (4), length (4).
const (
	yamuxHeadSize = 12
	yamuxTypeData = 0
)

// joinedConn writes each yamux data frame with one Write: yamux writes a
// frame's header and its body separately, and on a virtio-serial port every
// write is a trip through the hypervisor (under TCG, an emulated one). The
// header of a data frame with a body is held back and sent with the body,
// which yamux writes next from the same goroutine.
type joinedConn struct {
	io.ReadWriteCloser
	mu   sync.Mutex
	head [yamuxHeadSize]byte
	held bool // head is a data frame header waiting for its body
	buf  []byte
}

func JoinFrames(c io.ReadWriteCloser) *joinedConn { return &joinedConn{ReadWriteCloser: c} }

func (j *joinedConn) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.held {
		if len(p) == yamuxHeadSize && p[1] == yamuxTypeData {
			if n := binary.BigEndian.Uint32(p[8:]); n > 0 && n <= maxJoin {
				copy(j.head[:], p)
				j.held = true
				return len(p), nil
			}
		}
		return j.ReadWriteCloser.Write(p)
	}
	j.buf = append(append(j.buf[:0], j.head[:]...), p...)
	j.held = false
	n, err := j.ReadWriteCloser.Write(j.buf)
	return max(0, n-yamuxHeadSize), err
}

// maxJoin is the largest body joined with its header: past it the copy
// costs more than the write it saves.
const maxJoin = 16 << 10
