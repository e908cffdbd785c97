package agent

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// recorder keeps each Write separately.
type recorder struct{ writes [][]byte }

func (r *recorder) Read([]byte) (int, error) { return 0, nil }
func (r *recorder) Close() error             { return nil }
func (r *recorder) Write(p []byte) (int, error) {
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

func yamuxHead(typ byte, length uint32) []byte {
	h := make([]byte, yamuxHeadSize)
	h[1] = typ
	binary.BigEndian.PutUint32(h[4:], 7) // stream id
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

// A data frame's header and body leave in one write; other frames, and
// bodies too big to be worth a copy, go out as yamux wrote them, in order.
func TestJoinedConnWrites(t *testing.T) {
	const typeWindowUpdate = 1
	body := []byte("hello")
	big := make([]byte, maxJoin+1)
	for _, tc := range []struct {
		name   string
		writes [][]byte
		want   [][]byte
	}{
		{"data", [][]byte{yamuxHead(yamuxTypeData, 5), body},
			[][]byte{append(yamuxHead(yamuxTypeData, 5), body...)}},
		{"window update", [][]byte{yamuxHead(typeWindowUpdate, 1<<20)},
			[][]byte{yamuxHead(typeWindowUpdate, 1<<20)}},
		{"empty data frame (FIN)", [][]byte{yamuxHead(yamuxTypeData, 0)},
			[][]byte{yamuxHead(yamuxTypeData, 0)}},
		{"big body", [][]byte{yamuxHead(yamuxTypeData, maxJoin+1), big},
			[][]byte{yamuxHead(yamuxTypeData, maxJoin+1), big}},
		{"data, update, data", [][]byte{yamuxHead(yamuxTypeData, 5), body, yamuxHead(typeWindowUpdate, 9), yamuxHead(yamuxTypeData, 5), body},
			[][]byte{append(yamuxHead(yamuxTypeData, 5), body...), yamuxHead(typeWindowUpdate, 9), append(yamuxHead(yamuxTypeData, 5), body...)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			j := JoinFrames(r)
			for _, w := range tc.writes {
				if n, err := j.Write(w); n != len(w) || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", len(w), n, err)
				}
			}
			if len(r.writes) != len(tc.want) {
				t.Fatalf("%d writes, want %d", len(r.writes), len(tc.want))
			}
			for i := range tc.want {
				if !bytes.Equal(r.writes[i], tc.want[i]) {
					t.Fatalf("write %d = %x, want %x", i, r.writes[i], tc.want[i])
				}
			}
		})
	}
}
