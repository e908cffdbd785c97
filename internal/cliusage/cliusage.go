// Package cliusage marks a wrong command line — an unknown command or flag,
// a flag value that does not parse, the wrong number of arguments — so that
// the SSH commands and the local ones answer it alike: exit 2 (kind
// Invalid) and the command's usage line.
package cliusage

import (
	"errors"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/internal/errkind"
)

// Error is a wrong command line for Cmd. It is of kind Invalid.
type Error struct {
	Cmd *cobra.Command
	Err error
}

func (e *Error) Error() string   { return e.Err.Error() }
func (e *Error) Unwrap() []error { return []error{e.Err, errkind.Invalid} }

// Mark makes every flag error and argument check in root's tree fail with
// an *Error. Call it once the tree is complete.
func Mark(root *cobra.Command) {
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &Error{Cmd: cmd, Err: err} })
	markArgs(root)
}

func markArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				var ue *Error
				if errors.As(err, &ue) {
					return err
				}
				return &Error{Cmd: cmd, Err: err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		markArgs(sub)
	}
}
