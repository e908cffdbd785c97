package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"log/slog"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/store"
)

var ctx = context.Background()

func newLog(t *testing.T) (*audit.Log, *store.SQLite, *bytes.Buffer, *time.Time) {
	t.Helper()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	return audit.New(st, slog.New(slog.NewJSONHandler(&buf, nil)), func() time.Time { return now }), st, &buf, &now
}

func TestRecordWritesRowAndLine(t *testing.T) {
	log, _, buf, now := newLog(t)
	e := audit.Entry{Actor: "alice", Front: "ssh", Action: "user.add", Target: "bob", Addr: "192.0.2.1:2222", Detail: "role=operator"}
	if err := log.Record(ctx, e); err != nil {
		t.Fatal(err)
	}
	rows, err := log.List(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	got := rows[0]
	if got.ID == 0 || !got.Time.Equal(*now) || got.Result != audit.ResultOK || got.Actor != "alice" || got.Front != "ssh" ||
		got.Action != "user.add" || got.Target != "bob" || got.Addr != "192.0.2.1:2222" || got.Detail != "role=operator" {
		t.Errorf("row %+v", got)
	}
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %q: %v", buf, err)
	}
	want := map[string]any{"msg": "[audit]", "level": "INFO", "actor": "alice", "front": "ssh", "action": "user.add",
		"target": "bob", "addr": "192.0.2.1:2222", "result": "ok", "detail": "role=operator"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("log %s = %v, want %v", k, line[k], v)
		}
	}
}

func TestDeniedIsAWarning(t *testing.T) {
	log, _, buf, _ := newLog(t)
	log.Record(ctx, audit.Entry{Actor: "bob", Action: "user.rm", Result: audit.ResultDenied})
	if !strings.Contains(buf.String(), `"level":"WARN"`) {
		t.Errorf("denied logged as %s", buf)
	}
}

func TestLineWritesNoRow(t *testing.T) {
	log, _, buf, _ := newLog(t)
	log.Line(ctx, audit.Entry{Actor: "a", Action: "key.add"})
	if rows, _ := log.List(ctx, audit.Filter{}); len(rows) != 0 {
		t.Errorf("Line wrote %d rows", len(rows))
	}
	if !strings.Contains(buf.String(), `"action":"key.add"`) {
		t.Errorf("no line: %s", buf)
	}
}

func TestListFilters(t *testing.T) {
	log, _, _, now := newLog(t)
	start := *now
	for i := range 30 {
		*now = start.Add(time.Duration(i) * time.Second)
		log.Record(ctx, audit.Entry{Actor: []string{"alice", "bob", "carol"}[i%3], Action: "x", Target: string(rune('a' + i%26))})
	}
	rows, _ := log.List(ctx, audit.Filter{})
	if len(rows) != 30 {
		t.Fatalf("%d rows, want 30", len(rows))
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].Time.After(rows[i-1].Time) {
			t.Fatalf("not newest first at %d", i)
		}
	}
	bob, _ := log.List(ctx, audit.Filter{User: "bob", Since: start.Add(15 * time.Second), Limit: 3})
	if len(bob) != 3 || bob[0].Time != start.Add(28*time.Second) || bob[2].Time != start.Add(22*time.Second) {
		t.Errorf("bob since 15s limit 3: %+v", bob)
	}
	if none, _ := log.List(ctx, audit.Filter{User: "nobody"}); len(none) != 0 {
		t.Errorf("nobody: %d rows", len(none))
	}
}

func TestRecordOnBrokenStoreStillLogs(t *testing.T) {
	log, st, buf, _ := newLog(t)
	st.Close()
	err := log.Record(ctx, audit.Entry{Actor: "a", Action: "user.add"})
	if err == nil || !strings.Contains(err.Error(), "write audit row user.add") {
		t.Errorf("got %v", err)
	}
	if !strings.Contains(buf.String(), `"msg":"[audit]"`) || !strings.Contains(buf.String(), "audit row not written") {
		t.Errorf("log: %s", buf)
	}
}

func TestCleanStripsTerminalEscapes(t *testing.T) {
	log, _, buf, _ := newLog(t)
	log.Record(ctx, audit.Entry{Actor: "a", Action: "user.rm", Target: "x\x1b]0;pwned\x07", Detail: strings.Repeat("d", 5000) + "\n"})
	rows, _ := log.List(ctx, audit.Filter{})
	if rows[0].Target != "x?]0;pwned?" {
		t.Errorf("target %q", rows[0].Target)
	}
	if len(rows[0].Detail) > 2048+3 || strings.Contains(rows[0].Detail, "\n") {
		t.Errorf("detail not bounded: %d bytes", len(rows[0].Detail))
	}
	if strings.Contains(buf.String(), "\x1b") {
		t.Error("escape reached the log")
	}
}

// Regression (issue 4: audit views): a secret quoted in an audit row's
// target or detail is redacted in every listing and log line.
func TestAuditViewsRedactedRegression(t *testing.T) {
	l, st, buf, _ := newLog(t)
	l.Redact(func(s string) string { return strings.ReplaceAll(s, "ghp_SECRET", "ghp_…CRET") })
	if err := l.Record(ctx, audit.Entry{Action: "box.fail", Target: "box ghp_SECRET", Detail: "push failed: ghp_SECRET"}); err != nil {
		t.Fatal(err)
	}
	// A row written by a store transaction, outside Record.
	if _, err := st.InsertAudit(ctx, audit.Entry{Action: "box.create", Detail: "old ghp_SECRET", Time: time.Now(), Result: audit.ResultOK}); err != nil {
		t.Fatal(err)
	}
	rows, err := l.List(ctx, audit.Filter{})
	if err != nil || len(rows) != 2 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	for _, r := range rows {
		if strings.Contains(r.Target+r.Detail, "ghp_SECRET") {
			t.Errorf("listed row holds the secret: %+v", r)
		}
	}
	if strings.Contains(buf.String(), "ghp_SECRET") {
		t.Errorf("log line holds the secret: %s", buf.String())
	}
}
