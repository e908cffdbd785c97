package tui

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/redact"
)

// sgr matches the help bar's colours.
var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// safeText is box text as the core hands it over: through a real redactor.
func safeText(t *testing.T, s string) redact.Safe {
	t.Helper()
	r, err := redact.New(context.Background(), nil, redact.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r.String(s)
}

// TestDiffLinesAreTerminalSafe: what the diff view draws from a box —
// file names and patch lines — passes the terminal sanitizer: an OSC 52
// clipboard write, a title change, a bidi override and C1 controls in a
// committed file show as text and reach the terminal as no escape.
func TestDiffLinesAreTerminalSafe(t *testing.T) {
	evil := "a\x1b]52;c;ZXZpbA==\x07b\x1b]0;owned\x07\u202ecod.exe\u009b2J"
	d := fleet.Diff{
		Files: []fleet.FileStat{{Path: safeText(t, "widget/"+evil), Added: 2, Deleted: 1}, {Path: safeText(t, "widget/logo.png"), Binary: true}},
		Patch: safeText(t, "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n-old\n+"+evil+"\n+\ttabbed\r\n"),
	}
	lines := diffLines(d)
	all := strings.Join(lines, "\n")
	for _, bad := range []string{"\x1b", "\x07", "\u202e", "\u009b", "\t", "\r"} {
		if strings.Contains(all, bad) {
			t.Errorf("diff lines hold %q:\n%s", bad, all)
		}
	}
	if lines[0] != "2 file(s) changed, +2 −1" || !strings.Contains(lines[1], `\u001b]52;c;ZXZpbA==`) || !strings.HasSuffix(lines[1], "+2 −1") ||
		lines[2] != "  widget/logo.png  binary" || !strings.Contains(all, "+    tabbed") {
		t.Errorf("diff lines:\n%s", all)
	}
	// The view's own styles come after the sanitizer: a styled line holds
	// escapes, but only those around the text.
	m := &model{keys: newKeyMap(), w: 120, h: 12, pager: pagerState{diff: true}}
	if got := m.styleDiffLine(lines[len(lines)-2]); !strings.Contains(got, "\x1b[") || strings.Count(got, "\x1b") != 2 {
		t.Errorf("styled added line %q", got)
	}
	if no := diffLines(fleet.Diff{}); len(no) != 1 || no[0] != "no changes yet" {
		t.Errorf("an empty diff reads %q", no)
	}
	// A huge patch is cut, saying how much was left out.
	huge := strings.Repeat("+x\n", maxDiffLines+50)
	cut := diffLines(fleet.Diff{Files: []fleet.FileStat{{Path: safeText(t, "big"), Added: maxDiffLines + 50}}, Patch: safeText(t, huge)})
	if len(cut) != maxDiffLines+1 || !strings.Contains(cut[len(cut)-1], "more line(s); ssh … diff BOX") {
		t.Errorf("a huge patch: %d lines, last %q", len(cut), cut[len(cut)-1])
	}
}

// TestDiffViewScrolls: the diff view pages like the log (↑↓/jk, pgup,
// pgdn or space, home/g, end/G), never past either end; esc, q and D go
// back where it was opened; its help bar names the keys, and the table's
// and the box view's bars name D.
func TestDiffViewScrolls(t *testing.T) {
	m := &model{keys: newKeyMap(), help: newHelp(), w: 120, h: 12, mode: modeBox, open: "b1"}
	m.help.SetWidth(m.w)
	var lines []string
	for i := range 50 {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	if bar := sgr.ReplaceAllString(m.helpBar(), ""); !strings.Contains(bar, "D diff") {
		t.Errorf("box view help bar %q does not name D", bar)
	}
	m.pager = pagerState{title: "diff of box b1", box: "b1", diff: true, from: modeBox, gen: 1, lines: lines}
	m.mode = modePager
	press := func(k tea.KeyPressMsg) { m.pagerKey(k) }
	r := func(c rune) tea.KeyPressMsg { return tea.KeyPressMsg{Code: c, Text: string(c)} }
	h := m.pagerHeight()
	for _, step := range []struct {
		key  tea.KeyPressMsg
		want int
	}{
		{r('k'), 0}, {r('j'), 1}, {tea.KeyPressMsg{Code: tea.KeyDown}, 2}, {tea.KeyPressMsg{Code: tea.KeyPgDown}, 2 + h},
		{tea.KeyPressMsg{Code: tea.KeySpace, Text: " "}, 2 + 2*h}, {r('G'), 50 - h}, {r('j'), 50 - h}, {tea.KeyPressMsg{Code: tea.KeyPgUp}, 50 - 2*h},
		{r('g'), 0},
	} {
		press(step.key)
		if m.pager.top != step.want {
			t.Fatalf("after %q the view starts at line %d, want %d", step.key.String(), m.pager.top, step.want)
		}
	}
	view := m.pagerView()
	if !strings.Contains(view, "diff of box b1") || !strings.Contains(view, "line 0\n") || strings.Contains(view, fmt.Sprintf("line %d\n", h)) ||
		!strings.Contains(view, fmt.Sprintf("lines 1–%d of 50", h)) {
		t.Errorf("diff view:\n%s", view)
	}
	if bar := sgr.ReplaceAllString(m.helpBar(), ""); !strings.Contains(bar, "esc/q/D back") || !strings.Contains(bar, "pgdn/space") {
		t.Errorf("diff help bar %q", bar)
	}
	// A load that ends after the view was left changes nothing.
	press(tea.KeyPressMsg{Code: tea.KeyEscape})
	if m.mode != modeBox {
		t.Fatalf("esc went to mode %d, want the box view", m.mode)
	}
	m.applyDiff(diffMsg{gen: 1, box: "b1", err: fmt.Errorf("late")})
	if m.pager.err != "" {
		t.Errorf("a stale load was applied: %q", m.pager.err)
	}
	m.mode = modeTable
	if bar := sgr.ReplaceAllString(m.helpBar(), ""); !strings.Contains(bar, "D diff") {
		t.Errorf("table help bar %q does not name D", bar)
	}
}
