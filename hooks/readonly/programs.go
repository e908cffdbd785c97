package readonly

import (
	"errors"
	"fmt"
	"strings"

	"sbx.dev/sbx/hooks/shell"
)

// Program is an entry of the read-only allow-list. A nil Check means the
// program has no option or operand that writes, executes or changes state,
// so any argument is fine, even one computed at run time. Otherwise every
// argument must be literal (or a glob that cannot become an option) and
// Check decides.
type Program struct {
	Check func(args []shell.Arg) error
	// Computed: Check itself decides about computed arguments, instead of
	// every argument having to be literal.
	Computed bool
}

var anyArgs = Program{}

// programs is the read-only allow-list. Everything else (rm, tee, xargs, sh,
// env, less, sudo, curl, ...) is denied by omission.
var programs = map[string]Program{
	// Shell builtins that change nothing outside the shell itself.
	"true": anyArgs, "false": anyArgs, ":": anyArgs, "echo": anyArgs, "pwd": anyArgs,
	"cd": anyArgs, "type": anyArgs,
	"test": {Check: checkTest}, "[": {Check: checkTest},
	"printf": {Check: checkPrintf, Computed: true},
	// Reading files and directories.
	"ls": anyArgs, "cat": anyArgs, "head": anyArgs, "tail": anyArgs, "wc": anyArgs,
	"grep": anyArgs, "egrep": anyArgs, "fgrep": anyArgs, "stat": anyArgs, "du": anyArgs,
	"df": anyArgs, "basename": anyArgs, "dirname": anyArgs, "realpath": anyArgs,
	"readlink": anyArgs, "nl": anyArgs, "cut": anyArgs, "tr": anyArgs, "rev": anyArgs,
	"od": anyArgs, "hexdump": anyArgs, "base64": anyArgs, "md5sum": anyArgs,
	"sha1sum": anyArgs, "sha256sum": anyArgs, "sha512sum": anyArgs, "cmp": anyArgs,
	"diff": anyArgs, "comm": anyArgs, "paste": anyArgs, "join": anyArgs, "fold": anyArgs,
	"expand": anyArgs, "unexpand": anyArgs, "strings": anyArgs, "column": anyArgs,
	"jq": anyArgs, "which": anyArgs,
	// The machine, read-only.
	"whoami": anyArgs, "id": anyArgs, "uname": anyArgs, "nproc": anyArgs, "uptime": anyArgs,
	// Programs with a writing or executing option.
	"file": {Check: checkFile},
	"tree": {Check: checkTree},
	"date": {Check: checkDate},
	"sort": {Check: checkSort},
	"uniq": {Check: checkUniq},
	"find": {Check: checkFind},
	"rg":   {Check: checkRg},
	"sed":  {Check: CheckSed},
	"awk":  {Check: CheckAwk}, "gawk": {Check: CheckAwk}, "mawk": {Check: CheckAwk},
	"git": {Check: checkGit},
}

// Lookup returns the allow-list's entry for a program name; the guard asks
// it whether a program only reads.
func Lookup(name string) (Program, bool) {
	p, ok := programs[name]
	return p, ok
}

// longIs reports whether opt is a GNU long option naming one of names,
// abbreviations included: getopt_long accepts any unambiguous prefix, so
// "--out=f" is "--output=f".
func longIs(opt string, names ...string) bool {
	if !strings.HasPrefix(opt, "--") || opt == "--" {
		return false
	}
	n, _, _ := strings.Cut(opt[2:], "=")
	for _, name := range names {
		if n != "" && strings.HasPrefix(name, n) {
			return true
		}
	}
	return false
}

// shortHas reports whether a cluster of short options ("-rno") sets one of
// the letters in bad before reaching a letter in valued, whose value is the
// rest of the cluster.
func shortHas(opt, bad, valued string) bool {
	if !strings.HasPrefix(opt, "-") || strings.HasPrefix(opt, "--") {
		return false
	}
	for _, c := range opt[1:] {
		if strings.ContainsRune(bad, c) {
			return true
		}
		if strings.ContainsRune(valued, c) {
			return false
		}
	}
	return false
}

func checkFile(args []shell.Arg) error {
	for _, o := range shell.Options(args) {
		if longIs(o, "compile") || shortHas(o, "C", "efFmP") {
			return errors.New("-C/--compile writes a magic file")
		}
	}
	return nil
}

