package cliusage

import (
	"errors"
	"io"
	"testing"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/internal/errkind"
)

// TestMark: every way a command line can be wrong comes back as an *Error
// for the command it was meant for, of kind Invalid (exit 2); a command
// that runs and fails does not.
func TestMark(t *testing.T) {
	failed := errors.New("it ran and failed")
	newTree := func() *cobra.Command {
		root := &cobra.Command{Use: "x", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil },
			SilenceErrors: true, SilenceUsage: true}
		one := &cobra.Command{Use: "one ARG", Args: cobra.ExactArgs(1), RunE: func(*cobra.Command, []string) error { return failed }}
		one.Flags().Int("n", 0, "a number")
		root.AddCommand(one)
		Mark(root)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		return root
	}
	for _, tc := range []struct {
		args    []string
		usage   string // the command the *Error names; "" for none
		wantErr error
	}{
		{[]string{"nonsense"}, "x", nil},
		{[]string{"one"}, "one", nil},
		{[]string{"one", "a", "b"}, "one", nil},
		{[]string{"one", "--nope", "a"}, "one", nil},
		{[]string{"one", "--n", "notanumber", "a"}, "one", nil},
		{[]string{"one", "a"}, "", failed},
	} {
		root := newTree()
		root.SetArgs(tc.args)
		err := root.Execute()
		var ue *Error
		switch {
		case tc.usage == "":
			if errors.As(err, &ue) || !errors.Is(err, tc.wantErr) {
				t.Errorf("%q: %v, want %v and no usage error", tc.args, err, tc.wantErr)
			}
		case !errors.As(err, &ue):
			t.Errorf("%q: %v, want a usage error", tc.args, err)
		case ue.Cmd.Name() != tc.usage || errkind.ExitCode(err) != 2:
			t.Errorf("%q: usage error for %q, exit %d; want %q and 2", tc.args, ue.Cmd.Name(), errkind.ExitCode(err), tc.usage)
		}
	}
}
