package guard

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"sbx.dev/sbx/hooks/shell"
)

// Markers stand for values the guard cannot know before the command runs.
// A command holding either byte is denied; one that makes them at run time
// ($'\x02') only makes its words look less known, which denies more.
const (
	// envMark is a variable from the environment the command did not set:
	// the image and the (guarded) profile chose it, not the command.
	envMark = "\x01"
	// taintMark is a value the command computes at run time (command
	// output, read, arithmetic): it could be anything.
	taintMark = "\x02"
)

func hasTaint(s string) bool   { return strings.Contains(s, taintMark) }
func hasMark(s string) bool    { return strings.ContainsAny(s, envMark+taintMark) }
func stripEnv(s string) string { return strings.ReplaceAll(s, envMark, "") }

// CheckBash returns nil when the Bash command passes the guard, run from
// cwd (absolute, or "" when unknown). It parses the command as bash and
// walks the tree in order, following the variables, functions and
// directories the command sets, every nested shell (bash -c, eval, xargs,
// find -exec, sudo, env, ...) and every command and process substitution.
// Anything it cannot resolve where the value matters is an error.
func (g Guard) CheckBash(command, cwd string) error {
	_, err := g.checkBash(command, cwd, nil)
	return err
}

// checkBash is CheckBash with the files the session filled from the
// environment earlier (tainted); it returns the walk's state.
func (g Guard) checkBash(command, cwd string, tainted []string) (s *gstate, err error) {
	if len(command) > shell.MaxCommand {
		return nil, fmt.Errorf("the command is longer than %d bytes", shell.MaxCommand)
	}
	if strings.ContainsRune(command, 0) {
		return nil, errors.New("the command contains a NUL byte")
	}
	if strings.ContainsAny(command, envMark+taintMark) {
		return nil, errors.New("the command contains control characters \\x01 or \\x02")
	}
	f, err := shell.Parse(command)
	if err != nil {
		return nil, err
	}
	s = &gstate{g: g, rules: g.rules(), vars: map[string]expand.Variable{}, funcs: map[string]*syntax.Stmt{}, tainted: tainted}
	if filepath.IsAbs(cwd) {
		s.cwds = []string{filepath.Clean(cwd)}
	}
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("internal error while checking the command: %v", p)
		}
	}()
	s.stmts(f.Stmts, stdinNone)
	if s.err != nil {
		return s, s.err
	}
	return s, s.verdict()
}

// verdict combines what the whole command does: a secret or an
// environment dump together with the network is exfiltration, even when
// the two sit in different statements joined by a variable or a file.
func (s *gstate) verdict() error {
	if s.taintHit && s.sends != "" {
		return fmt.Errorf("the command sends (%s) a file filled from the environment earlier in the session", s.sends)
	}
	if s.sends != "" && s.envDump != "" {
		return fmt.Errorf("the command dumps the environment (%s) and sends it (%s)", s.envDump, s.sends)
	}
	if s.network == "" {
		return nil
	}
	if s.secret != "" {
		return fmt.Errorf("the command uses a secret (%s) and the network (%s): credential exfiltration", s.secret, s.network)
	}
	if s.envDump != "" {
		return fmt.Errorf("the command dumps the environment (%s) and uses the network (%s)", s.envDump, s.network)
	}
	return nil
}

// stdin says where a command's standard input comes from.
type stdin struct {
	kind int    // stdinNone, stdinPipe, stdinFile, stdinCode
	code string // stdinCode: the here-document or here-string text
	// files: stdinPipe from `find DIR` with DIR in the workspace or
	// /tmp: the names read are files below DIR.
	files string
}

const (
	stdinNoneKind = iota
	stdinPipeKind
	stdinFileKind
	stdinCodeKind
)

var (
	stdinNone = stdin{kind: stdinNoneKind}
	stdinPipe = stdin{kind: stdinPipeKind}
)

// gstate is the guard's walk over one command. Facts accumulate over the
// whole command; the first deny ends the walk.
type gstate struct {
	g     Guard
	rules []pathRule
	vars  map[string]expand.Variable
	funcs map[string]*syntax.Stmt
	cwds  []string // the possible working directories; nil when unknown
	pos   []string // positional parameters of a nested shell or function
	inPos bool     // pos is set (top level: the Bash tool's shell has none)
	depth int
	steps int
	glob  bool // dotglob: globs match dot files
	// cdpath: the command set CDPATH, so cd DIR may go anywhere.
	cdpath   bool
	noSplit  bool     // literal(): IFS is empty
	pushd    bool     // the command used pushd: ~N names its stack
	globstar bool     // shopt -s globstar: ** spans directories
	written  []string // files this command writes, as absolute paths
	noSystem bool     // planeCheck: the system directories do not count
	// tainted are files the session filled from the environment earlier;
	// taintHit: the command names one.
	tainted  []string
	taintHit bool
	handlers map[string]handler
	err      error

	secret, network, envDump string
	// sends: the command hands files to someone else without naming a
	// host (git push to origin, npm publish).
	sends string
}

