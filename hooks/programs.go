package hooks

import (
	"errors"
	"fmt"
	"strings"
)

// program is an entry of the read-only allow-list. A nil check means the
// program has no option or operand that writes, executes or changes state,
// so any argument is fine, even one computed at run time. Otherwise every
// argument must be literal (or a glob that cannot become an option) and
// check decides.
type program struct {
	check func(args []arg) error
	// computed: check itself decides about computed arguments, instead of
	// every argument having to be literal.
	computed bool
}

var anyArgs = program{}

// programs is the read-only allow-list. Everything else (rm, tee, xargs, sh,
// env, less, sudo, curl, ...) is denied by omission.
var programs = map[string]program{
	// Shell builtins that change nothing outside the shell itself.
	"true": anyArgs, "false": anyArgs, ":": anyArgs, "echo": anyArgs, "pwd": anyArgs,
	"cd": anyArgs, "type": anyArgs,
	"test": {check: checkTest}, "[": {check: checkTest},
	"printf": {check: checkPrintf, computed: true},
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
	"file": {check: checkFile},
	"tree": {check: checkTree},
	"date": {check: checkDate},
	"sort": {check: checkSort},
	"uniq": {check: checkUniq},
	"find": {check: checkFind},
	"rg":   {check: checkRg},
	"sed":  {check: checkSed},
	"awk":  {check: checkAwk}, "gawk": {check: checkAwk}, "mawk": {check: checkAwk},
	"git": {check: checkGit},
}

// options iterates the arguments before "--" that look like options (GNU
// getopt permutes, so an option after an operand still counts).
func options(args []arg) []string {
	var out []string
	for _, a := range args {
		if a.text == "--" {
			break
		}
		if strings.HasPrefix(a.text, "-") && a.text != "-" {
			out = append(out, a.text)
		}
	}
	return out
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

func checkFile(args []arg) error {
	for _, o := range options(args) {
		if longIs(o, "compile") || shortHas(o, "C", "efFmP") {
			return errors.New("-C/--compile writes a magic file")
		}
	}
	return nil
}

func checkTree(args []arg) error {
	for _, o := range options(args) {
		if shortHas(o, "oR", "LPIHT") {
			return errors.New("-o and -R write files")
		}
	}
	return nil
}

func checkDate(args []arg) error {
	for _, o := range options(args) {
		if longIs(o, "set") || shortHas(o, "s", "dfrI") {
			return errors.New("-s/--set changes the clock")
		}
	}
	return nil
}

func checkSort(args []arg) error {
	for _, o := range options(args) {
		if longIs(o, "output", "compress-program") || shortHas(o, "o", "ktST") {
			return errors.New("-o/--output writes a file and --compress-program runs one")
		}
	}
	return nil
}

// checkUniq refuses a second operand: `uniq IN OUT` writes OUT. A glob could
// add operands, so only literal arguments count.
func checkUniq(args []arg) error {
	operands := 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !a.static {
			return fmt.Errorf("argument %s may expand to several files, and a second one is written", a)
		}
		switch {
		case a.text == "--":
			operands += len(args) - i - 1
			i = len(args)
		case a.text == "-f" || a.text == "-s" || a.text == "-w" ||
			(!strings.Contains(a.text, "=") && longIs(a.text, "skip-fields", "skip-chars", "check-chars")):
			i++ // the option's value
		case strings.HasPrefix(a.text, "-") && a.text != "-":
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

func checkFind(args []arg) error {
	for _, a := range args {
		if findActions[a.text] {
			return fmt.Errorf("%s is not allowed", a.text)
		}
	}
	return nil
}

func checkRg(args []arg) error {
	for _, o := range options(args) {
		name, _, _ := strings.Cut(o, "=")
		if name == "--pre" || name == "--hostname-bin" {
			return fmt.Errorf("%s runs a program", name)
		}
	}
	return nil
}

func checkAwk(args []arg) error {
	for i := 0; i < len(args); i++ {
		a := args[i].text
		switch {
		case a == "--":
			i++
		case a == "-F" || a == "-v":
			// The value must be literal, or it could expand to several
			// words and make one of them the program text.
			if i+1 < len(args) && !args[i+1].static {
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
		if !args[i].static {
			return errors.New("the program text must be literal")
		}
		return checkAwkProgram(args[i].text)
	}
	return errors.New("no program text")
}

// checkTest refuses -v and -R: bash evaluates an array subscript in the
// variable name they test, and a subscript runs command substitutions
// ([ -v 'a[$(rm x)]' ]). Arguments must be literal so none becomes -v.
func checkTest(args []arg) error {
	for _, a := range args {
		if a.text == "-v" || a.text == "-R" {
			return fmt.Errorf("%s evaluates a variable subscript", a.text)
		}
	}
	return nil
}

// checkPrintf refuses -v (it assigns, and evaluates a subscript like test
// -v). Once the format is literal the remaining arguments are only data.
func checkPrintf(args []arg) error {
	if len(args) > 0 && args[0].static && args[0].text == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return nil
	}
	if f := args[0]; !f.static || strings.HasPrefix(f.text, "-") {
		return fmt.Errorf("the format %s must be literal and not an option", f)
	}
	return nil
}
