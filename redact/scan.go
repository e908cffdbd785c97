package redact

import (
	"bytes"
	"math/bits"
	"slices"
)

const (
	// ellipsis marks a redaction: "ghp_…ABCD".
	ellipsis = "…"
	// safeTail is the shortest secret body (after its label) that keeps a
	// 4-character tail; shorter ones are redacted whole.
	safeTail = 16
	// maxHold caps the bytes a stream holds back for an undecided pattern
	// value (a "token" longer than this is decided as if the stream ended).
	// Known-secret prefixes are always held: they are bounded by maxSecret.
	maxHold = 64 << 10
	// maxKey caps a private-key body: past it the block is closed, so a
	// stray BEGIN line cannot swallow the rest of a log.
	maxKey = 64 << 10
)

var keyEnd = []byte("-----END")

// span is a half-open byte range to redact. a (anchor) is where the match
// that produced it starts: the trigger, for a value-only span. A stream that
// cuts its output may only cut before an anchor, or the trigger would be
// emitted and the value, seen later without it, would pass as plain text.
type span struct{ s, e, a int }

// hit is a position where the automaton entered a reporting state: buf[i]
// completed a match in state st. Only matches starting before lim count
// (lim cuts off what the other lane reports itself).
type hit struct {
	i, lim int
	st     int32
}

// scratch holds the per-scan buffers, reused across the chunks of a stream.
type scratch struct {
	hits, lane2, tail []hit
	spans             []span
}

// twoLanes is the buffer size from which the walk runs two lanes (below
// it the lanes' bookkeeping costs more than it saves).
const twoLanes = 1024

// walk runs the automaton over buf and records every hit. It returns the
// state (row offset) after the last byte.
//
// Big buffers are walked in two interleaved lanes (first and second half):
// each step's table lookup depends on the previous one, so one lane waits on
// memory; two independent chains keep the core busy and nearly double the
// throughput. Lane 1 then runs on past the middle for as long as it is inside
// a match that began before it; after that both lanes are in the same state.
func (a *automaton) walk(buf []byte, sc *scratch) int32 {
	trans, class, stride := a.trans, &a.class, a.stride
	hits := sc.hits[:0]
	n := len(buf)
	if n < a.twoLanes || n < 2 {
		s := int32(0)
		for i := 0; i < n; i++ {
			v := trans[s+int32(class[buf[i]])]
			if v < 0 {
				v = ^v
				hits = append(hits, hit{i, n, v / stride})
			}
			s = v
		}
		sc.hits = hits
		return s
	}
	mid := n / 2
	second := buf[mid : 2*mid]
	lane2 := sc.lane2[:0]
	s1, s2 := int32(0), int32(0)
	for i, c := range buf[:mid] {
		v1 := trans[s1+int32(class[c])]
		v2 := trans[s2+int32(class[second[i]])]
		if v1|v2 < 0 {
			if v1 < 0 {
				v1 = ^v1
				hits = append(hits, hit{i, n, v1 / stride})
			}
			if v2 < 0 {
				v2 = ^v2
				lane2 = append(lane2, hit{mid + i, n, v2 / stride})
			}
		}
		s1, s2 = v1, v2
	}
	if 2*mid < n { // odd length: lane 2 takes the last byte
		v := trans[s2+int32(class[buf[n-1]])]
		if v < 0 {
			v = ^v
			lane2 = append(lane2, hit{n - 1, n, v / stride})
		}
		s2 = v
	}
	tail := sc.tail[:0]
	j := mid
	for ; j < n && int(a.depth[s1/stride]) > j-mid; j++ {
		v := trans[s1+int32(class[buf[j]])]
		if v < 0 {
			v = ^v
			tail = append(tail, hit{j, mid, v / stride})
		}
		s1 = v
	}
	// Merge lane 1's tail into lane 2's hits by position.
	k := 0
	for _, h := range lane2 {
		for k < len(tail) && tail[k].i <= h.i {
			hits = append(hits, tail[k])
			k++
		}
		hits = append(hits, h)
	}
	hits = append(hits, tail[k:]...)
	sc.hits, sc.lane2, sc.tail = hits, lane2, tail
	if j == n {
		return s1 // lane 1 was inside a match to the very end
	}
	return s2
}