func (s *gstate) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf(format, args...)
	}
}

func (s *gstate) fact(dst *string, what string) {
	if *dst == "" {
		*dst = what
	}
}

// maxSteps bounds the walk: loops are walked twice and functions at each
// call, so nesting multiplies the work; past this the command is denied.
const maxSteps = 5000

func (s *gstate) enter() bool {
	s.depth++
	s.steps++
	if s.depth > shell.MaxDepth {
		s.fail("the command nests deeper than %d levels", shell.MaxDepth)
	}
	if s.steps > maxSteps {
		s.fail("the command is too complex for the guard to follow (more than %d steps)", maxSteps)
	}
	return s.err == nil
}

func (s *gstate) leave() { s.depth-- }

// snapshot and merge model branches: after code that may or may not run,
// a variable or directory that differs between the paths is unknown.
type snap struct {
	vars map[string]expand.Variable
	cwds []string
}

func (s *gstate) snapshot() snap { return snap{vars: maps.Clone(s.vars), cwds: s.cwds} }

func (s *gstate) restore(sn snap) { s.vars, s.cwds = maps.Clone(sn.vars), sn.cwds }

// merge joins the current state with other possible ones.
func (s *gstate) merge(others ...snap) {
	for _, o := range others {
		for k, v := range o.vars {
			if cur, ok := s.vars[k]; !ok || !sameVar(cur, v) {
				s.vars[k] = strVar(taintMark)
			}
		}
		for k := range s.vars {
			if _, ok := o.vars[k]; !ok {
				s.vars[k] = strVar(taintMark)
			}
		}
		s.cwds = mergeDirs(s.cwds, o.cwds)
	}
}

// maxDirs bounds the working directories followed at once.
const maxDirs = 8

