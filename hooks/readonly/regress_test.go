package readonly

import (
	"strings"
	"testing"

	"sbx.dev/sbx/hooks/toolcall"
)

// Holes found while building the read-only lane, one regression each.

// encoding/json matches struct fields case-insensitively; Claude Code runs
// the exact key. {"command":"rm","Command":"ls"} must be judged as rm.
func TestRegressionJSONKeyCaseSmuggling(t *testing.T) {
	in, err := toolcall.ParseInput(strings.NewReader(`{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"rm -rf x","Command":"ls"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := Decide(in); d.Allow {
		t.Fatal("judged the look-alike key instead of command")
	}
}

// bash removes backslashes and quotes before the program sees its argv:
// -\i and "-i" are -i.
func TestRegressionQuotedOrEscapedOption(t *testing.T) {
	for _, c := range []string{`sed -\i s/a/b/ f`, `sed "-i" s/a/b/ f`, `sed '-'i s/a/b/ f`, `find . "-del"ete`, `sort -\o out in`} {
		if CheckBash(c) == nil {
			t.Errorf("allowed %q", c)
		}
	}
}

// A glob is expanded by the shell into whatever file names exist, and a
// hostile repository can hold a file named -delete or -i.
func TestRegressionGlobBecomesOption(t *testing.T) {
	for _, c := range []string{`find . *`, `sed -n p *`, `sort *`, `uniq a*`, `git log ?*`} {
		if CheckBash(c) == nil {
			t.Errorf("allowed %q", c)
		}
	}
}

// git's optional option values are only taken when they are not options:
// `git branch --contains -D main` deletes main.
func TestRegressionOptionalValueHidesOption(t *testing.T) {
	if CheckBash(`git branch --contains -D main`) == nil {
		t.Fatal("allowed a -D hidden behind --contains")
	}
}

// bash evaluates array subscripts, and the command substitutions in them, in
// [[ -eq ]] operands and in test -v / printf -v names.
func TestRegressionSubscriptEvaluation(t *testing.T) {
	for _, c := range []string{`[[ 'a[$(rm x)]' -eq 1 ]]`, `[[ -v 'a[$(rm x)]' ]]`, `test -v 'a[$(rm x)]'`, `printf -v 'a[$(rm x)]' x`} {
		if CheckBash(c) == nil {
			t.Errorf("allowed %q", c)
		}
	}
}

// GNU sed is bracket-aware: in s/[/]/x/w out the first / does not end the
// regex, so the w flag is real.
func TestRegressionSedBracketDelimiter(t *testing.T) {
	if CheckBash(`sed 's/[/]/x/w out' f`) == nil {
		t.Fatal("allowed a w flag after a bracketed delimiter")
	}
}

// A regex literal containing a quote must not be read as a string that hides
// the code after it.
func TestRegressionAwkRegexQuote(t *testing.T) {
	if CheckBash(`awk '/"/ { system("rm x") } /"/'`) == nil {
		t.Fatal("allowed system() hidden between quote-bearing regexes")
	}
}

// Found by FuzzCheckReadOnly: a tilde is expanded by bash, so `awk ~-` runs
// $OLDPWD as the awk program, and a hostile repository can hold a directory
// named {system("...")} to cd through.
func TestRegressionTildeExpandsToProgramText(t *testing.T) {
	for _, c := range []string{`awk ~`, `awk ~-`, `awk x=~-`, `sed ~+ f`, `git ~-`} {
		if CheckBash(c) == nil {
			t.Errorf("allowed %q", c)
		}
	}
	for _, c := range []string{`ls ~`, `cat ~/.bashrc`, `find ~ -name x`, `git log HEAD~3`, `git show HEAD~1:go.mod`} {
		if err := CheckBash(c); err != nil {
			t.Errorf("denied %q: %v", c, err)
		}
	}
}

// Brace and bracket patterns span quoted parts: uniq a{,'b'} is `uniq a ab`
// and uniq a['bc'] globs to two files; the second is written.
func TestRegressionPatternAcrossQuotes(t *testing.T) {
	for _, c := range []string{`uniq a{,'b'}`, `uniq a['bc']`, `uniq "a"{,b}`, `uniq a{"",b}`} {
		if CheckBash(c) == nil {
			t.Errorf("allowed %q", c)
		}
	}
	for _, c := range []string{`uniq 'a{,b}'`, `uniq a\{,b}`, `find . -name x -print '{}'`, `git log @{u}..`} {
		if err := CheckBash(c); err != nil {
			t.Errorf("denied %q: %v", c, err)
		}
	}
}

// A glob or brace in an option's value can expand to several words and
// shift the operand that follows: sed -l 1{,'w out'} p runs the script
// "1w out", awk -F x{,'{system("id")}'} runs the second word as program.
func TestRegressionExpansionShiftsOperands(t *testing.T) {
	for _, c := range []string{
		`sed -l 1{,'w out'} p f`,
		`sed --line-length 1{,'w out'} p f`,
		`awk -F x{,'{system("id")}'} '{print}' f`,
		`awk -v a=1{,'{system("id")}'} '{print}' f`,
		`git -C a{,st} log`,
		`git branch --sort x{,y} --list`,
	} {
		if CheckBash(c) == nil {
			t.Errorf("allowed %q", c)
		}
	}
}
