package sshd

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/internal/cliusage"
)

// TestCommandConventions walks the command tree: every command a user can
// run has examples in its help, each of them a command line that reaches
// this very command with flags it has (the root's reach any), and every command that prints takes
// --json (attach and exec print the box process's own bytes).
func TestCommandConventions(t *testing.T) {
	c := &call{srv: &Server{}}
	root := c.root()
	prefix := c.usagePrefix() + " "
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
		if cmd.Hidden || cmd.Annotations[annotationGroup] != "" && cmd.HasParent() {
			return
		}
		path := cmd.CommandPath()
		if cmd.Example == "" {
			t.Errorf("%s: no Example in its help", path)
		}
		if cmd.HasParent() && cmd.Annotations[annotationRaw] == "" && cmd.Flags().Lookup("json") == nil {
			t.Errorf("%s: prints but has no --json", path)
		}
		for line := range strings.SplitSeq(cmd.Example, "\n") {
			line = strings.Replace(line, "ssh -t ", "ssh ", 1)
			_, after, ok := strings.Cut(line, prefix)
			if !strings.HasPrefix(line, "  ") || !ok {
				t.Errorf("%s: example %q: want an indented line with %q", path, line, prefix)
				continue
			}
			if i := strings.IndexAny(after, ")|<>#"); i >= 0 {
				after = after[:i]
			}
			args := strings.Fields(strings.NewReplacer(`"`, "", `'`, "").Replace(after))
			found, rest, err := root.Find(args)
			if err != nil || found != cmd && cmd.HasParent() { // the root's examples show the others
				t.Errorf("%s: example %q reaches %v (%v)", path, line, found.CommandPath(), err)
				continue
			}
			if err := found.ParseFlags(rest); err != nil {
				t.Errorf("%s: example %q: %v", path, line, err)
			}
		}
	}
	walk(root)
}

// TestErrorOutput: a failure is one "error:" line, a wrong command line
// adds the usage line, and under --json either is one object on stderr.
func TestErrorOutput(t *testing.T) {
	c := &call{srv: &Server{}}
	root := c.root()
	rm, _, err := root.Find([]string{"user", "rm"})
	if err != nil {
		t.Fatal(err)
	}
	usage := &cliusage.Error{Cmd: rm, Err: errString("accepts 1 arg(s), received 0")}
	for _, tc := range []struct {
		err    error
		asJSON bool
		want   string
	}{
		{errString("disk\non fire"), false, "error: disk on fire\n"},
		{errString("disk on fire"), true, `{"error":"disk on fire","kind":"other"}` + "\n"},
		{usage, false, "error: accepts 1 arg(s), received 0\nusage: ssh localhost user rm NAME [flags]\n"},
		{usage, true, `{"error":"accepts 1 arg(s), received 0","kind":"usage","usage":"ssh localhost user rm NAME [flags]"}` + "\n"},
		{c.srv.noFleet(), true, `{"error":"boxes are not available on this gateway (no fleet configured)","kind":"unavailable"}` + "\n"},
	} {
		var b strings.Builder
		writeError(&b, tc.err, tc.asJSON)
		if b.String() != tc.want {
			t.Errorf("writeError(%v, json=%v) = %q, want %q", tc.err, tc.asJSON, b.String(), tc.want)
		}
		if tc.asJSON && !json.Valid([]byte(b.String())) {
			t.Errorf("writeError(%v) under --json is not JSON: %q", tc.err, b.String())
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }
