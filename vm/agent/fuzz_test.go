package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestRel(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		escape   bool
	}{
		{"", ".", false},
		{".", ".", false},
		{"a/b/../c", "a/c", false},
		{"/workspace", ".", false},
		{"/workspace/", ".", false},
		{"/workspace/a//b/", "a/b", false},
		{"./a", "a", false},
		{"..", "", true},
		{"../a", "", true},
		{"a/../..", "", true},
		{"/workspace/..", "", true},
		{"/workspacex", "", true},
		{"/etc/passwd", "", true},
		{"/", "", true},
	} {
		got, err := Rel(tc.in)
		if tc.escape {
			if !errors.Is(err, ErrEscape) {
				t.Errorf("Rel(%q) = %q, %v; want ErrEscape", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Rel(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := Rel("a\x00b"); err == nil {
		t.Error("NUL byte accepted")
	}
}

func TestTarName(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{"a/b", "a/b", false},
		{"./a/", "a", false},
		{"a//b/./c", "a/b/c", false},
		{"../a", "", true},
		{"a/../b", "", true}, // any ".." component is refused, even one that stays inside
		{"/abs", "", true},
		{"a/..", "", true},
	} {
		got, err := TarName(tc.in)
		if tc.bad != (err != nil) || got != tc.want {
			t.Errorf("TarName(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func FuzzTarName(f *testing.F) {
	for _, s := range []string{"a", "../a", "/a", "a/../../b", "a/./b/", "..", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		c, err := TarName(name)
		if err != nil {
			return
		}
		if strings.HasPrefix(c, "/") || c == ".." || strings.HasPrefix(c, "../") || strings.Contains(c, "/../") {
			t.Fatalf("TarName(%q) = %q escapes", name, c)
		}
	})
}

// FuzzReadFrame: the frame decoder never panics and never allocates more
// than MaxFrame for a header, whatever the bytes.
func FuzzReadFrame(f *testing.F) {
	var good bytes.Buffer
	WriteFrame(&good, Request{ID: 7, Op: OpStat, Path: "a"})
	f.Add(good.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req Request
		err := ReadFrame(bytes.NewReader(data), &req)
		if err == nil && len(data) >= 4 && binary.BigEndian.Uint32(data) > MaxFrame {
			t.Fatal("oversized frame accepted")
		}
		var rep Reply
		_ = ReadFrame(bytes.NewReader(data), &rep)
	})
}

// FuzzChunkReader: EOF is only reported after the end marker; anything
// else is an error, never silent truncation.
func FuzzChunkReader(f *testing.F) {
	var good bytes.Buffer
	cw := NewChunkWriter(&good)
	cw.Write([]byte("hello"))
	cw.Close()
	f.Add(good.Bytes())
	f.Add(good.Bytes()[:good.Len()-4]) // no end marker
	f.Add([]byte{0, 0x20, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		cr := NewChunkReader(bytes.NewReader(data))
		got, err := io.ReadAll(cr)
		if err != nil {
			return
		}
		// Success means the data was complete: re-encoding it and parsing
		// again gives the same bytes.
		var again bytes.Buffer
		w := NewChunkWriter(&again)
		w.Write(got)
		w.Close()
		got2, err := io.ReadAll(NewChunkReader(&again))
		if err != nil || !bytes.Equal(got, got2) {
			t.Fatalf("round trip: %v", err)
		}
		if !cr.done {
			t.Fatal("EOF without the end marker")
		}
	})
}