// mergeDirs is the union of two sets of possible directories; unknown
// (nil) absorbs everything.
func mergeDirs(a, b []string) []string {
	if a == nil || b == nil {
		return nil
	}
	out := slices.Clone(a)
	for _, d := range b {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	if len(out) > maxDirs {
		return nil
	}
	return out
}

func sameVar(a, b expand.Variable) bool {
	return a.Kind == b.Kind && a.Str == b.Str && slices.Equal(a.List, b.List) && maps.Equal(a.Map, b.Map)
}

func strVar(v string) expand.Variable {
	return expand.Variable{Set: true, Kind: expand.String, Str: v}
}

func (s *gstate) stmts(list []*syntax.Stmt, in stdin) {
	for _, st := range list {
		if s.err != nil {
			return
		}
		s.stmt(st, in)
	}
}

func (s *gstate) stmt(st *syntax.Stmt, in stdin) {
	if !s.enter() {
		return
	}
	defer s.leave()
	for _, r := range st.Redirs {
		s.redirect(r, &in)
	}
	if st.Cmd != nil && s.err == nil {
		s.command(st.Cmd, in)
	}
}

func (s *gstate) command(cmd syntax.Command, in stdin) {
	switch x := cmd.(type) {
	case *syntax.CallExpr:
		s.call(x, in)
	case *syntax.Block:
		s.stmts(x.Stmts, in)
	case *syntax.Subshell:
		sn := s.snapshot()
		s.stmts(x.Stmts, in)
		s.merge(sn)
	case *syntax.BinaryCmd:
		switch x.Op {
		case syntax.Pipe, syntax.PipeAll:
			sn := s.snapshot()
			s.stmt(x.X, in)
			s.stmt(x.Y, s.pipeFrom(x.X))
			s.merge(sn)
		default: // && and ||: the right side may not run
			s.stmt(x.X, in)
			sn := s.snapshot()
			s.stmt(x.Y, in)
			s.merge(sn)
		}
	case *syntax.IfClause:
		var ends []snap
		for c := x; c != nil && s.err == nil; c = c.Else {
			s.stmts(c.Cond, in)
			ends = append(ends, s.branch(func() { s.stmts(c.Then, in) }))
		}
		s.merge(ends...)
	case *syntax.WhileClause:
		s.loop(func() { s.stmts(x.Cond, in); s.stmts(x.Do, in) })
	case *syntax.ForClause:
		s.forClause(x, in)
	case *syntax.CaseClause:
		s.fields(x.Word)
		var ends []snap
		for _, item := range x.Items {
			for _, p := range item.Patterns {
				s.fields(p)
			}
			ends = append(ends, s.branch(func() { s.stmts(item.Stmts, in) }))
		}
		s.merge(ends...)
	case *syntax.TestClause:
		s.test(x.X)
	case *syntax.ArithmCmd:
		s.arithm(x.X)
	case *syntax.LetClause:
		for _, e := range x.Exprs {
			s.arithm(e)
		}
	case *syntax.DeclClause:
		s.decl(x)
	case *syntax.FuncDecl:
		if x.Name == nil {
			s.fail("a function without a name")
			return
		}
		s.funcs[x.Name.Value] = x.Body
		// Walk the body once with unknown arguments: a function may run
		// later through a trap, an export -f or a handler name.
		saved, savedIn := s.pos, s.inPos
		s.pos, s.inPos = []string{taintMark}, true
		sn := s.snapshot()
		s.stmt(x.Body, in)
		s.merge(sn)
		s.pos, s.inPos = saved, savedIn
	case *syntax.TimeClause:
		if x.Stmt != nil {
			s.stmt(x.Stmt, in)
		}
	case *syntax.CoprocClause:
		s.stmt(x.Stmt, in)
	default:
		s.fail("the shell construct %T is not understood by the guard", cmd)
	}
}

// branch walks code that may run, and returns the state it ends in while
// leaving the state as it was.
func (s *gstate) branch(walk func()) snap {
	sn := s.snapshot()
	walk()
	end := s.snapshot()
	s.restore(sn)
	return end
}

// loop walks a body that runs zero or more times: twice, so values carried
// from one iteration to the next are seen, then merged with not running.
func (s *gstate) loop(body func()) {
	sn := s.snapshot()
	body()
	s.merge(sn)
	body()
	s.merge(sn)
}

// maxForItems bounds how many loop values the guard follows one by one.
const maxForItems = 16

func (s *gstate) forClause(x *syntax.ForClause, in stdin) {
	switch l := x.Loop.(type) {
	case *syntax.WordIter:
		var items []string
		if !l.InPos.IsValid() {
			items = s.positional()
		}
		for _, w := range l.Items {
			items = append(items, s.fields(w)...)
		}
		name := l.Name.Value
		if len(items) > maxForItems {
			items = []string{taintMark}
		}
		var ends []snap
		for _, it := range items {
			ends = append(ends, s.branch(func() {
				s.vars[name] = strVar(it)
				s.loop(func() { s.stmts(x.Do, in) })
			}))
		}
		s.merge(ends...)
	case *syntax.CStyleLoop:
		s.arithm(l.Init)
		s.loop(func() { s.arithm(l.Cond); s.stmts(x.Do, in); s.arithm(l.Post) })
	default:
		s.fail("loop %T is not understood by the guard", x.Loop)
	}
}

func (s *gstate) positional() []string {
	if !s.inPos {
		return nil
	}
	return s.pos
}

// test walks a [[ ]] expression. bash evaluates the operands of -eq and
// friends, and the names given to -v, as arithmetic: a subscript there
// runs command substitutions hidden inside quotes.
func (s *gstate) test(e syntax.TestExpr) {
	if e == nil || !s.enter() {
		return
	}
	defer s.leave()
	switch x := e.(type) {
	case *syntax.Word:
		s.fields(x)
	case *syntax.UnaryTest:
		if x.Op == syntax.TsVarSet || x.Op == syntax.TsRefVar {
			if w, ok := x.X.(*syntax.Word); ok {
				s.arithmText(s.literal(w))
				return
			}
		}
		s.test(x.X)
	case *syntax.ParenTest:
		s.test(x.X)
	case *syntax.BinaryTest:
		switch x.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			for _, side := range []syntax.TestExpr{x.X, x.Y} {
				if w, ok := side.(*syntax.Word); ok {
					s.arithmText(s.literal(w))
				} else {
					s.test(side)
				}
			}
			return
		}
		s.test(x.X)
		s.test(x.Y)
	default:
		s.fail("test expression %T is not understood by the guard", e)
	}
}

