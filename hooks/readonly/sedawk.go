package readonly

import (
	"errors"
	"fmt"
	"strings"

	"sbx.dev/sbx/hooks/shell"
)

// sedLong are GNU sed's long options: whether each is allowed and whether it
// takes a value. Abbreviations resolve against all of them (longIs).
var sedLong = []struct {
	name           string
	allowed, value bool
}{
	{"quiet", true, false}, {"silent", true, false}, {"regexp-extended", true, false},
	{"separate", true, false}, {"unbuffered", true, false}, {"null-data", true, false},
	{"zero-terminated", true, false}, {"posix", true, false}, {"debug", true, false},
	{"sandbox", true, false}, {"follow-symlinks", true, false}, {"binary", true, false},
	{"line-length", true, true}, {"expression", true, true}, {"help", true, false},
	{"version", true, false},
	{"in-place", false, false}, {"file", false, true},
}

// CheckSed allows sed without -i and without -f (a script file cannot be
// checked), and only scripts whose commands read: no w/W, no e, no s///w or
// s///e. Options may follow operands (GNU getopt permutes).
func CheckSed(args []shell.Arg) error {
	var scripts []string
	explicit := false
	var operands []shell.Arg
	for i := 0; i < len(args); i++ {
		a := args[i].Text
		switch {
		case a == "--":
			operands = append(operands, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			// A value taken from the next argument must be literal: a glob
			// or brace there can expand to several words and shift the
			// script operand (sed -l 1{,'w out'} p).
			var match []int
			for j, o := range sedLong {
				if name != "" && strings.HasPrefix(o.name, name) {
					match = append(match, j)
				}
			}
			if len(match) == 0 {
				return fmt.Errorf("unknown option %s", a)
			}
			for _, j := range match {
				if !sedLong[j].allowed {
					return fmt.Errorf("option %s (--%s) is not allowed", a, sedLong[j].name)
				}
			}
			o := sedLong[match[0]]
			if o.value && !hasVal {
				if i+1 >= len(args) {
					return fmt.Errorf("option %s needs a value", a)
				}
				i++
				if !args[i].Static {
					return fmt.Errorf("the value of %s must be literal", a)
				}
				val = args[i].Text
			}
			if o.name == "expression" {
				if !args[i].Static {
					return errors.New("the script must be literal")
				}
				scripts = append(scripts, val)
				explicit = true
			}
		case strings.HasPrefix(a, "-") && a != "-":
			for k := 1; k < len(a); k++ {
				switch a[k] {
				case 'n', 'E', 'r', 's', 'u', 'z', 'b':
					continue
				case 'e', 'l':
					val := a[k+1:]
					valArg := args[i]
					if val == "" {
						if i+1 >= len(args) {
							return fmt.Errorf("option -%c needs a value", a[k])
						}
						i++
						valArg, val = args[i], args[i].Text
					}
					if !valArg.Static {
						return fmt.Errorf("the value of -%c must be literal", a[k])
					}
					if a[k] == 'e' {
						scripts = append(scripts, val)
						explicit = true
					}
				case 'i':
					return errors.New("-i edits files in place")
				case 'f':
					return errors.New("-f reads a script file that cannot be checked")
				default:
					return fmt.Errorf("unknown option -%c", a[k])
				}
				break
			}
		default:
			operands = append(operands, args[i])
		}
	}
	if !explicit {
		if len(operands) == 0 {
			return errors.New("no script")
		}
		if !operands[0].Static {
			return errors.New("the script must be literal")
		}
		scripts = append(scripts, operands[0].Text)
	}
	for _, s := range scripts {
		if err := checkSedScript(s); err != nil {
			return err
		}
	}
	return nil
}

// checkSedScript walks a sed script command by command (GNU syntax) and
// refuses the commands that write or execute: w, W, e, and the w and e
// flags of s. Anything it cannot follow is refused too.
func checkSedScript(s string) error {
	p := &sedParser{s: s}
	for {
		p.skip(" \t\n;")
		if p.eof() {
			return nil
		}
		if p.peek() == '#' {
			p.toEOL()
			continue
		}
		if err := p.address(); err != nil {
			return err
		}
		p.skip(" \t")
		if p.peek() == ',' {
			p.i++
			p.skip(" \t")
			if err := p.address(); err != nil {
				return err
			}
		}
		p.skip(" \t")
		for p.peek() == '!' {
			p.i++
			p.skip(" \t")
		}
		if p.eof() {
			return errors.New("sed script: address without a command")
		}
		cmd := p.s[p.i]
		p.i++
		switch cmd {
		case '{', '}', '=', 'd', 'D', 'g', 'G', 'h', 'H', 'n', 'N', 'p', 'P', 'x', 'z', 'F':
		case 'l', 'q', 'Q', 'L':
			p.skip(" \t0123456789")
		case ':', 'b', 't', 'T', 'v':
			p.toAny(";\n")
		case 'a', 'i', 'c', 'r', 'R':
			// Text or a file to read, up to the end of the line (with
			// backslash-newline continuations).
			p.toEOL()
		case 'w', 'W':
			return fmt.Errorf("sed command %c writes a file", cmd)
		case 'e':
			return errors.New("sed command e runs a program")
		case 'y':
			delim, err := p.delim()
			if err != nil {
				return err
			}
			for range 2 {
				if err := p.until(delim, false); err != nil {
					return err
				}
			}
		case 's':
			delim, err := p.delim()
			if err != nil {
				return err
			}
			if err := p.until(delim, true); err != nil {
				return err
			}
			if err := p.until(delim, false); err != nil {
				return err
			}
		flags:
			for !p.eof() {
				switch c := p.peek(); {
				case c == 'g' || c == 'p' || c == 'i' || c == 'I' || c == 'm' || c == 'M' || c >= '0' && c <= '9':
					p.i++
				case c == 'w':
					return errors.New("sed s///w writes a file")
				case c == 'e':
					return errors.New("sed s///e runs a program")
				case c == ';' || c == '\n' || c == ' ' || c == '\t' || c == '}' || c == '#':
					break flags
				default:
					return fmt.Errorf("sed script: unknown s flag %q", c)
				}
			}
		default:
			return fmt.Errorf("sed script: unknown command %q", cmd)
		}
	}
}

type sedParser struct {
	s string
	i int
}

func (p *sedParser) eof() bool { return p.i >= len(p.s) }

func (p *sedParser) peek() byte {
	if p.eof() {
		return 0
	}
	return p.s[p.i]
}

func (p *sedParser) skip(set string) {
	for !p.eof() && strings.IndexByte(set, p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *sedParser) toAny(set string) {
	for !p.eof() && strings.IndexByte(set, p.s[p.i]) < 0 {
		p.i++
	}
}

func (p *sedParser) toEOL() {
	for !p.eof() && p.s[p.i] != '\n' {
		if p.s[p.i] == '\\' {
			p.i++
		}
		p.i++
	}
}

func (p *sedParser) delim() (byte, error) {
	if p.eof() || p.peek() == '\\' || p.peek() == '\n' {
		return 0, errors.New("sed script: bad delimiter")
	}
	d := p.s[p.i]
	p.i++
	return d, nil
}

// until consumes up to and including the unescaped delimiter d. In a regex
// (bracket true) d inside a [...] bracket expression does not end it, as in
// GNU sed.
func (p *sedParser) until(d byte, bracket bool) error {
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			p.i++
		case c == d:
			return nil
		case c == '[' && bracket:
			if err := p.bracketExpr(); err != nil {
				return err
			}
		}
	}
	return errors.New("sed script: unterminated expression")
}

