package guard

// The guard's rules for programs that change files and directories.

import (
	"path/filepath"

	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"sbx.dev/sbx/hooks/shell"
)

func (s *gstate) outFileArg(p string) {
	if hasTaint(p) {
		s.fail("an output file computed at run time (%s) cannot be checked", printable(p))
		return
	}
	if why := s.writeCheck(p, false); why != "" {
		s.fail("writing %s: %s", p, why)
	}
}

var systemDirs = []string{"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
	"/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/local", "/usr/share", "/usr/include",
	"/usr/libexec", "/usr/local/bin", "/var/lib", "/var/log", "/var/cache", "/home/*"}

func (s *gstate) systemDir(p string) string {
	dirs := append(slices.Clone(systemDirs), s.g.homes()...)
	dirs = append(dirs, filepath.Clean(s.g.Workspace))
	for _, a := range s.absPaths(p) {
		for _, d := range dirs {
			if segsMatch(splitPath(a), splitPath(d), s.glob) {
				return d
			}
		}
	}
	return ""
}

func operands(args []string) []string {
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			out = append(out, a)
		}
	}
	return out
}

func (s *gstate) remove(base string, args []string, _ stdin) {
	for _, a := range args {
		if a == "--no-preserve-root" {
			s.fail("%s --no-preserve-root deletes the whole system", base)
			return
		}
	}
	for _, p := range operands(args) {
		if d := s.systemDir(p); d != "" {
			s.fail("%s %s deletes the system directory %s; deleting inside /workspace is fine", base, printable(p), d)
			return
		}
		if why := s.writeCheck(p, true); why != "" {
			s.fail("%s %s would delete %s", base, printable(p), why)
			return
		}
	}
}

func (s *gstate) moveLink(base string, args []string, in stdin) {
	ops := operands(args)
	for i, p := range ops {
		if (base == "ln" || base == "link") && i < len(ops)-1 {
			// A link's target is only named, not written.
			if why := s.planeCheck(p); why != "" {
				s.fail("%s %s reaches %s", base, printable(p), why)
				return
			}
			continue
		}
		if base == "mv" && i < len(ops)-1 {
			if d := s.systemDir(p); d != "" {
				s.fail("mv %s moves the system directory %s away", printable(p), d)
				return
			}
		}
		if why := s.writeCheck(p, true); why != "" {
			s.fail("%s %s reaches %s", base, printable(p), why)
			return
		}
	}
	if base == "mv" || base == "ln" {
		s.intoDir(base, ops)
		for _, t := range optValues(args, "-t", "--target-directory") {
			s.targetDir(base+" -t", t)
		}
	}
}

func (s *gstate) intoDir(base string, ops []string) {
	if len(ops) < 2 {
		return
	}
	dest := ops[len(ops)-1]
	for _, src := range ops[:len(ops)-1] {
		p := strings.TrimSuffix(dest, "/") + "/" + filepath.Base(src)
		if why := s.writeCheck(p, false); why != "" {
			s.fail("%s into %s writes %s", base, printable(dest), why)
			return
		}
	}
}

func (s *gstate) copyInto(base string, args []string, _ stdin) {
	ops := operands(args)
	if base == "rsync" {
		for i, a := range args {
			if (a == "-e" || a == "--rsh") && i+1 < len(args) {
				s.nestedCode(args[i+1], "rsync -e")
			} else if v, ok := strings.CutPrefix(a, "--rsh="); ok {
				s.nestedCode(v, "rsync --rsh")
			}
		}
		for _, o := range ops {
			if strings.Contains(o, ":") {
				s.fact(&s.network, "rsync to "+printable(o))
			}
		}
	}
	s.intoDir(base, ops)
	if len(ops) >= 2 && !strings.Contains(ops[len(ops)-1], ":") {
		s.targetFile(base, ops[len(ops)-1])
	}
	for _, t := range optValues(args, "-t", "--target-directory") {
		s.targetDir(base+" -t", t)
	}
	recursive := base == "rsync"
	for _, a := range args {
		if a == "-r" || a == "-R" || a == "-a" || a == "--recursive" || a == "--archive" ||
			strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsAny(a, "rRa") {
			recursive = true
		}
	}
	if recursive && len(ops) >= 2 && !strings.Contains(ops[len(ops)-1], ":") {
		if why := s.writeCheck(ops[len(ops)-1], true); why != "" {
			s.fail("a recursive %s into %s could overwrite %s", base, printable(ops[len(ops)-1]), why)
		}
	}
}