// scan runs the automaton over buf once and decides every match it can.
// It returns the spans to redact, hold (the first byte that cannot be
// emitted yet because a match might start there) and, when a private-key
// header was found, key: the end of that header (nothing after it counts).
// pre is the input before buf[0] (see maxPre); final means no more input
// follows; force means undecided pattern values are decided as if so.
func (a *automaton) scan(buf []byte, pre []byte, final, force bool, sc *scratch) (_ []span, hold, key int) {
	hold, key = len(buf), -1
	decideAll := final || force
	s := a.walk(buf, sc)
	spans := sc.spans[:0]
	defer func() { sc.spans = spans }()
	// last is the latest pattern match. A trigger inside it is not checked:
	// it is redacted anyway, and checking "TOKEN=TOKEN=TOKEN=…" trigger by
	// trigger would cost quadratic time.
	last := span{-1, -1, -1}
	keyTs := -1 // a private-key header found at buf[keyTs:key]
	for _, h := range sc.hits {
		i := h.i
		if key >= 0 && i >= key {
			break // the key body: swallowed, not text
		}
		if n := int(a.secret[h.st]); n > 0 && i+1-n < h.lim {
			spans = append(spans, span{i + 1 - n, i + 1, i + 1 - n})
		}
		for t := a.trig[h.st]; t != 0; t &= t - 1 {
			tr := &triggers[bits.TrailingZeros64(t)]
			ts, te := i+1-len(tr.text), i+1
			if ts >= h.lim || (ts >= last.s && te <= last.e) {
				continue
			}
			if tr.key {
				if key >= 0 {
					continue // a header inside the header
				}
				switch e, vd := keyHeader(buf, ts, te, decideAll); vd {
				case found:
					// Go on only to check the header's own bytes.
					key, keyTs = e, ts
				case pending:
					hold = min(hold, ts)
				}
				continue
			}
			switch ms, me, vd := tr.check(buf, ts, te, pre, decideAll); vd {
			case found:
				spans = append(spans, span{ms, me, min(ms, ts)})
				if me > last.e {
					last = span{ms, me, ts}
				}
			case pending:
				hold = min(hold, ts)
			}
		}
	}
	if key >= 0 {
		if hold < key {
			// Something before the body is undecided: wait for it, so the
			// result never depends on chunking.
			return spans, min(hold, keyTs), -1
		}
		return spans, key, key
	}
	if decideAll {
		// The stream ends inside what may be a known secret: its prefix is
		// part of a secret too, so do not show it.
		if n := a.secretPrefixAt(s / a.stride); n >= minSecret {
			spans = append(spans, span{len(buf) - n, len(buf), len(buf) - n})
		}
		return spans, len(buf), -1
	}
	hold = min(hold, len(buf)-int(a.depth[s/a.stride]))
	return spans, hold, -1
}

