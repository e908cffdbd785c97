package redact

// automaton is an Aho–Corasick matcher compiled to a dense DFA: the exact
// known secrets and the trigger strings of the credential patterns are
// matched together, in one pass, one table lookup per input byte.
//
// Bytes that occur in no pattern share class 0, so the table has one column
// per distinct pattern byte (typically 70–90) rather than 256. Memory is about
// 4 bytes × states × classes: 1,000 secrets of 40 bytes take ~13 MB.
type automaton struct {
	class  [256]uint8
	stride int32
	// trans[off+class] is the row offset of the next state, bitwise
	// complemented (negative) when that state reports a secret or a trigger,
	// so the hot loop tests one sign bit.
	trans []int32

	// Per state, indexed by row offset / stride.
	depth  []int32  // length of the text this state stands for
	secret []int32  // longest known secret ending here, 0 if none
	trig   []uint64 // bit i: triggers[i] ends here
	fail   []int32  // failure link (state index)
	isPre  []bool   // the state's text is a prefix of a known secret

	secrets  int // number of distinct secret strings compiled in
	twoLanes int // buffers this long or longer are walked in two lanes
}

// maxTable bounds the transition table (a reload that would exceed it
// fails and keeps the previous list, rather than exhaust memory).
const maxTable = 256 << 20

// tableSize estimates the bytes compile would allocate for these patterns.
func tableSize(secrets [][]byte, triggers []string) int {
	states, used := 1, [256]bool{}
	for _, s := range secrets {
		states += len(s)
		for _, c := range s {
			used[c] = true
		}
	}
	for _, t := range triggers {
		states += len(t)
		for i := 0; i < len(t); i++ {
			used[t[i]] = true
		}
	}
	classes := 1
	for _, u := range used {
		if u {
			classes++
		}
	}
	return states * classes * 4
}

// compile builds the automaton for the given secrets and trigger strings.
// Secrets are used as given: splitting and length checks happen in the caller.
func compile(secrets [][]byte, triggers []string) *automaton {
	a := &automaton{secrets: len(secrets), twoLanes: twoLanes}

	// Byte classes: every byte used by some pattern gets its own column.
	used := [256]bool{}
	for _, s := range secrets {
		for _, c := range s {
			used[c] = true
		}
	}
	for _, t := range triggers {
		for i := 0; i < len(t); i++ {
			used[t[i]] = true
		}
	}
	n := int32(1)
	for c := range 256 {
		if used[c] {
			a.class[c] = uint8(n)
			n++
		}
	}
	a.stride = n

	// Trie. goto entries are state indexes; 0 means "none" below the root
	// (no edge ever leads back to the root in a trie).
	next := make([]int32, a.stride) // root row
	depth := []int32{0}
	secret := []int32{0}
	trig := []uint64{0}
	isPre := []bool{false}
	insert := func(p []byte) int32 {
		s := int32(0)
		for _, c := range p {
			i := s*a.stride + int32(a.class[c])
			if next[i] == 0 {
				next[i] = int32(len(depth))
				next = append(next, make([]int32, a.stride)...)
				depth = append(depth, depth[s]+1)
				secret = append(secret, 0)
				trig = append(trig, 0)
				isPre = append(isPre, false)
			}
			s = next[i]
		}
		return s
	}
	for _, p := range secrets {
		end := insert(p)
		secret[end] = int32(len(p))
		// Mark the path as a secret prefix.
		s := int32(0)
		for _, c := range p {
			s = next[s*a.stride+int32(a.class[c])]
			isPre[s] = true
		}
	}
	for k, t := range triggers {
		end := insert([]byte(t))
		trig[end] |= 1 << k
	}

	// Breadth-first: failure links, dictionary outputs and the full
	// transition function (missing edges follow the failure link).
	states := int32(len(depth))
	fail := make([]int32, states)
	queue := make([]int32, 0, states)
	for c := int32(0); c < a.stride; c++ {
		if u := next[c]; u != 0 {
			fail[u] = 0
			queue = append(queue, u)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		row, frow := s*a.stride, fail[s]*a.stride
		for c := int32(0); c < a.stride; c++ {
			if u := next[row+c]; u != 0 {
				f := next[frow+c]
				fail[u] = f
				if secret[f] > secret[u] {
					secret[u] = secret[f]
				}
				trig[u] |= trig[f]
				queue = append(queue, u)
			} else {
				next[row+c] = next[frow+c]
			}
		}
	}

	// Row offsets, complemented for reporting states.
	for i, u := range next {
		off := u * a.stride
		if secret[u] != 0 || trig[u] != 0 {
			off = ^off
		}
		next[i] = off
	}
	a.trans, a.depth, a.secret, a.trig, a.fail, a.isPre = next, depth, secret, trig, fail, isPre
	return a
}

// secretPrefixAt returns the length of the longest suffix of the text seen so
// far (ending in state s) that is a prefix of a known secret.
func (a *automaton) secretPrefixAt(s int32) int {
	for s != 0 {
		if a.isPre[s] {
			return int(a.depth[s])
		}
		s = a.fail[s]
	}
	return 0
}