func (s *gstate) extract(base string, args []string, _ stdin) {
	dir, extracting := "", base == "unzip"
	for i, a := range args {
		switch {
		case base != "unzip" && (a == "-C" || a == "--directory") && i+1 < len(args):
			dir = args[i+1]
		case base != "unzip" && strings.HasPrefix(a, "-C") && len(a) > 2:
			dir = a[2:]
		case base != "unzip" && strings.HasPrefix(a, "--directory="):
			dir = strings.TrimPrefix(a, "--directory=")
		case base == "unzip" && a == "-d" && i+1 < len(args):
			dir = args[i+1]
		case base != "unzip" && (a == "-x" || a == "--extract" || a == "--get" ||
			!strings.HasPrefix(a, "--") && strings.Contains(a, "x") && (i == 0 || strings.HasPrefix(a, "-"))):
			extracting = true
		}
	}
	if !extracting {
		return
	}
	if dir == "" {
		dir = "."
	}
	if hasTaint(dir) {
		s.fail("%s extracts into a directory the guard cannot determine", base)
		return
	}
	if why := s.writeCheck(dir, true); why != "" {
		s.fail("%s extracts into %s, which holds %s; extract into a new directory (such as /opt/NAME) instead", base, printable(dir), why)
	}
}

var removers = map[string]bool{"rm": true, "rmdir": true, "unlink": true}

func (s *gstate) find(_ string, args []string, _ stdin) {
	var starts []string
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "-H" || a == "-L" || a == "-P" {
			continue
		}
		if a == "-D" || strings.HasPrefix(a, "-O") {
			if a == "-D" {
				i++
			}
			continue
		}
		if strings.HasPrefix(a, "-") || a == "(" || a == "!" || a == "," {
			break
		}
		starts = append(starts, a)
	}
	if len(starts) == 0 {
		starts = []string{"."}
	}
	for ; i < len(args); i++ {
		switch a := args[i]; a {
		case "-exec", "-execdir", "-ok", "-okdir":
			var cmd []string
			j := i + 1
			// A file found under start points that all lie in the
			// workspace or /tmp is judged as one of them; elsewhere it
			// could be any file.
			// Only for rm and its kin, which do not follow a symlink
			// found there.
			found := taintMark
			if len(starts) == 1 && s.scratchOnly(starts[0]) && i+1 < len(args) && removers[filepath.Base(args[i+1])] {
				found = starts[0]
			}
			for ; j < len(args) && args[j] != ";" && !(args[j] == "+" && j > i+1 && args[j-1] == "{}"); j++ {
				c := args[j]
				if strings.Contains(c, "{}") {
					c = found
				}
				cmd = append(cmd, c)
			}
			s.run(cmd, stdinNone)
			i = j
		case "-delete":
			for _, st := range starts {
				s.remove("find -delete", []string{st}, stdinNone)
			}
		case "-fprint", "-fprint0", "-fprintf", "-fls":
			if i+1 < len(args) {
				s.outFileArg(args[i+1])
			}
		}
		if s.err != nil {
			return
		}
	}
}

// pipeFrom is the standard input a pipe gives its right side: names of
// files below a workspace directory when the left side is a plain find
// there, anything otherwise.
func (s *gstate) pipeFrom(left *syntax.Stmt) stdin {
	in := stdinPipe
	ce, ok := left.Cmd.(*syntax.CallExpr)
	if !ok || len(left.Redirs) > 0 || len(ce.Args) < 2 || ce.Args[0].Lit() != "find" {
		return in
	}
	var starts []string
	for _, w := range ce.Args[1:] {
		a := w.Lit()
		if a == "" || strings.HasPrefix(a, "-") || a == "(" || a == "!" {
			break
		}
		starts = append(starts, a)
	}
	if len(starts) == 1 && s.scratchOnly(starts[0]) {
		in.files = starts[0]
	}
	return in
}

