package readonly

import (
	"errors"
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"sbx.dev/sbx/hooks/shell"
)

// CheckBash returns nil when the Bash command cannot write: it parses as
// bash, every simple command in it (including inside $(...), <(...),
// pipelines, loops and conditionals) is a program on the read-only
// allow-list with arguments its checker accepts, and output goes nowhere but
// a pipe, /dev/null or a standard stream. Anything else is an error naming
// the first problem: an unparsable command, a construct the checker does not
// model (functions, eval, assignments, arithmetic, coprocesses...), a
// computed argument where the value matters.
//
// It is an allow-list over the parsed syntax tree; it never pattern-matches
// the command text.
func CheckBash(command string) error {
	if len(command) > shell.MaxCommand {
		return fmt.Errorf("the command is longer than %d bytes", shell.MaxCommand)
	}
	if strings.ContainsRune(command, 0) {
		return errors.New("the command contains a NUL byte")
	}
	f, err := shell.Parse(command)
	if err != nil {
		return err
	}
	return (&shellChecker{}).stmts(f.Stmts)
}

type shellChecker struct {
	depth int
}

func (c *shellChecker) enter() error {
	c.depth++
	if c.depth > shell.MaxDepth {
		return fmt.Errorf("the command nests deeper than %d levels", shell.MaxDepth)
	}
	return nil
}

func (c *shellChecker) leave() { c.depth-- }

func (c *shellChecker) stmts(list []*syntax.Stmt) error {
	for _, s := range list {
		if err := c.stmt(s); err != nil {
			return err
		}
	}
	return nil
}

func (c *shellChecker) stmt(s *syntax.Stmt) error {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.leave()
	if s.Coprocess || s.Disown {
		return errors.New("coprocesses and disown are not allowed")
	}
	for _, r := range s.Redirs {
		if err := c.redirect(r); err != nil {
			return err
		}
	}
	if s.Cmd == nil {
		return nil
	}
	return c.command(s.Cmd)
}

func (c *shellChecker) redirect(r *syntax.Redirect) error {
	if r.N != nil && !shell.IsDigits(r.N.Value) {
		return fmt.Errorf("redirection with a named file descriptor %q is not allowed", r.N.Value)
	}
	switch r.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.RdrAll, syntax.AppAll:
		a, err := c.word(r.Word)
		if err != nil {
			return err
		}
		if !a.Static || !shell.OutputSinks[a.Text] {
			return fmt.Errorf("output redirection %s%s%s writes a file (only /dev/null is allowed)", fd(r), r.Op, wordString(r.Word))
		}
	case syntax.DplOut, syntax.DplIn:
		a, err := c.word(r.Word)
		if err != nil {
			return err
		}
		if !a.Static || !(shell.IsDigits(a.Text) || a.Text == "-") {
			return fmt.Errorf("redirection %s%s is not a file descriptor duplication", r.Op, wordString(r.Word))
		}
	case syntax.RdrIn, syntax.WordHdoc:
		if _, err := c.word(r.Word); err != nil {
			return err
		}
	case syntax.Hdoc, syntax.DashHdoc:
		if r.Hdoc != nil {
			if _, err := c.word(r.Hdoc); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("redirection %s opens a file for writing", r.Op)
	}
	return nil
}

func (c *shellChecker) command(cmd syntax.Command) error {
	switch x := cmd.(type) {
	case *syntax.CallExpr:
		return c.call(x)
	case *syntax.Block:
		return c.stmts(x.Stmts)
	case *syntax.Subshell:
		return c.stmts(x.Stmts)
	case *syntax.BinaryCmd:
		if err := c.stmt(x.X); err != nil {
			return err
		}
		return c.stmt(x.Y)
	case *syntax.IfClause:
		for ; x != nil; x = x.Else {
			if err := c.stmts(x.Cond); err != nil {
				return err
			}
			if err := c.stmts(x.Then); err != nil {
				return err
			}
		}
		return nil
	case *syntax.WhileClause:
		if err := c.stmts(x.Cond); err != nil {
			return err
		}
		return c.stmts(x.Do)
	case *syntax.ForClause:
		it, ok := x.Loop.(*syntax.WordIter)
		if !ok {
			return errors.New("arithmetic for loops (C style) are not allowed")
		}
		for _, w := range it.Items {
			if _, err := c.word(w); err != nil {
				return err
			}
		}
		return c.stmts(x.Do)
	case *syntax.CaseClause:
		if _, err := c.word(x.Word); err != nil {
			return err
		}
		for _, item := range x.Items {
			for _, p := range item.Patterns {
				if _, err := c.word(p); err != nil {
					return err
				}
			}
			if err := c.stmts(item.Stmts); err != nil {
				return err
			}
		}
		return nil
	case *syntax.TestClause:
		return c.test(x.X)
	case *syntax.TimeClause:
		if x.Stmt == nil {
			return nil
		}
		return c.stmt(x.Stmt)
	case *syntax.FuncDecl:
		return errors.New("defining shell functions is not allowed")
	case *syntax.DeclClause:
		return fmt.Errorf("%s is not allowed (it sets variables)", x.Variant.Value)
	case *syntax.ArithmCmd, *syntax.LetClause:
		return errors.New("arithmetic commands are not allowed")
	case *syntax.CoprocClause:
		return errors.New("coproc is not allowed")
	default:
		return fmt.Errorf("shell construct %T is not allowed", cmd)
	}
}

