package boxnet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Limits of a push request's command section: far above any real push, low
// enough that a hostile box cannot make the gateway buffer much.
const (
	maxPktPayload   = 65516
	maxPushCommands = 4096
	maxPushPrefix   = 4 << 20
)

// refUpdate is one command of a receive-pack request.
type refUpdate struct {
	Old, New string
	Ref      string
}

// pushRequest is the command section of a receive-pack request.
type pushRequest struct {
	Commands []refUpdate
	Caps     []string
	// Raw is every byte read, to be sent upstream unchanged before the rest
	// of the body (push options, pack).
	Raw []byte
}

// hasCap reports whether the client asked for a capability.
func (p pushRequest) hasCap(name string) bool {
	for _, c := range p.Caps {
		if c == name || strings.HasPrefix(c, name+"=") {
			return true
		}
	}
	return false
}

var errFlush = errors.New("flush-pkt")

// readPkt reads one pkt-line. It returns errFlush for a flush-pkt and an
// error for the v2 delimiter and response-end packets, which a receive-pack
// request never holds.
func readPkt(r io.Reader, raw *bytes.Buffer) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("pkt-line length: %w", err)
	}
	raw.Write(hdr[:])
	n := 0
	for _, c := range hdr {
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = int(c-'A') + 10
		default:
			return nil, fmt.Errorf("pkt-line length %q is not hex", hdr[:])
		}
		n = n<<4 | d
	}
	switch {
	case n == 0:
		return nil, errFlush
	case n < 4:
		return nil, fmt.Errorf("unexpected special packet %04x in a push", n)
	case n-4 > maxPktPayload:
		return nil, fmt.Errorf("pkt-line of %d bytes is too long", n)
	}
	if raw.Len()+n-4 > maxPushPrefix {
		return nil, errors.New("push command section too large")
	}
	payload := make([]byte, n-4)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, fmt.Errorf("pkt-line payload: %w", err)
	}
	raw.Write(payload)
	return payload, nil
}

// parsePush reads the command section of a receive-pack request, up to and
// including its flush-pkt, and no further.
//
//	update-request = *shallow command-list [push-options] [pack]
//	command-list   = PKT-LINE(command NUL cap-list) *PKT-LINE(command) flush-pkt
//	command        = old-id SP new-id SP refname
//
// A signed push (push-cert) is refused: its commands sit inside the
// certificate, and nothing here needs it.
func parsePush(r io.Reader) (pushRequest, error) {
	var p pushRequest
	var raw bytes.Buffer
	first := true
	for {
		line, err := readPkt(r, &raw)
		if errors.Is(err, errFlush) {
			p.Raw = raw.Bytes()
			return p, nil
		}
		if err != nil {
			return p, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		if rest, ok := bytes.CutPrefix(line, []byte("shallow ")); ok && first {
			if !isObjectID(string(rest)) {
				return p, fmt.Errorf("malformed shallow line %q", line)
			}
			continue
		}
		if bytes.HasPrefix(line, []byte("push-cert")) {
			return p, errors.New("signed pushes (push-cert) are not supported")
		}
		cmd := line
		if first {
			var caps []byte
			var hasCaps bool
			cmd, caps, hasCaps = bytes.Cut(line, []byte{0})
			if hasCaps {
				p.Caps = strings.Fields(string(caps))
			}
			first = false
		} else if bytes.IndexByte(line, 0) >= 0 {
			return p, fmt.Errorf("NUL in a later command %q", line)
		}
		u, err := parseCommand(string(cmd))
		if err != nil {
			return p, err
		}
		if len(p.Commands) >= maxPushCommands {
			return p, errors.New("too many ref updates in one push")
		}
		p.Commands = append(p.Commands, u)
	}
}

func parseCommand(s string) (refUpdate, error) {
	f := strings.Split(s, " ")
	if len(f) != 3 || !isObjectID(f[0]) || !isObjectID(f[1]) || len(f[0]) != len(f[1]) || f[2] == "" {
		return refUpdate{}, fmt.Errorf("malformed ref update %q", s)
	}
	return refUpdate{Old: f[0], New: f[1], Ref: f[2]}, nil
}

// isObjectID reports whether s is a SHA-1 or SHA-256 object id in lower hex.
func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// refAllowed reports whether ref is refs/heads/B for a branch B the
// delegation allows: an exact name, or a prefix given as "prefix/*".
func refAllowed(ref string, branches []string) bool {
	b, ok := strings.CutPrefix(ref, "refs/heads/")
	if !ok || b == "" || !validBranch(b) {
		return false
	}
	for _, allow := range branches {
		if prefix, ok := strings.CutSuffix(allow, "/*"); ok {
			if prefix != "" && strings.HasPrefix(b, prefix+"/") {
				return true
			}
			continue
		}
		if b == allow {
			return true
		}
	}
	return false
}

// validBranch applies the parts of git check-ref-format that matter for
// matching: no path tricks, no control characters.
func validBranch(b string) bool {
	if strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") || strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") {
		return false
	}
	if strings.Contains(b, "..") || strings.Contains(b, "//") || strings.Contains(b, "@{") {
		return false
	}
	for _, seg := range strings.Split(b, "/") {
		if strings.HasPrefix(seg, ".") {
			return false
		}
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte(" ~^:?*[\\", c) >= 0 {
			return false
		}
	}
	return true
}

// pktLine encodes one pkt-line.
func pktLine(payload string) []byte {
	return fmt.Appendf(nil, "%04x%s", len(payload)+4, payload)
}

// refusePush writes a receive-pack result that the git client shows: the
// message on side band 2 ("remote: …") and every command reported "ng"
// with its reason, so `git push` prints "! [remote rejected] … (reason)".
func refusePush(w io.Writer, p pushRequest, reasons map[string]string, message string) error {
	var status bytes.Buffer
	status.Write(pktLine("unpack ok\n"))
	for _, c := range p.Commands {
		reason := reasons[c.Ref]
		if reason == "" {
			reason = "another ref in this push was refused"
		}
		status.Write(pktLine("ng " + c.Ref + " " + reason + "\n"))
	}
	status.WriteString("0000")
	var out bytes.Buffer
	switch {
	case p.hasCap("side-band-64k") || p.hasCap("side-band"):
		// Band data per packet: 1000 (side-band) or 65520 (side-band-64k)
		// bytes minus the length and the band byte.
		limit := 995
		if p.hasCap("side-band-64k") {
			limit = 65515
		}
		for _, line := range strings.Split(strings.TrimRight(message, "\n"), "\n") {
			out.Write(pktLine("\x02" + line + "\n"))
		}
		if p.hasCap("report-status") || p.hasCap("report-status-v2") {
			b := status.Bytes()
			for len(b) > 0 {
				n := min(len(b), limit)
				out.Write(pktLine("\x01" + string(b[:n])))
				b = b[n:]
			}
		}
		out.WriteString("0000")
	case p.hasCap("report-status") || p.hasCap("report-status-v2"):
		out.Write(status.Bytes())
	default:
		// An old client with neither: nothing it would show; the HTTP
		// status is all it gets.
	}
	_, err := w.Write(out.Bytes())
	return err
}
