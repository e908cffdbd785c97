package readonly

import (
	"errors"
	"fmt"
	"strings"

	"sbx.dev/sbx/hooks/shell"
)

// gitReadOnly are the git subcommands that only read the repository, each
// with an extra check where some of its forms write. Subcommands that reach
// the network (fetch, ls-remote, remote show) are not here either.
//
// Known limit: git itself runs programs named in the repository's config
// (core.fsmonitor, diff.external, textconv drivers) and `status` may
// refresh the index. The config is the driver lane's, guarded by the guard
// hook; this lane denies -c and --config-env so it cannot add its own.
var gitReadOnly = map[string]func(args []shell.Arg) error{
	"status": gitGeneric, "log": gitGeneric, "diff": gitGeneric, "show": gitGeneric,
	"blame": gitGeneric, "annotate": gitGeneric, "grep": gitGrep, "ls-files": gitGeneric,
	"ls-tree": gitGeneric, "rev-parse": gitGeneric, "rev-list": gitGeneric,
	"describe": gitGeneric, "shortlog": gitGeneric, "cat-file": gitGeneric,
	"merge-base": gitGeneric, "name-rev": gitGeneric, "show-ref": gitGeneric,
	"for-each-ref": gitGeneric, "whatchanged": gitGeneric, "count-objects": gitGeneric,
	"diff-tree": gitGeneric, "diff-files": gitGeneric, "diff-index": gitGeneric,
	"check-ignore": gitGeneric, "check-attr": gitGeneric, "cherry": gitGeneric,
	"range-diff": gitGeneric, "version": gitGeneric, "var": gitGeneric,
	"branch": gitBranch, "tag": gitTag, "remote": gitRemote, "stash": gitStash,
	"reflog": gitReflog, "worktree": gitWorktree, "config": gitConfig,
}

// checkGit allows git's harmless global options, then a read-only
// subcommand. -c, --config-env, --exec-path, --git-dir and --work-tree are
// refused: each can make git run a program of the caller's choosing.
func checkGit(args []shell.Arg) error {
	i := 0
	for ; i < len(args); i++ {
		a := args[i].Text
		switch {
		case a == "--no-pager" || a == "-P" || a == "--no-optional-locks" ||
			a == "--literal-pathspecs" || a == "--no-replace-objects" || a == "--glob-pathspecs" ||
			a == "--noglob-pathspecs" || a == "--icase-pathspecs":
		case a == "-C":
			// Literal, or a brace could expand to a second word that
			// becomes the subcommand (or an alias).
			if i+1 < len(args) && !args[i+1].Static {
				return errors.New("the directory after -C must be literal")
			}
			i++
		case strings.HasPrefix(a, "-"):
			return fmt.Errorf("global option %s is not allowed", a)
		default:
			sub := args[i]
			if !sub.Static {
				return errors.New("the subcommand must be literal")
			}
			check, ok := gitReadOnly[sub.Text]
			if !ok {
				return fmt.Errorf("%q is not a read-only git subcommand", sub.Text)
			}
			if err := check(args[i+1:]); err != nil {
				return fmt.Errorf("%s: %w", sub.Text, err)
			}
			return nil
		}
	}
	return errors.New("no subcommand")
}

// gitGeneric refuses the options of the log/diff family that write a file
// (--output) or run a program (--ext-diff, and grep's --open-files-in-pager).
func gitGeneric(args []shell.Arg) error {
	for _, o := range shell.Options(args) {
		if longIs(o, "output", "ext-diff", "open-files-in-pager") {
			return fmt.Errorf("option %s writes a file or runs a program", o)
		}
	}
	return nil
}

func gitGrep(args []shell.Arg) error {
	for _, o := range shell.Options(args) {
		if shortHas(o, "O", "efABCm") {
			return fmt.Errorf("option %s runs a pager program", o)
		}
	}
	return gitGeneric(args)
}

