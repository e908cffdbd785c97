package sshd

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The fleet TUI's regressions from issue 18, each driven like TestTUI:
// the real OpenSSH client in tmux against the gateway over the real core.

// tuiSSH is the shell command that opens alice's fleet TUI: env (shell
// assignments for the client, e.g. "TERM=dumb") and client options opts.
func (g *gateway) tuiSSH(env string, opts ...string) string {
	ssh := append([]string{"ssh"}, g.sshOpts("alice")...)
	ssh = append(append(ssh, opts...), "-p", g.port, "-t", "127.0.0.1")
	return strings.TrimSpace(env + " " + strings.Join(ssh, " "))
}

// cursor is the terminal's cursor as tmux holds it: column, row (from 0)
// and whether it is shown.
func (tm *tmux) cursor() (x, y int, shown bool) {
	tm.t.Helper()
	out, err := tm.cmd("display-message", "-p", "-t", "t", "#{cursor_x} #{cursor_y} #{cursor_flag}")
	if _, serr := fmt.Sscan(out, &x, &y, &shown); err != nil || serr != nil {
		tm.t.Fatalf("tmux cursor: %q %v %v", out, err, serr)
	}
	return x, y, shown
}

// waitCursor polls until the cursor shows at column x of row y.
func (tm *tmux) waitCursor(x, y int, limit time.Duration) {
	tm.t.Helper()
	start := time.Now()
	for {
		cx, cy, shown := tm.cursor()
		if shown && cx == x && cy == y {
			return
		}
		if time.Since(start) > limit {
			tm.t.Fatalf("cursor at %d,%d (shown %v), want shown at %d,%d:\n%s", cx, cy, shown, x, y, tm.screen())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// styled is the screen with its cells' styles as SGR escape sequences.
func (tm *tmux) styled() string {
	out, _ := tm.cmd("capture-pane", "-p", "-e", "-t", "t")
	return out
}

var sgr = regexp.MustCompile("\x1b\\[([0-9;:]*)m")

// colours lists the SGR sequences of s that set a foreground or background
// colour (30–38, 40–48, 90–97, 100–107), and whether any sets a style at
// all (resets, 0, 39 and 49, do not).
func colours(s string) (set []string, styled bool) {
	for _, m := range sgr.FindAllStringSubmatch(s, -1) {
		colour := false
		for p := range strings.SplitSeq(strings.ReplaceAll(m[1], ":", ";"), ";") {
			n, err := strconv.Atoi(p)
			if err != nil || n == 0 || n == 39 || n == 49 {
				continue
			}
			styled = true
			if (n >= 30 && n <= 38) || (n >= 40 && n <= 48) || (n >= 90 && n <= 97) || (n >= 100 && n <= 107) {
				colour = true
			}
		}
		if colour {
			set = append(set, strconv.Quote(m[0]))
		}
	}
	return set, styled
}

// TestRegressionTUIKMovesUp: k moved nothing, because the keep action
// caught it first although help advertised k for moving up. Now j and k
// move the selection, and keep is K (confirmed like every action).
func TestRegressionTUIKMovesUp(t *testing.T) {
	g := newGateway(t)
	older := g.newBox("alice", "!say older")
	newer := g.newBox("alice", "!say newer")
	tm := newTmux(t, 100, 30, g.tuiSSH(""))
	// Newest first, the selection on the top row.
	tm.wait(`(?s)`+regexp.QuoteMeta(newer)+`.*`+regexp.QuoteMeta(older), time.Minute)
	tm.wait(`↑↓/jk move`, 5*time.Second)

	tm.keys("j", "Enter")
	tm.wait(`box `+regexp.QuoteMeta(older)+` · `, 5*time.Second)
	tm.keys("Escape")
	tm.wait(`2 box\(es\)`, 5*time.Second)
	tm.keys("k")
	time.Sleep(300 * time.Millisecond)
	if s := tm.screen(); strings.Contains(s, "? y/N") {
		t.Fatalf("k asked to confirm an action instead of moving up:\n%s", s)
	}
	tm.keys("Enter")
	tm.wait(`box `+regexp.QuoteMeta(newer)+` · `, 5*time.Second)

	// Keep moved to K; anything but y cancels.
	tm.keys("K")
	tm.wait(`keep `+regexp.QuoteMeta(newer)+`\? y/N`, 5*time.Second)
	tm.keys("n")
	tm.wait(`cancelled`, 5*time.Second)
	if b, err := g.fleet.Get(context.Background(), g.actors["alice"], newer); err != nil || b.Keep {
		t.Fatalf("after a cancelled keep: %+v, %v", b, err)
	}
}

// TestRegressionTUIPromptShowsCursor: the filter, answer and delegate
// form inputs drew a "█" after the text and hid the terminal's cursor, so
// the text could only be typed at its end. Now the terminal's own cursor
// shows where the next character goes, and ←/→ move it.
func TestRegressionTUIPromptShowsCursor(t *testing.T) {
	const cols, rows = 100, 30
	g := newGateway(t)
	tm := newTmux(t, cols, rows, g.tuiSSH(""))
	tm.wait(`no boxes yet`, time.Minute)
	if _, _, shown := tm.cursor(); shown {
		t.Errorf("the cursor shows on the table, where nothing is typed:\n%s", tm.screen())
	}

	prompt := rows - 2 // the prompt line, above the help bar
	tm.keys("/")
	tm.wait(`filter: *\n`, 5*time.Second)
	tm.waitCursor(len("filter: "), prompt, 5*time.Second)
	tm.keys("abc")
	tm.waitCursor(len("filter: abc"), prompt, 5*time.Second)
	tm.keys("Left", "Left", "X")
	tm.wait(`filter: aXbc`, 5*time.Second)
	tm.waitCursor(len("filter: aX"), prompt, 5*time.Second)
	tm.keys("Escape")
	tm.wait(`no boxes yet`, 5*time.Second)
	if _, _, shown := tm.cursor(); shown {
		t.Errorf("the cursor still shows after the prompt closed:\n%s", tm.screen())
	}

	// The delegate form: the cursor follows the focused field.
	tm.keys("n")
	tm.wait(`Delegate a task to a new box`, 5*time.Second)
	indent := len("> Task:  ")
	tm.waitCursor(indent, 2, 5*time.Second) // the Task field, below the title
	tm.keys("fix it")
	tm.waitCursor(indent+len("fix it"), 2, 5*time.Second)
	tm.keys("Tab")
	tm.waitCursor(indent, 4, 5*time.Second) // Repos
	tm.keys("Escape")
	tm.wait(`cancelled`, 5*time.Second)
}

// TestRegressionTUINoColor: the TUI coloured its output whatever the
// client said. NO_COLOR in the session's environment (here sent with
// OpenSSH's SetEnv; any non-empty value counts) now drops every colour
// and keeps bold and reverse; TERM dumb or absent gets no styles at all.
// A session with neither is coloured, so the check can tell.
func TestRegressionTUINoColor(t *testing.T) {
	g := newGateway(t)
	for _, c := range []struct {
		name, env string
		opts      []string
		colour    bool // colours expected
		styled    bool // any SGR expected
	}{
		{name: "colour", colour: true, styled: true},
		{name: "NO_COLOR", opts: []string{"-o", "SetEnv=NO_COLOR=yes"}, styled: true},
		{name: "TERM dumb", env: "TERM=dumb"},
		{name: "no TERM", env: "env -u TERM"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tm := newTmux(t, 100, 30, g.tuiSSH(c.env, c.opts...))
			tm.wait(`no boxes yet`, time.Minute)
			tm.wait(`q quit`, 5*time.Second)
			screen := tm.styled()
			set, styled := colours(screen)
			if c.colour != (len(set) > 0) || c.styled != styled {
				t.Fatalf("colours %v, styled %v; want colours %v, styled %v:\n%q", set, styled, c.colour, c.styled, screen)
			}
		})
	}
}