func checkTree(args []shell.Arg) error {
	for _, o := range shell.Options(args) {
		if shortHas(o, "oR", "LPIHT") {
			return errors.New("-o and -R write files")
		}
	}
	return nil
}

func checkDate(args []shell.Arg) error {
	for _, o := range shell.Options(args) {
		if longIs(o, "set") || shortHas(o, "s", "dfrI") {
			return errors.New("-s/--set changes the clock")
		}
	}
	return nil
}

func checkSort(args []shell.Arg) error {
	for _, o := range shell.Options(args) {
		if longIs(o, "output", "compress-program") || shortHas(o, "o", "ktST") {
			return errors.New("-o/--output writes a file and --compress-program runs one")
		}
	}
	return nil
}

// checkUniq refuses a second operand: `uniq IN OUT` writes OUT. A glob could
// add operands, so only literal arguments count.
func checkUniq(args []shell.Arg) error {
	operands := 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !a.Static {
			return fmt.Errorf("argument %s may expand to several files, and a second one is written", a)
		}
		switch {
		case a.Text == "--":
			operands += len(args) - i - 1
			i = len(args)
		case a.Text == "-f" || a.Text == "-s" || a.Text == "-w" ||
			(!strings.Contains(a.Text, "=") && longIs(a.Text, "skip-fields", "skip-chars", "check-chars")):
			i++ // the option's value
		case strings.HasPrefix(a.Text, "-") && a.Text != "-":
		default:
			operands++
		}
	}
	if operands > 1 {
		return errors.New("a second file operand is the output file")
	}
	return nil
}

// findActions are the find primaries that delete, run programs or write files.
var findActions = map[string]bool{
	"-delete": true, "-exec": true, "-execdir": true, "-ok": true, "-okdir": true,
	"-fprint": true, "-fprint0": true, "-fprintf": true, "-fls": true,
}

func checkFind(args []shell.Arg) error {
	for _, a := range args {
		if findActions[a.Text] {
			return fmt.Errorf("%s is not allowed", a.Text)
		}
	}
	return nil
}

func checkRg(args []shell.Arg) error {
	for _, o := range shell.Options(args) {
		name, _, _ := strings.Cut(o, "=")
		if name == "--pre" || name == "--hostname-bin" {
			return fmt.Errorf("%s runs a program", name)
		}
	}
	return nil
}

// CheckAwk allows awk with a literal program text that checkAwkProgram
// accepts, and no option that loads or writes files.
func CheckAwk(args []shell.Arg) error {
	for i := 0; i < len(args); i++ {
		a := args[i].Text
		switch {
		case a == "--":
			i++
		case a == "-F" || a == "-v":
			// The value must be literal, or it could expand to several
			// words and make one of them the program text.
			if i+1 < len(args) && !args[i+1].Static {
				return fmt.Errorf("the value of %s must be literal", a)
			}
			i++
			continue
		case strings.HasPrefix(a, "-F") || strings.HasPrefix(a, "-v") ||
			strings.HasPrefix(a, "--field-separator=") || strings.HasPrefix(a, "--assign="):
			continue
		case strings.HasPrefix(a, "-") && a != "-":
			return fmt.Errorf("option %s is not allowed (only -F and -v; -f, -i, -l, -o, -p, -d load or write files)", a)
		}
		if i >= len(args) {
			return errors.New("no program text")
		}
		if !args[i].Static {
			return errors.New("the program text must be literal")
		}
		return checkAwkProgram(args[i].Text)
	}
	return errors.New("no program text")
}

// checkTest refuses -v and -R: bash evaluates an array subscript in the
// variable name they test, and a subscript runs command substitutions
// ([ -v 'a[$(rm x)]' ]). Arguments must be literal so none becomes -v.
func checkTest(args []shell.Arg) error {
	for _, a := range args {
		if a.Text == "-v" || a.Text == "-R" {
			return fmt.Errorf("%s evaluates a variable subscript", a.Text)
		}
	}
	return nil
}

// checkPrintf refuses -v (it assigns, and evaluates a subscript like test
// -v). Once the format is literal the remaining arguments are only data.
func checkPrintf(args []shell.Arg) error {
	if len(args) > 0 && args[0].Static && args[0].Text == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return nil
	}
	if f := args[0]; !f.Static || strings.HasPrefix(f.Text, "-") {
		return fmt.Errorf("the format %s must be literal and not an option", f)
	}
	return nil
}