// gitBranch allows listing only: no operand unless --list is given, and no
// option outside the listing ones.
func gitBranch(args []shell.Arg) error {
	listing := map[string]bool{
		"-a": true, "--all": true, "-r": true, "--remotes": true, "-v": true, "-vv": true,
		"--verbose": true, "-l": true, "--list": true, "--show-current": true, "--color": true,
		"--no-color": true, "--column": true, "--no-column": true, "--abbrev": true,
		"--no-abbrev": true, "-i": true, "--ignore-case": true, "--omit-empty": true,
		"--contains": true, "--no-contains": true, "--merged": true, "--no-merged": true,
		"--points-at": true, "--sort": true, "--format": true,
	}
	valued := map[string]bool{
		"--contains": true, "--no-contains": true, "--merged": true, "--no-merged": true,
		"--points-at": true, "--sort": true, "--format": true,
	}
	list, operands := false, 0
	for i := 0; i < len(args); i++ {
		a := args[i].Text
		if !strings.HasPrefix(a, "-") {
			operands++
			continue
		}
		name, _, hasValue := strings.Cut(a, "=")
		if !listing[name] {
			return fmt.Errorf("option %s is not a listing option", a)
		}
		if name == "-l" || name == "--list" {
			list = true
		}
		// Some of these take an optional value; git only takes the next
		// argument as one when it is not an option itself.
		if valued[name] && !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1].Text, "-") {
			if !args[i+1].Static {
				return fmt.Errorf("the value of %s must be literal", a)
			}
			i++
		}
	}
	if operands > 0 && !list {
		return errors.New("a branch name without --list creates a branch")
	}
	return nil
}

func gitTag(args []shell.Arg) error {
	if len(args) == 0 {
		return nil
	}
	list := false
	for _, a := range args {
		switch {
		case a.Text == "-l" || a.Text == "--list":
			list = true
		case a.Text == "-n" || strings.HasPrefix(a.Text, "-n") && shell.IsDigits(a.Text[2:]) ||
			strings.HasPrefix(a.Text, "--sort=") || strings.HasPrefix(a.Text, "--format=") ||
			strings.HasPrefix(a.Text, "--contains") || strings.HasPrefix(a.Text, "--points-at") ||
			strings.HasPrefix(a.Text, "--merged") || a.Text == "--column" || a.Text == "--no-column":
		case strings.HasPrefix(a.Text, "-"):
			return fmt.Errorf("option %s is not a listing option", a)
		}
	}
	if !list {
		return errors.New("only listing (-l/--list) is allowed")
	}
	return nil
}

func gitRemote(args []shell.Arg) error {
	switch {
	case len(args) == 0:
		return nil
	case len(args) == 1 && (args[0].Text == "-v" || args[0].Text == "--verbose"):
		return nil
	case args[0].Text == "get-url":
		for _, a := range args[1:] {
			if a.Text != "--all" && a.Text != "--push" && strings.HasPrefix(a.Text, "-") {
				return fmt.Errorf("option %s is not allowed", a)
			}
		}
		return nil
	}
	return errors.New("only `git remote`, `git remote -v` and `git remote get-url` are allowed")
}

func gitStash(args []shell.Arg) error {
	if len(args) > 0 && (args[0].Text == "list" || args[0].Text == "show") {
		return gitGeneric(args[1:])
	}
	return errors.New("only `git stash list` and `git stash show` are allowed")
}

func gitReflog(args []shell.Arg) error {
	if len(args) == 0 || strings.HasPrefix(args[0].Text, "-") {
		return gitGeneric(args)
	}
	if args[0].Text == "show" || args[0].Text == "exists" {
		return gitGeneric(args[1:])
	}
	return errors.New("only `git reflog [show]` is allowed")
}

func gitWorktree(args []shell.Arg) error {
	if len(args) > 0 && args[0].Text == "list" {
		return nil
	}
	return errors.New("only `git worktree list` is allowed")
}

// gitConfig allows reading one value or listing: `git config --get NAME`,
// `--get-all`, `--get-regexp`, `--list`, and the newer `git config get|list`.
func gitConfig(args []shell.Arg) error {
	modes := map[string]bool{"--get": true, "--get-all": true, "--get-regexp": true, "--list": true, "-l": true}
	modifiers := map[string]bool{
		"--show-origin": true, "--show-scope": true, "-z": true, "--null": true, "--name-only": true,
		"--local": true, "--global": true, "--system": true, "--worktree": true, "--includes": true,
		"--no-includes": true, "--all": true, "--bool": true, "--int": true, "--path": true,
	}
	start := 0
	mode := false
	if len(args) > 0 && (args[0].Text == "get" || args[0].Text == "list") {
		start, mode = 1, true
	}
	operands := 0
	for _, a := range args[start:] {
		name, _, _ := strings.Cut(a.Text, "=")
		switch {
		case modes[name] && start == 0:
			mode = true
		case modifiers[name] || name == "--type" || name == "--default":
		case strings.HasPrefix(a.Text, "-"):
			return fmt.Errorf("option %s is not allowed", a)
		default:
			operands++
		}
	}
	if !mode || operands > 2 {
		return errors.New("only reading (--get, --get-all, --get-regexp, --list, get, list) is allowed")
	}
	return nil
}