func (p *sedParser) bracketExpr() error {
	if p.peek() == '^' {
		p.i++
	}
	if p.peek() == ']' {
		p.i++
	}
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == ']':
			return nil
		case c == '[' && (p.peek() == ':' || p.peek() == '.' || p.peek() == '='):
			end := string([]byte{p.peek(), ']'})
			k := strings.Index(p.s[p.i+1:], end)
			if k < 0 {
				return errors.New("sed script: unterminated character class")
			}
			p.i += 1 + k + 2
		}
	}
	return errors.New("sed script: unterminated bracket expression")
}

func (p *sedParser) address() error {
	switch c := p.peek(); {
	case c >= '0' && c <= '9':
		p.skip("0123456789")
		if p.peek() == '~' {
			p.i++
			p.skip("0123456789")
		}
	case c == '$':
		p.i++
	case c == '+' || c == '~':
		p.i++
		p.skip("0123456789")
	case c == '/' || c == '\\':
		d := byte('/')
		p.i++
		if c == '\\' {
			var err error
			if d, err = p.delim(); err != nil {
				return err
			}
		}
		if err := p.until(d, true); err != nil {
			return err
		}
		p.skip("IM")
	}
	return nil
}

// awkKeywords are awk words after which a '/' starts a regex, not a division.
var awkKeywords = map[string]bool{
	"print": true, "printf": true, "return": true, "in": true, "case": true,
	"if": true, "while": true, "for": true, "do": true, "else": true,
}