// test checks a [[ ]] expression. Arithmetic comparisons are refused unless
// both sides are plain numbers: bash evaluates their operands as arithmetic,
// and an array subscript there runs command substitutions.
func (c *shellChecker) test(e syntax.TestExpr) error {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.leave()
	switch x := e.(type) {
	case *syntax.Word:
		_, err := c.word(x)
		return err
	case *syntax.UnaryTest:
		if x.Op == syntax.TsVarSet || x.Op == syntax.TsRefVar {
			return fmt.Errorf("[[ %s ]] evaluates a variable subscript", x.Op)
		}
		return c.test(x.X)
	case *syntax.ParenTest:
		return c.test(x.X)
	case *syntax.BinaryTest:
		switch x.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			for _, side := range []syntax.TestExpr{x.X, x.Y} {
				w, ok := side.(*syntax.Word)
				if !ok {
					return fmt.Errorf("arithmetic comparison %s in [[ ]] needs plain numbers", x.Op)
				}
				a, err := c.word(w)
				if err != nil {
					return err
				}
				if !a.Static || !shell.IsDigits(strings.TrimPrefix(a.Text, "-")) {
					return fmt.Errorf("arithmetic comparison %s in [[ ]] needs plain numbers, not %s", x.Op, wordString(w))
				}
			}
			return nil
		}
		if err := c.test(x.X); err != nil {
			return err
		}
		return c.test(x.Y)
	default:
		return fmt.Errorf("test expression %T is not allowed", e)
	}
}

// word checks the expansions inside w (command and process substitutions
// must themselves be read-only) and describes the argument it makes.
func (c *shellChecker) word(w *syntax.Word) (shell.Arg, error) {
	if err := c.enter(); err != nil {
		return shell.Arg{}, err
	}
	defer c.leave()
	var b strings.Builder
	static := true
	splits := false // an unquoted expansion: word splitting can make new words
	for _, part := range w.Parts {
		switch x := part.(type) {
		case *syntax.Lit:
			b.WriteString(shell.UnescapeUnquoted(x.Value))
		case *syntax.SglQuoted:
			if x.Dollar {
				// $'...' decodes escapes such as \x2d ("-"); treat its
				// value as unknown.
				static = false
				splits = true
				b.WriteString("$'" + x.Value + "'")
				continue
			}
			b.WriteString(x.Value)
		case *syntax.DblQuoted:
			if x.Dollar {
				static = false // $"..." is translated at run time
			}
			for _, dp := range x.Parts {
				if l, ok := dp.(*syntax.Lit); ok {
					b.WriteString(unescapeDouble(l.Value))
					continue
				}
				if err := c.expansion(dp); err != nil {
					return shell.Arg{}, err
				}
				static = false
				b.WriteString("$…")
			}
		case *syntax.ParamExp, *syntax.CmdSubst, *syntax.ArithmExp:
			if err := c.expansion(part); err != nil {
				return shell.Arg{}, err
			}
			static, splits = false, true
			b.WriteString("$…")
		case *syntax.ProcSubst:
			if x.Op != syntax.CmdIn {
				return shell.Arg{}, errors.New("output process substitution >(...) is not allowed")
			}
			if err := c.stmts(x.Stmts); err != nil {
				return shell.Arg{}, err
			}
			// Expands to a single /dev/fd/N path.
			static = false
			b.WriteString("/dev/fd/…")
		case *syntax.ExtGlob:
			static = false
			b.WriteString(x.Op.String() + x.Pattern.Value + ")")
		default:
			return shell.Arg{}, fmt.Errorf("word part %T is not allowed", part)
		}
	}
	if expands(w) {
		static = false
	}
	a := shell.Arg{Text: b.String(), Static: static}
	if !static && !splits {
		a.SafeLead = leadsLiterally(w)
	}
	return a, nil
}

// expansion checks a $..., ${...}, $(...) or $((...)) inside a word.
func (c *shellChecker) expansion(part syntax.WordPart) error {
	switch x := part.(type) {
	case *syntax.ParamExp:
		// Plain $name, ${name} and ${#name} only: the other forms assign
		// (${x:=v}), evaluate arithmetic in subscripts and slices, or carry
		// words of their own.
		plain := x.Param != nil && x.Index == nil && x.Slice == nil && x.Repl == nil &&
			x.Exp == nil && !x.Excl && x.Names == 0 && x.NestedParam == nil && x.Flags == nil &&
			len(x.Modifiers) == 0 && !x.Width && !x.IsSet
		if !plain {
			return fmt.Errorf("parameter expansion %s is not allowed (only $name and ${name})", shell.NodeString(x))
		}
		return nil
	case *syntax.CmdSubst:
		if x.TempFile || x.ReplyVar {
			return errors.New("mksh command substitution forms are not allowed")
		}
		return c.stmts(x.Stmts)
	case *syntax.ArithmExp:
		return errors.New("arithmetic expansion $((...)) is not allowed")
	default:
		return fmt.Errorf("expansion %T is not allowed", part)
	}
}