func (s *gstate) xargs(_ string, args []string, in stdin) {
	replace := ""
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") {
			break
		}
		switch {
		case a == "-I":
			if i+1 < len(args) {
				i++
				replace = args[i]
			}
		case strings.HasPrefix(a, "-I"):
			replace = a[2:]
		case a == "-i" || a == "--replace":
			replace = "{}"
		case strings.HasPrefix(a, "-i"), strings.HasPrefix(a, "--replace="):
			_, replace, _ = strings.Cut(strings.TrimPrefix(a, "-i"), "=")
			if replace == "" {
				replace = strings.TrimPrefix(a, "-i")
			}
		case a == "-a" || a == "--arg-file":
			if i+1 < len(args) {
				i++
				s.inFile(args[i])
			}
		case a == "-d" || a == "-E" || a == "-L" || a == "-n" || a == "-P" || a == "-s" || a == "-e" || a == "-l":
			i++
		}
	}
	cmd := slices.Clone(args[min(i, len(args)):])
	if len(cmd) == 0 {
		cmd = []string{"echo"}
	}
	found := taintMark
	if in.files != "" && removers[filepath.Base(cmd[0])] {
		found = in.files // rm does not follow a symlink it is given
	}
	if replace != "" {
		for k, c := range cmd {
			if strings.Contains(c, replace) {
				cmd[k] = found
			}
		}
	} else {
		cmd = append(cmd, found)
	}
	s.run(cmd, stdinNone)
}

func (s *gstate) cd(_ string, args []string, _ stdin) {
	ops := operands(args)
	switch {
	case len(ops) == 0:
		s.cwds = []string{s.g.homes()[0]}
	case ops[0] == "-":
		s.cwds = nil
	default:
		s.cdTo(ops[0])
	}
}

func (s *gstate) cdTo(p string) {
	if hasTaint(p) || s.cdpath {
		s.cwds = nil
		return
	}
	if strings.Contains(p, envMark) {
		return
	}
	ps := s.absPaths(p)
	var out []string
	for _, d := range ps {
		if strings.Contains(d, "**") {
			s.cwds = nil
			return
		}
		if !hasGlob(d) { // for d in */; do (cd $d && make); done
			if r, err := resolveLinks(d); err == nil {
				d = r
			}
		}
		out = append(out, d)
	}
	s.cwds = out
	if len(out) == 0 {
		s.cwds = nil
	}
}

func (s *gstate) read(base string, args []string, _ stdin) {
	valued := map[string]string{"read": "adinNptu", "mapfile": "dnOsuCc", "readarray": "dnOsuCc", "getopts": ""}[base]
	var names []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			c := a[len(a)-1]
			if strings.IndexByte(valued, c) >= 0 && i+1 < len(args) {
				i++
				if c == 'a' {
					names = append(names, args[i])
				}
			}
			continue
		}
		names = append(names, a)
	}
	switch base {
	case "getopts":
		if len(names) >= 2 {
			names = names[1:2]
		}
	case "mapfile", "readarray":
		if len(names) == 0 {
			names = []string{"MAPFILE"}
		}
	}
	if len(names) == 0 {
		names = []string{"REPLY"}
	}
	for _, n := range names {
		s.arithmText(n)
		n, _, _ = strings.Cut(n, "[")
		s.vars[n] = strVar(taintMark)
	}
}

func recursiveReader(base string, args []string) bool {
	switch base {
	case "rg", "ag", "ack", "ack-grep":
		return true
	case "grep", "egrep", "fgrep", "zgrep":
		for _, a := range shell.Options(argList(args)) {
			if a == "--recursive" || a == "--dereference-recursive" || a == "-d" ||
				!strings.HasPrefix(a, "--") && strings.ContainsAny(a, "rR") {
				return true
			}
		}
	}
	return false
}

func (s *gstate) shadowsProgram(name string) bool {
	if strings.Contains(name, "/") {
		return false
	}
	for _, w := range s.written {
		if filepath.Base(w) == name {
			return true
		}
	}
	return false
}