// checkAwkProgram refuses awk programs that run commands or write files:
// any '|' (pipes to and from commands, gawk's |&) other than '||', the word
// system, gawk's @ directives and indirect calls, and a '>' at the top level
// of a print or printf statement (output redirection; a comparison there
// must be parenthesised anyway). Strings, regex literals and comments are
// skipped so that their text is not mistaken for code.
func checkAwkProgram(prog string) error {
	if strings.Contains(prog, "/inet") {
		return errors.New("awk /inet special files open network connections")
	}
	inPrint := false
	depth := 0
	operand := false // the last token ends an operand: a '/' now divides
	for i := 0; i < len(prog); {
		c := prog[i]
		switch {
		case c == '"':
			j, err := skipQuoted(prog, i, '"')
			if err != nil {
				return err
			}
			i, operand = j, true
			continue
		case c == '/' && !operand:
			j, err := skipAwkRegex(prog, i)
			if err != nil {
				return err
			}
			i, operand = j, true
			continue
		case c == '#':
			for i < len(prog) && prog[i] != '\n' {
				i++
			}
			continue
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(prog) && (prog[j] == '_' || prog[j] >= 'a' && prog[j] <= 'z' ||
				prog[j] >= 'A' && prog[j] <= 'Z' || prog[j] >= '0' && prog[j] <= '9') {
				j++
			}
			word := prog[i:j]
			if word == "system" {
				return errors.New("awk system() runs a command")
			}
			if word == "print" || word == "printf" {
				inPrint, depth = true, 0
			}
			i, operand = j, !awkKeywords[word]
			continue
		case c >= '0' && c <= '9' || c == '.':
			i++
			operand = true
			continue
		case c == '|':
			if i+1 < len(prog) && prog[i+1] == '|' {
				i += 2
				operand = false
				continue
			}
			return errors.New("awk | pipes to or from a command")
		case c == '@':
			return errors.New("awk @ directives and indirect calls are not allowed")
		case c == '>':
			if inPrint && depth <= 0 {
				return errors.New("awk print > redirects output to a file")
			}
		case c == '(' || c == '[':
			depth++
		case c == ')' || c == ']':
			depth--
			i++
			operand = true
			continue
		case c == ';' || c == '\n' || c == '{' || c == '}':
			inPrint = false
		case c == '\\' && i+1 < len(prog) && prog[i+1] == '\n':
			i += 2
			continue
		case c == '$':
			i++
			operand = false // $ is followed by its operand
			continue
		case c == ' ' || c == '\t':
			i++
			continue
		}
		i++
		// A postfix x++ or x-- ends an operand (x++ / 2 divides); any
		// other operator or punctuation expects one next.
		operand = (c == '+' || c == '-') && i >= 2 && prog[i-2] == c
	}
	return nil
}

func skipQuoted(s string, i int, q byte) (int, error) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j + 1, nil
		case '\n':
			return 0, errors.New("awk: newline in a string")
		}
	}
	return 0, errors.New("awk: unterminated string")
}

func skipAwkRegex(s string, i int) (int, error) {
	inBracket := false
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '\\':
			j++
		case c == '[' && !inBracket:
			inBracket = true
			if j+1 < len(s) && s[j+1] == '^' {
				j++
			}
			if j+1 < len(s) && s[j+1] == ']' {
				j++
			}
		case c == ']' && inBracket:
			inBracket = false
		case c == '/' && !inBracket:
			return j + 1, nil
		case c == '\n':
			return 0, errors.New("awk: newline in a regex")
		}
	}
	return 0, errors.New("awk: unterminated regex")
}
