package fleet

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// TestRegressionKillMidTurnLogsTwice: a gateway killed mid-turn had logged
// lines past the raw offset the store held (saved about once a second), and
// the next gateway, following from that offset, logged them again. Each
// write now records the log's size and raw offset together; a log found
// longer than its record is cut back, and at skips what it holds, so a
// resumed follower writes every line once (the fault suite's "gateway kill
// -9 mid-turn" found it).
func TestRegressionKillMidTurnLogsTwice(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	gateway := func() *logs {
		return &logs{dir: dir, leases: &leases{}, log: quiet, boxes: map[string]*boxLog{}}
	}
	line := func(l *logs, raw int64, text string) {
		t.Helper()
		if err := l.at("box1", 1, logLine, raw, text); err != nil {
			t.Fatal(err)
		}
	}
	first := gateway()
	if err := first.at("box1", 1, logHeader, 0, "── turn 1 ──\n"); err != nil {
		t.Fatal(err)
	}
	line(first, 4, "one\n")
	line(first, 8, "two\n")
	// The gateway dies after writing a line but before recording it: its
	// log holds "three", its record does not.
	recorded, err := os.ReadFile(first.posPath("box1"))
	if err != nil {
		t.Fatal(err)
	}
	line(first, 14, "three\n")
	if err := os.WriteFile(first.posPath("box1"), recorded, 0o600); err != nil {
		t.Fatal(err)
	}
	first.closeAll()

	// The next gateway follows from the store's older offset (after "one").
	next := gateway()
	line(next, 8, "two\n")
	line(next, 14, "three\n")
	line(next, 20, "four\n")
	if err := next.at("box1", 1, logEnd, 0, "── turn 1 ended ──\n"); err != nil {
		t.Fatal(err)
	}
	next.closeAll()
	got, _ := os.ReadFile(next.path("box1"))
	want := "── turn 1 ──\none\ntwo\nthree\nfour\n── turn 1 ended ──\n"
	if string(got) != want {
		t.Fatalf("log after the restart:\n%s\nwant:\n%s", got, want)
	}
	// Text from no turn (an interruption) is recorded too: a restart keeps it.
	again := gateway()
	if err := again.append("box1", "── interrupted ──\n"); err != nil {
		t.Fatal(err)
	}
	again.closeAll()
	last := gateway()
	if _, err := last.open("box1"); err != nil {
		t.Fatal(err)
	}
	last.closeAll()
	if got, _ := os.ReadFile(last.path("box1")); !strings.HasSuffix(string(got), "── interrupted ──\n") {
		t.Fatalf("a restart cut appended text:\n%s", got)
	}
}