// merge sorts spans and joins overlapping ones.
func merge(spans []span) []span {
	if len(spans) < 2 {
		return spans
	}
	slices.SortFunc(spans, func(x, y span) int { return x.s - y.s })
	out := spans[:1]
	for _, sp := range spans[1:] {
		last := &out[len(out)-1]
		if sp.s < last.e {
			last.e = max(last.e, sp.e)
			last.a = min(last.a, sp.a)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// emit appends buf[:end] to out with every span replaced. Spans must be
// merged and lie within [0, end).
func emit(out, buf []byte, spans []span, end int) []byte {
	pos := 0
	for _, sp := range spans {
		out = append(out, buf[pos:sp.s]...)
		out = replacement(out, buf[sp.s:sp.e])
		pos = sp.e
	}
	return append(out, buf[pos:end]...)
}

// replacement appends the redacted form of secret: its label, an ellipsis
// and, for a long enough secret, its last 4 characters.
func replacement(out, secret []byte) []byte {
	label := labelOf(secret)
	out = append(out, label...)
	out = append(out, ellipsis...)
	body := secret[len(label):]
	if len(body) >= safeTail {
		tail := body[len(body)-4:]
		for _, c := range tail {
			if c <= ' ' || c >= 0x7f {
				return out
			}
		}
		out = append(out, tail...)
	}
	return out
}

// stream is the state carried between chunks of one redacted stream.
type stream struct {
	buf    []byte // held-back input, not emitted yet
	pre    []byte // the input just before buf[0], at most maxPre bytes
	inKey  bool   // inside a private-key body
	keyLen int    // body bytes swallowed so far
	keyNL  bool   // the body spans lines
	// scanned is how many bytes were held back after the last scan.
	scanned int
	// work counts the bytes scanned, for the linear-time regression test.
	work int
	sc   scratch
}

// feed appends p to the held-back input and appends to out everything that
// is decided. With final set everything is decided and the stream is reset.
func (st *stream) feed(a *automaton, out, p []byte, final bool) []byte {
	if n := len(st.buf) + len(p); !final && n < 2*st.scanned && n <= maxHold && !bytes.ContainsAny(p, "\n\r") {
		// Bytes are held back and this small piece ends no line: do not
		// re-scan yet. Re-scanning only when the held bytes have doubled (or
		// a line ends, or maxHold is reached) keeps a stream fed one byte at
		// a time linear; the latency promise (the next line end) holds.
		st.buf = append(st.buf, p...)
		return out
	}
	buf := p
	if len(st.buf) > 0 {
		st.buf = append(st.buf, p...)
		buf = st.buf
	}
	pos := 0
	for pos < len(buf) || (final && st.inKey) {
		if st.inKey {
			rest := buf[pos:]
			i := bytes.Index(rest, keyEnd)
			if i < 0 {
				// Swallow the body, keeping only what could begin "-----END".
				keep := 0
				if !final {
					keep = min(len(keyEnd)-1, len(rest))
				}
				body := rest[:len(rest)-keep]
				st.keyNL = st.keyNL || bytes.IndexByte(body, '\n') >= 0
				st.keyLen += len(body)
				pos += len(body)
				if !final && st.keyLen <= maxKey {
					break
				}
				out = st.closeKey(out)
				continue
			}
			st.keyNL = st.keyNL || bytes.IndexByte(rest[:i], '\n') >= 0
			pos += i
			out = st.closeKey(out)
			continue
		}

		pre := st.pre
		if pos >= maxPre {
			pre = buf[pos-maxPre : pos]
		} else if pos > 0 {
			// A fresh slice: st.pre itself changes only at the end.
			pre = append(append([]byte(nil), st.pre...), buf[:pos]...)
			pre = pre[max(0, len(pre)-maxPre):]
		}
		rest := buf[pos:]
		st.work += len(rest)
		spans, hold, key := a.scan(rest, pre, final, false, &st.sc)
		if key < 0 && !final && len(rest)-hold > maxHold {
			spans, hold, key = a.scan(rest, pre, false, true, &st.sc)
		}
		end := hold
		if key >= 0 {
			end = key
		}
		spans = merge(spans)
		if key >= 0 {
			// Nothing after the header is text; clip what reaches into it.
			for i := range spans {
				spans[i].e = min(spans[i].e, end)
			}
		} else {
			// Only matches wholly before the cut are decided. One that
			// crosses it (or whose trigger is before it and value after)
			// moves the cut back to its anchor, to be found again later.
			for moved := true; moved; {
				moved = false
				for _, sp := range spans {
					if sp.e > end && sp.a < end {
						end, moved = sp.a, true
					}
				}
			}
		}
		n := 0
		for _, sp := range spans {
			if sp.e <= end {
				spans[n] = sp
				n++
			}
		}
		out = emit(out, rest, spans[:n], end)
		pos += end
		if key >= 0 {
			st.inKey, st.keyLen, st.keyNL = true, 0, false
			continue
		}
		break
	}
	if final {
		st.buf, st.pre, st.inKey, st.scanned = st.buf[:0], st.pre[:0], false, 0
		return out
	}
	if pos > 0 {
		// Keep the last maxPre bytes of input before the held-back rest.
		ctx := append(st.pre, buf[max(0, pos-maxPre):pos]...)
		st.pre = append(st.pre[:0], ctx[max(0, len(ctx)-maxPre):]...)
	}
	st.buf = append(st.buf[:0], buf[pos:]...)
	st.scanned = len(st.buf)
	return out
}

// closeKey ends a private-key body: the whole body becomes one ellipsis (on
// its own line when the body spanned lines).
func (st *stream) closeKey(out []byte) []byte {
	st.inKey = false
	if st.keyNL {
		return append(out, "\n"+ellipsis+"\n"...)
	}
	return append(out, ellipsis...)
}

// redact is the one-shot form: the common case (nothing to redact) costs one
// scan and no copy.
func (a *automaton) redact(b []byte) ([]byte, bool) {
	var sc scratch
	spans, _, key := a.scan(b, nil, true, false, &sc)
	if key < 0 && len(spans) == 0 {
		return b, false
	}
	if key < 0 {
		return emit(make([]byte, 0, len(b)+16), b, merge(spans), len(b)), true
	}
	var st stream
	return st.feed(a, make([]byte, 0, len(b)+len(b)/8+16), b, true), true
}