// leadsLiterally reports whether w starts with a literal character other
// than '-' that no expansion can change (so a glob or "$x" later in the word
// cannot turn it into an option).
func leadsLiterally(w *syntax.Word) bool {
	if len(w.Parts) == 0 {
		return false
	}
	var first string
	switch x := w.Parts[0].(type) {
	case *syntax.Lit:
		v := x.Value
		if v == "" {
			return false
		}
		switch v[0] {
		case '\\':
			if len(v) < 2 || v[1] == '\n' {
				return false
			}
			first = v[1:2]
		case '~':
			return true // expands to an absolute path, or stays "~..."
		case '*', '?', '[', '{':
			return false
		default:
			first = v[:1]
		}
	case *syntax.SglQuoted:
		if x.Dollar || x.Value == "" {
			return false
		}
		first = x.Value[:1]
	case *syntax.DblQuoted:
		if x.Dollar || len(x.Parts) == 0 {
			return false
		}
		l, ok := x.Parts[0].(*syntax.Lit)
		if !ok || l.Value == "" {
			return false
		}
		first = unescapeDouble(l.Value)[:1]
	case *syntax.ProcSubst:
		return true // /dev/fd/N
	default:
		return false
	}
	return first != "-"
}

// expands reports whether bash may turn w into something other than its
// literal text by globbing, brace or tilde expansion. It looks at the whole
// word, since a pattern may span quoted parts: in a{,'b'} and a['bc'] the
// braces and brackets are unquoted.
func expands(w *syntax.Word) bool {
	// The unquoted characters that matter, in order; an escaped character
	// is 'x' and a quoted or expanded part is \x00.
	var b strings.Builder
	for _, part := range w.Parts {
		l, ok := part.(*syntax.Lit)
		if !ok {
			if _, glob := part.(*syntax.ExtGlob); glob {
				return true
			}
			b.WriteByte(0)
			continue
		}
		for i := 0; i < len(l.Value); i++ {
			if l.Value[i] == '\\' && i+1 < len(l.Value) {
				i++
				b.WriteByte('x')
				continue
			}
			b.WriteByte(l.Value[i])
		}
	}
	s := b.String()
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?':
			return true
		case '~':
			// ~ is $HOME, ~- is $OLDPWD (any directory cd has visited),
			// ~+ is $PWD; also after = and : (x=~-).
			if i == 0 || s[i-1] == '=' || s[i-1] == ':' {
				return true
			}
		case '[':
			// A bracket with no closer is literal (the "[" builtin).
			if strings.IndexByte(s[i:], ']') > 0 {
				return true
			}
		case '{':
			if isBraceExpansion(s[i:]) {
				return true
			}
		}
	}
	return false
}

// isBraceExpansion reports whether s, starting at '{', may be a bash brace
// expansion: a '}' follows, with a ',' or ".." before it, or a nested brace
// or a quoted part (\x00) that could hold one. "{}" and "@{u}" are literal.
func isBraceExpansion(s string) bool {
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return false
	}
	inner := s[1:end]
	return strings.Contains(inner, ",") || strings.Contains(inner, "..") || strings.ContainsAny(inner, "{\x00")
}

// unescapeDouble removes the backslashes bash removes inside double quotes.
func unescapeDouble(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (c *shellChecker) call(x *syntax.CallExpr) error {
	if len(x.Assigns) > 0 {
		return fmt.Errorf("variable assignments (%s=...) are not allowed", x.Assigns[0].Name.Value)
	}
	args := make([]shell.Arg, len(x.Args))
	for i, w := range x.Args {
		a, err := c.word(w)
		if err != nil {
			return err
		}
		args[i] = a
	}
	name := args[0]
	if !name.Static {
		return fmt.Errorf("the program name %s is computed at run time", wordString(x.Args[0]))
	}
	if strings.ContainsRune(name.Text, '/') {
		return fmt.Errorf("%q: run programs by name, not by path", name.Text)
	}
	p, ok := programs[name.Text]
	if !ok {
		return fmt.Errorf("%q is not a read-only program", name.Text)
	}
	if p.Check == nil {
		return nil // any arguments, computed or not
	}
	rest := args[1:]
	for i, a := range rest {
		if p.Computed {
			break
		}
		if !a.Static && !a.SafeLead {
			return fmt.Errorf("argument %s of %s is computed at run time and could become an option; "+
				"write it literally (start a glob with ./, as in ./*.go)", wordString(x.Args[i+1]), name.Text)
		}
	}
	if err := p.Check(rest); err != nil {
		return fmt.Errorf("%s: %w", name.Text, err)
	}
	return nil
}

func fd(r *syntax.Redirect) string {
	if r.N == nil {
		return ""
	}
	return r.N.Value
}

func wordString(w *syntax.Word) string { return shell.NodeString(w) }