// arithm walks an arithmetic expression: its words' substitutions, and
// every variable it reads, whose value bash evaluates as arithmetic again.
func (s *gstate) arithm(e syntax.ArithmExpr) {
	if e == nil || s.err != nil {
		return
	}
	syntax.Walk(e, func(n syntax.Node) bool {
		if s.err != nil {
			return false
		}
		switch x := n.(type) {
		case *syntax.Word:
			if len(x.Parts) == 1 {
				if l, ok := x.Parts[0].(*syntax.Lit); ok {
					s.arithmVar(l.Value)
					return false
				}
			}
			// $x, "$(cmd)", 'a[$(cmd)]': bash evaluates the text again
			// as arithmetic (let 'x=a[$(curl ...)]').
			s.arithmText(s.literal(x))
			return false
		case *syntax.BinaryArithm:
			if isAssignOp(x.Op) {
				if w, ok := x.X.(*syntax.Word); ok {
					if name := w.Lit(); name != "" {
						s.vars[name] = strVar(taintMark)
					}
				}
			}
		case *syntax.UnaryArithm:
			if x.Op == syntax.Inc || x.Op == syntax.Dec {
				if w, ok := x.X.(*syntax.Word); ok && w.Lit() != "" {
					s.vars[w.Lit()] = strVar(taintMark)
				}
			}
		}
		return true
	})
}

func isAssignOp(op syntax.BinAritOperator) bool {
	switch op {
	case syntax.Assgn, syntax.AddAssgn, syntax.SubAssgn, syntax.MulAssgn, syntax.QuoAssgn, syntax.RemAssgn,
		syntax.AndAssgn, syntax.OrAssgn, syntax.XorAssgn, syntax.ShlAssgn, syntax.ShrAssgn:
		return true
	}
	return false
}

// arithmVar checks a variable read in arithmetic: bash evaluates its value
// as an expression, so a value holding $( or ` runs a command.
func (s *gstate) arithmVar(name string) {
	if name == "" {
		return
	}
	base, _, _ := strings.Cut(name, "[")
	if isSecretName(base) {
		s.fact(&s.secret, "$"+base)
	}
	if v, ok := s.vars[base]; ok {
		s.arithmText(v.String())
	}
}

// arithmText checks text bash will evaluate as arithmetic.
func (s *gstate) arithmText(t string) {
	if hasTaint(t) || strings.Contains(t, "$(") || strings.Contains(t, "`") || strings.Contains(t, "${") {
		s.fail("a value evaluated as arithmetic (%q) could run a command in an array subscript", printable(t))
	}
}

// decl handles declare, local, export, readonly, typeset and nameref.
func (s *gstate) decl(x *syntax.DeclClause) {
	variant := x.Variant.Value
	var flags []string
	named := 0
	for _, a := range x.Args {
		if a.Naked && a.Name == nil && a.Value != nil {
			v := s.literal(a.Value)
			if strings.HasPrefix(v, "-") || strings.HasPrefix(v, "+") {
				flags = append(flags, v)
				continue
			}
			// declare "$x": the name and value are computed.
			if hasMark(v) {
				s.fail("%s with a computed name (%s) cannot be followed", variant, shell.NodeString(a.Value))
				return
			}
			name, val, _ := strings.Cut(v, "=")
			s.vars[name] = strVar(val)
			named++
			continue
		}
		named++
		s.assign(a, strings.Contains(strings.Join(flags, ""), "n"))
	}
	all := strings.Join(flags, "")
	if named == 0 && (variant == "export" || variant == "declare" || variant == "typeset" || variant == "readonly" ||
		strings.ContainsAny(all, "px")) && !strings.ContainsAny(all, "fF") {
		s.fact(&s.envDump, strings.TrimSpace(variant+" "+strings.Join(flags, " ")))
	}
	if strings.Contains(all, "i") {
		for _, a := range x.Args {
			if a.Value != nil && a.Name != nil {
				s.arithmText(s.literal(a.Value))
			}
		}
	}
}

// assign records name=value (name[i]=value, name=(a b), name+=value).
func (s *gstate) assign(a *syntax.Assign, nameref bool) {
	if a.Name == nil {
		return
	}
	name := a.Name.Value
	if isSecretName(name) && a.Append {
		s.fact(&s.secret, "$"+name)
	}
	if a.Index != nil {
		s.arithm(a.Index)
		s.vars[name] = strVar(taintMark)
		return
	}
	if a.Array != nil {
		var list []string
		for _, el := range a.Array.Elems {
			if el.Index != nil {
				s.arithm(el.Index)
			}
			if el.Value != nil {
				list = append(list, s.fields(el.Value)...)
			}
		}
		s.vars[name] = expand.Variable{Set: true, Kind: expand.Indexed, List: list}
		return
	}
	val := ""
	if a.Value != nil {
		val = s.literal(a.Value)
	}
	if a.Append {
		if old, ok := s.vars[name]; ok {
			val = old.String() + val
		} else {
			val = envMark + val
		}
	}
	if nameref {
		// declare -n r=NAME: $r reads NAME.
		if isSecretName(stripEnv(val)) || hasMark(val) {
			s.fact(&s.secret, "a reference to "+printable(val))
		}
		val = taintMark
	}
	if cmdVars[name] {
		s.nestedCode(val, name+"=")
	}
	s.loaderVar(name, val)
	if name == "CDPATH" {
		s.cdpath = true
	}
	if name == "GLOBIGNORE" {
		s.glob = true // a non-empty GLOBIGNORE turns on dotglob
	}
	s.vars[name] = strVar(val)
}

