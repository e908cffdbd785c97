package redact

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Flush releases what is held (a keystroke's echo) and the stream goes on
// redacting; a secret written whole after it is still replaced.
func TestWriterFlushReleasesHeldBytes(t *testing.T) {
	r, err := New(context.Background(), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := r.NewWriter(&out)
	w.Write([]byte("g")) // could begin ghp_…: held
	if w.Held() == 0 {
		t.Fatal("'g' is not held back")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "g" || w.Held() != 0 {
		t.Fatalf("after Flush: out %q, held %d", out.String(), w.Held())
	}
	tok := "ghp_" + strings.Repeat("A1b2", 9)
	w.Write([]byte(" token " + tok + "\n"))
	if strings.Contains(out.String(), tok) {
		t.Errorf("secret after a flush passed: %q", out.String())
	}
}