// cmdVars are variables whose value some program runs as a shell command.
var cmdVars = map[string]bool{
	"GIT_SSH_COMMAND": true, "GIT_SSH": true, "GIT_PROXY_COMMAND": true, "GIT_EXTERNAL_DIFF": true,
	"GIT_PAGER": true, "GIT_EDITOR": true, "GIT_ASKPASS": true, "GIT_SEQUENCE_EDITOR": true, "SSH_ASKPASS": true,
	"PAGER": true, "EDITOR": true, "VISUAL": true, "PROMPT_COMMAND": true, "MANPAGER": true, "LESSOPEN": true,
	"LESSCLOSE": true, "SYSTEMD_PAGER": true, "BROWSER": true,
}

// nestedCode walks text a program will run as a shell command.
func (s *gstate) nestedCode(code, what string) {
	if s.err != nil {
		return
	}
	if hasMark(code) {
		s.fail("%s runs a command computed at run time (%s), which cannot be checked", what, printable(code))
		return
	}
	if !s.enter() {
		return
	}
	defer s.leave()
	f, err := shell.Parse(code)
	if err != nil {
		s.fail("%s: %v", what, err)
		return
	}
	s.stmts(f.Stmts, stdinNone)
}

// shellCode walks the program of a nested shell (bash -c CODE a0 a1...):
// it sees the outer variables (exported ones are inherited, and assuming
// the rest are too only errs towards knowing more) and its own arguments.
func (s *gstate) shellCode(code string, args []string, what string) {
	saved, savedIn := s.pos, s.inPos
	s.pos, s.inPos = args, true
	sn := s.snapshot()
	s.nestedCode(code, what)
	s.merge(sn)
	s.pos, s.inPos = saved, savedIn
}

// redirect checks one redirection and, for a here-document or
// here-string, records it as the command's standard input.
func (s *gstate) redirect(r *syntax.Redirect, in *stdin) {
	if r.N != nil && !shell.IsDigits(r.N.Value) {
		// {fd}>file: the variable gets a number.
		s.vars[r.N.Value] = strVar(envMark)
	}
	switch r.Op {
	case syntax.Hdoc, syntax.DashHdoc:
		if r.Hdoc != nil {
			*in = stdin{kind: stdinCodeKind, code: s.document(r.Hdoc)}
		}
		return
	case syntax.WordHdoc:
		*in = stdin{kind: stdinCodeKind, code: s.literal(r.Word)}
		return
	}
	target := s.literal(r.Word)
	if s.err != nil {
		return
	}
	switch r.Op {
	case syntax.DplOut, syntax.DplIn:
		if shell.IsDigits(target) || target == "-" || strings.HasSuffix(target, "-") && shell.IsDigits(strings.TrimSuffix(target, "-")) {
			return
		}
		if r.Op == syntax.DplIn {
			s.fail("redirection %s%s is not a file descriptor", r.Op, printable(target))
			return
		}
		// >&file is &>file.
		s.outFile(target, r)
	case syntax.RdrIn:
		s.inFile(target)
		*in = stdin{kind: stdinFileKind}
	case syntax.RdrInOut:
		s.inFile(target)
		s.outFile(target, r)
	default:
		s.outFile(target, r)
	}
}

func (s *gstate) inFile(p string) {
	s.specialPath(p)
	s.taintedMention(p)
	if why := s.readCheck(p); why != "" {
		s.fail("reading %s: %s", printable(p), why)
	}
}

func (s *gstate) outFile(p string, r *syntax.Redirect) {
	s.specialPath(p)
	if shell.OutputSinks[p] || strings.HasPrefix(p, "/dev/fd/") {
		return
	}
	if hasTaint(p) {
		s.fail("output redirection %s to a path computed at run time (%s) cannot be checked", r.Op, printable(p))
		return
	}
	s.wrote(p)
	if why := s.writeCheck(p, false); why != "" {
		s.fail("output redirection to %s writes %s", printable(p), why)
	}
}

// specialPath judges the paths that are not files: bash's /dev/tcp and
// /dev/udp network files, and /proc's view of processes (an environment
// is a source; another process's is off limits).
func (s *gstate) specialPath(p string) {
	if strings.Contains(p, "/dev/tcp/") || strings.Contains(p, "/dev/udp/") {
		s.fact(&s.network, "bash network redirection "+printable(p))
	}
	if strings.HasPrefix(p, "/proc/") && strings.HasSuffix(p, "/environ") {
		s.fact(&s.envDump, printable(p))
		// Its own environment the agent may look at; another process's
		// (the root guest agent's, a sibling's) is never everyday work.
		if pid := splitPath(p)[1]; pid != "self" && pid != "thread-self" {
			s.fail("reading %s reads another process's environment, which holds its credentials", printable(p))
		}
	}
	// Another process's memory, files and root: never the agent's work.
	if segs := splitPath(p); len(segs) >= 3 && segs[0] == "proc" && segs[1] != "self" && segs[1] != "thread-self" {
		switch segs[2] {
		case "mem", "root", "cwd", "fd", "map_files":
			s.fail("%s reaches into another process (its %s)", printable(p), segs[2])
		}
	}
}

// absPaths turns a word that names a path into the absolute paths it may
// be, as segments: relative to the current directory when it is known,
// relative to any directory ("**") when not.
func (s *gstate) absPaths(p string) []string {
	p = stripEnv(p)
	if p == "" {
		return nil
	}
	if strings.Contains(p, `\`) {
		// Expansion keeps backslashes where bash drops them (the
		// replacement of ${p//:/\/}): judge both readings.
		return append(s.absPathsAs(p), s.absPathsAs(strings.ReplaceAll(p, `\`, ""))...)
	}
	return s.absPathsAs(p)
}

func (s *gstate) absPathsAs(p string) []string {
	if p == "" {
		return nil
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		// A tilde bash did not expand (after a colon in an assignment):
		// judged as the home directory, the stricter reading.
		p = s.g.homes()[0] + p[1:]
	}
	if !s.globstar {
		// Without globstar, ** is *: one directory level. (Rules and an
		// unknown directory use "**" for any depth.)
		p = starStar(p)
	}
	if filepath.IsAbs(p) {
		return []string{filepath.Clean(p)}
	}
	if s.cwds == nil {
		return []string{"/**/" + filepath.Clean(p)}
	}
	var out []string
	for _, d := range s.cwds {
		out = append(out, filepath.Join(d, p))
	}
	return out
}

// writeCheck names the protected file a write to p would reach, or "".
// A relative path in an unknown directory could be any file, and a write
// there is judged so.
func (s *gstate) writeCheck(p string, subtree bool) string {
	return s.check(p, subtree, false, false)
}

// mentionCheck is writeCheck for an argument that may or may not be a
// path: in an unknown directory it is judged by its names.
func (s *gstate) mentionCheck(p string) string {
	return s.check(p, false, false, true)
}

func (s *gstate) readCheck(p string) string {
	return s.check(p, false, true, true)
}

func (s *gstate) check(p string, subtree, read, lenient bool) string {
	for _, a := range s.absPaths(p) {
		byName := lenient && strings.HasPrefix(a, "/**/")
		for _, q := range s.pathForms(a) {
			rules := s.rules
			if s.noSystem || lenient {
				// Naming a system path is not writing it.
				rules = withoutSystem(s.rules)
			}
			if why := s.g.matchRules(rules, splitPath(q), subtree, read, s.glob, byName); why != "" {
				return why
			}
		}
	}
	return ""
}

// pathForms is a path as written and, when it has no glob and exists in
// part, with its symlinks resolved.
func (s *gstate) pathForms(a string) []string {
	if hasGlob(a) || strings.Contains(a, "**") {
		return []string{a}
	}
	return normalized(a)
}

func printable(s string) string {
	s = strings.ReplaceAll(s, envMark, "$ENV")
	return strings.ReplaceAll(s, taintMark, "$(...)")
}

// environ is the variables as expand sees them, recording secret reads.
type environ struct{ s *gstate }

func (e environ) Get(name string) expand.Variable {
	s := e.s
	if isSecretName(name) {
		s.fact(&s.secret, "$"+name)
	}
	if name == "IFS" && s.noSplit {
		return strVar("")
	}
	if v, ok := s.vars[name]; ok {
		return v
	}
	switch name {
	case "HOME":
		return strVar(s.g.homes()[0])
	case "PWD":
		if len(s.cwds) == 1 {
			return strVar(s.cwds[0])
		}
		return strVar(taintMark)
	case "OLDPWD", "REPLY", "BASH_REMATCH", "PIPESTATUS", "DIRSTACK":
		return strVar(taintMark)
	case "IFS":
		return expand.Variable{}
	case "@", "*":
		if s.inPos {
			return expand.Variable{Set: true, Kind: expand.Indexed, List: s.pos}
		}
		return expand.Variable{}
	case "#":
		return strVar(fmt.Sprint(len(s.positional())))
	}
	if shell.IsDigits(name) {
		if !s.inPos {
			if name == "0" {
				return strVar(envMark)
			}
			return expand.Variable{}
		}
		i := 0
		fmt.Sscan(name, &i)
		if i == 0 {
			return strVar(envMark)
		}
		if i <= len(s.pos) {
			return strVar(s.pos[i-1])
		}
		return expand.Variable{}
	}
	if u, ok := strings.CutPrefix(name, "HOME "); ok {
		n := strings.TrimLeft(u, "+-")
		switch {
		case u == "root":
			return strVar("/root")
		case (u == "0" || u == "+0" || u == "+") && len(s.cwds) == 1:
			return strVar(s.cwds[0]) // ~+, ~0 and ~+0 are $PWD
		case shell.IsDigits(n) && !s.pushd:
			// ~1 with an empty directory stack stays as written.
			return strVar("~" + u)
		case n != "" && !shell.IsDigits(n) && u[0] != '+' && u[0] != '-':
			return strVar("/home/" + u)
		}
		return strVar(taintMark)
	}
	return strVar(envMark)
}

func (e environ) Each(fn func(string, expand.Variable) bool) {
	for k, v := range e.s.vars {
		if !fn(k, v) {
			return
		}
	}
}

// cfg is the expansion config: no globbing (patterns stay as written),
// command substitutions yield unknown text, process substitutions a
// /dev/fd path.
func (s *gstate) cfg() *expand.Config {
	return &expand.Config{
		Env: environ{s},
		CmdSubst: func(w io.Writer, cs *syntax.CmdSubst) error {
			out := taintMark
			if isPwd(cs) && len(s.cwds) == 1 {
				out = s.cwds[0]
			} else if safeProducer(cs) {
				out = envMark
			} else if v, ok := s.echoOutput(cs); ok {
				out = v
			}
			_, err := io.WriteString(w, out)
			return err
		},
		ProcSubst: func(*syntax.ProcSubst) (string, error) { return "/dev/fd/63", nil },
	}
}

// isPwd: $(pwd) prints the working directory.
func isPwd(cs *syntax.CmdSubst) bool {
	if len(cs.Stmts) != 1 || len(cs.Stmts[0].Redirs) > 0 {
		return false
	}
	ce, ok := cs.Stmts[0].Cmd.(*syntax.CallExpr)
	return ok && len(ce.Assigns) == 0 && len(ce.Args) == 1 && ce.Args[0].Lit() == "pwd"
}

// substs walks the command and process substitutions inside a word, and
// marks a parameter expansion that transforms an unknown value.
func (s *gstate) substs(w *syntax.Word) (opaque bool) {
	syntax.Walk(w, func(n syntax.Node) bool {
		if s.err != nil {
			return false
		}
		switch x := n.(type) {
		case *syntax.CmdSubst:
			sn := s.snapshot()
			s.stmts(x.Stmts, stdinNone)
			s.merge(sn)
			return false
		case *syntax.ProcSubst:
			sn := s.snapshot()
			in := stdinNone
			if x.Op == syntax.CmdOut {
				in = stdinPipe
			}
			s.stmts(x.Stmts, in)
			s.merge(sn)
			return false
		case *syntax.ParamExp:
			// ${GH_TOKEN:0:5} is not expanded below (opaque), but it
			// still reads the secret.
			if x.Param != nil && isSecretName(x.Param.Value) {
				s.fact(&s.secret, "$"+x.Param.Value)
			}
			if x.Names != 0 || x.Excl && x.Param != nil && !hasKnownValue(s, x.Param.Value) {
				// ${!prefix*} lists names the guard does not know;
				// ${!x} reads a variable named by x's value.
				opaque = true
			}
			if x.Param != nil && !plainParam(x) {
				if v, ok := s.vars[x.Param.Value]; !ok || hasMark(v.String()) {
					opaque = true
				}
			}
			if x.Index != nil {
				s.arithm(x.Index)
			}
			if x.Slice != nil {
				s.arithm(x.Slice.Offset)
				s.arithm(x.Slice.Length)
			}
		case *syntax.ArithmExp:
			s.arithm(x.X)
			opaque = true
			return false
		}
		return true
	})
	return opaque
}

func hasKnownValue(s *gstate, name string) bool {
	v, ok := s.vars[name]
	return ok && !hasMark(v.String())
}

// plainParam: $x, ${x}, ${#x}, ${x:-word} and friends whose result is the
// value or the word, not a transformation of it.
func plainParam(x *syntax.ParamExp) bool {
	return x.Index == nil && x.Slice == nil && x.Repl == nil && !x.Excl && x.Names == 0 &&
		len(x.Modifiers) == 0 && !x.Width && (x.Exp == nil || x.Exp.Op == syntax.DefaultUnset ||
		x.Exp.Op == syntax.DefaultUnsetOrNull || x.Exp.Op == syntax.AlternateUnset ||
		x.Exp.Op == syntax.AlternateUnsetOrNull || x.Exp.Op == syntax.AssignUnset ||
		x.Exp.Op == syntax.AssignUnsetOrNull)
}

// fields expands words into the arguments a program receives, with
// markers for what is unknown.
func (s *gstate) fields(ws ...*syntax.Word) []string {
	var out []string
	for _, w := range ws {
		if w == nil || s.err != nil {
			continue
		}
		opaque := s.substs(w)
		if s.err != nil {
			return nil
		}
		s.noteAssignExp(w)
		if opaque {
			out = append(out, taintMark)
			continue
		}
		fs, err := expand.Fields(s.cfg(), w)
		if err != nil {
			out = append(out, taintMark)
			continue
		}
		out = append(out, fs...)
	}
	return out
}

// literal expands one word without splitting, as in an assignment or a
// redirection target.
func (s *gstate) literal(w *syntax.Word) string {
	if w == nil || s.err != nil {
		return ""
	}
	opaque := s.substs(w)
	if s.err != nil {
		return ""
	}
	s.noteAssignExp(w)
	if opaque {
		return taintMark
	}
	// Fields with an empty IFS: quote removal and escapes as in an
	// argument, no word splitting. (expand.Literal keeps backslashes.)
	s.noSplit = true
	fs, err := expand.Fields(s.cfg(), w)
	s.noSplit = false
	if err != nil {
		return taintMark
	}
	return strings.Join(fs, " ")
}

// document expands a here-document body.
func (s *gstate) document(w *syntax.Word) string {
	if s.substs(w) {
		return taintMark
	}
	v, err := expand.Document(s.cfg(), w)
	if err != nil {
		return taintMark
	}
	return v
}

// noteAssignExp records ${x:=v}, which assigns x as a side effect.
func (s *gstate) noteAssignExp(w *syntax.Word) {
	syntax.Walk(w, func(n syntax.Node) bool {
		if p, ok := n.(*syntax.ParamExp); ok && p.Exp != nil && p.Param != nil &&
			(p.Exp.Op == syntax.AssignUnset || p.Exp.Op == syntax.AssignUnsetOrNull) {
			if _, set := s.vars[p.Param.Value]; !set {
				s.vars[p.Param.Value] = strVar(taintMark)
			}
		}
		return true
	})
}

// wrote records a file the command writes; running it later in the same
// command runs code the guard has not seen as code.
func (s *gstate) wrote(p string) {
	s.written = append(s.written, s.absPaths(p)...)
	if s.taintHit {
		// A copy of a file filled from the environment is one too.
		s.tainted = append(slices.Clone(s.tainted), s.absPaths(p)...)
	}
}

// runsWritten reports whether p is a file written earlier by the command.
func (s *gstate) runsWritten(p string) bool {
	for _, a := range s.absPaths(p) {
		for _, w := range s.written {
			if a == w || hasGlob(w) || strings.Contains(w, "**") {
				return true
			}
		}
	}
	return false
}

// holdsSecrets reports whether p is a directory whose tree holds
// credentials (the home directory, /): archiving or copying it reads them.
func (s *gstate) holdsSecrets(p string) bool {
	for _, a := range s.absPaths(p) {
		if strings.HasPrefix(a, "/**") {
			continue
		}
		for _, r := range s.rules {
			if r.read && !r.anywhere && segsMatch(append(splitPath(a), "**"), r.segs, s.glob) {
				return true
			}
		}
	}
	return false
}

// starStar rewrites each "**" path segment as "*".
func starStar(p string) string {
	if !strings.Contains(p, "**") {
		return p
	}
	segs := strings.Split(p, "/")
	for i, x := range segs {
		if x == "**" {
			segs[i] = "*"
		}
	}
	return strings.Join(segs, "/")
}

// echoOutput is what $(echo ARGS) prints, when the guard can know it: the
// arguments joined, patterns and markers kept.
func (s *gstate) echoOutput(cs *syntax.CmdSubst) (string, bool) {
	if len(cs.Stmts) != 1 || len(cs.Stmts[0].Redirs) > 0 || cs.Stmts[0].Background {
		return "", false
	}
	ce, ok := cs.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok || len(ce.Assigns) > 0 || len(ce.Args) == 0 || ce.Args[0].Lit() != "echo" {
		return "", false
	}
	args := s.fields(ce.Args[1:]...)
	if len(args) > 0 && strings.HasPrefix(args[0], "-") {
		return "", false // -e and -n change the output
	}
	return strings.Join(args, " "), true
}
