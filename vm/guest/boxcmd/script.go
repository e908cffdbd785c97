package boxcmd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// The script agent is the deterministic stand-in for Claude Code: the
// `script` profile runs it, tests and benchmarks drive it.
//
// A task made of lines starting with "!" is a script, run one directive a
// line:
//
//	!say TEXT         print TEXT
//	!sleep SECONDS    wait
//	!ask TEXT         write TEXT to the question file, try a tool call
//	                  through `sbx hook ask-gate` (printing its verdict), and
//	                  end the turn; the next turn (the answer) continues after it
//	!write PATH TEXT  write TEXT (\n for a newline) to PATH under every repo
//	                  (or /workspace when there is none)
//	!commit MESSAGE   git add -A && git commit in every repo
//	!env              print the environment (tests look for leaked secrets)
//	!exit N           end the turn with status N
//
// Any other task runs the default script: say what it was given, ask which
// word to add to README.md, then (after the answer) write it and commit. A
// follow-up to a finished script runs the follow-up when it is a script too.
const defaultScript = `!say script agent: starting
!ask Which word should I add to README.md?
!write README.md {answer}
!commit script agent: add {answer}
!say done`

// scriptState is kept between turns of one box, in the agent's HOME (the
// agent runs as the unprivileged user, who cannot write /var/lib/sbx).
const scriptState = ".sbx-script-agent.state"

// statePath is where the state file is: state, or scriptState in HOME.
func statePath(state string) string {
	if state != "" {
		return state
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, scriptState)
}

func scriptAgentCommand() *cobra.Command {
	var resume, workspace, state string
	var side bool
	cmd := &cobra.Command{
		Use:   "script-agent [--resume SESSION] [--side] MESSAGE",
		Short: "The deterministic test agent",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a := scriptAgent{out: cmd.OutOrStdout(), workspace: workspace, state: statePath(state)}
			if side {
				return a.side(args[0])
			}
			code := a.turn(args[0], resume != "")
			if code != 0 {
				os.Exit(code)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&resume, "resume", "", "continue the session (the message is the answer)")
	cmd.Flags().BoolVar(&side, "side", false, "answer a side question read-only")
	cmd.Flags().StringVar(&workspace, "workspace", "/workspace", "workspace directory")
	cmd.Flags().StringVar(&state, "state", "", "state file between turns (default $HOME/"+scriptState+")")
	return cmd
}

type scriptAgent struct {
	out       io.Writer
	workspace string
	state     string
}

// turn runs the script from where the last turn stopped. A first turn's
// message is the task; a resumed turn's is the answer (or follow-up).
func (a scriptAgent) turn(message string, resumed bool) int {
	var script string
	pos := 0
	answer := ""
	if resumed {
		b, err := os.ReadFile(a.state)
		if err != nil {
			fmt.Fprintf(a.out, "script agent: no session to resume: %v\n", err)
			return 1
		}
		st := strings.SplitN(string(b), "\n", 2)
		if len(st) != 2 {
			fmt.Fprintln(a.out, "script agent: corrupt state")
			return 1
		}
		pos, _ = strconv.Atoi(st[0])
		script = st[1]
		answer = message
		fmt.Fprintf(a.out, "answer received: %s\n", message)
	} else {
		script = defaultScript
		if strings.HasPrefix(strings.TrimSpace(message), "!") {
			script = message
		} else {
			fmt.Fprintf(a.out, "task: %s\n", message)
		}
	}
	lines := strings.Split(script, "\n")
	if pos >= len(lines) && resumed {
		// A follow-up to a finished script that is itself a script runs
		// it (tests of follow-up turns that change the repository).
		if !strings.HasPrefix(strings.TrimSpace(message), "!") {
			fmt.Fprintln(a.out, "nothing left to do; follow-up noted")
			return 0
		}
		script, pos, answer = message, 0, ""
		lines = strings.Split(script, "\n")
	}
	for i := pos; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || !strings.HasPrefix(line, "!") {
			continue
		}
		verb, arg, _ := strings.Cut(line[1:], " ")
		arg = strings.ReplaceAll(arg, "{answer}", answer)
		switch verb {
		case "say":
			fmt.Fprintln(a.out, arg)
		case "sleep":
			d, err := strconv.ParseFloat(arg, 64)
			if err != nil {
				fmt.Fprintf(a.out, "bad sleep %q\n", arg)
				return 2
			}
			time.Sleep(time.Duration(d * float64(time.Second)))
		case "ask":
			if err := a.saveState(i+1, script); err != nil {
				fmt.Fprintf(a.out, "script agent: %v\n", err)
				return 1
			}
			if err := os.WriteFile(filepath.Join(a.workspace, ".agent.question"), []byte(arg+"\n"), 0o644); err != nil {
				fmt.Fprintf(a.out, "script agent: write question: %v\n", err)
				return 1
			}
			fmt.Fprintf(a.out, "question: %s\n", arg)
			a.tryTool()
			return 0
		case "write":
			path, text, _ := strings.Cut(arg, " ")
			text = strings.ReplaceAll(text, `\n`, "\n")
			for _, dir := range a.repos() {
				p := filepath.Join(dir, path)
				if err := appendFile(p, text+"\n"); err != nil {
					fmt.Fprintf(a.out, "write %s: %v\n", p, err)
					return 1
				}
				fmt.Fprintf(a.out, "wrote %s\n", p)
			}
		case "commit":
			for _, dir := range a.repos() {
				if out, err := a.git(dir, "add", "-A"); err != nil {
					fmt.Fprintf(a.out, "git add in %s: %v %s\n", dir, err, out)
					return 1
				}
				if out, err := a.git(dir, "commit", "-q", "-m", arg); err != nil {
					fmt.Fprintf(a.out, "git commit in %s: %v %s\n", dir, err, out)
					return 1
				}
				sha, _ := a.git(dir, "rev-parse", "--short", "HEAD")
				fmt.Fprintf(a.out, "committed %s in %s\n", strings.TrimSpace(sha), filepath.Base(dir))
			}
		case "env":
			for _, kv := range os.Environ() {
				fmt.Fprintln(a.out, kv)
			}
		case "exit":
			n, _ := strconv.Atoi(arg)
			_ = a.saveState(len(lines), script)
			return n
		default:
			fmt.Fprintf(a.out, "unknown directive !%s\n", verb)
			return 2
		}
	}
	_ = a.saveState(len(lines), script)
	return 0
}

func (a scriptAgent) saveState(pos int, script string) error {
	if err := os.MkdirAll(filepath.Dir(a.state), 0o700); err != nil {
		return err
	}
	return atomicWrite(a.state, strconv.Itoa(pos)+"\n"+script)
}

// tryTool asks the ask-gate about a tool call while the question is
// pending, as Claude Code would before running one, and prints the verdict.
func (a scriptAgent) tryTool() {
	payload := `{"session_id":"script","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"echo keep going"}}`
	var stderr bytes.Buffer
	c := exec.Command("sbx", "hook", "ask-gate")
	if self, err := os.Executable(); err == nil {
		c = exec.Command(self, "hook", "ask-gate")
	}
	c.Stdin = strings.NewReader(payload)
	c.Stderr = &stderr
	c.Env = append(os.Environ(), "SBX_WORKSPACE="+a.workspace)
	err := c.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	verdict := "allowed"
	if code == 2 {
		verdict = "denied"
	}
	fmt.Fprintf(a.out, "ask-gate %s the tool call (exit %d): %s\n", verdict, code, strings.TrimSpace(stderr.String()))
}

// side answers a side question without writing anything, and shows that the
// read-only hook refuses a write.
func (a scriptAgent) side(question string) error {
	fmt.Fprintf(a.out, "side answer to %q:\n", question)
	ents, _ := os.ReadDir(a.workspace)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			fmt.Fprintf(a.out, "  %s\n", e.Name())
		}
	}
	payload := `{"session_id":"side","hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{"file_path":"/workspace/x","content":"x"}}`
	self, err := os.Executable()
	if err != nil {
		return err
	}
	c := exec.Command(self, "hook", "read-only")
	c.Stdin = strings.NewReader(payload)
	c.Env = append(os.Environ(), "SBX_WORKSPACE="+a.workspace)
	err = c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		fmt.Fprintln(a.out, "read-only hook denied a write, as it should")
	} else {
		fmt.Fprintf(a.out, "read-only hook did not deny a write: %v\n", err)
	}
	return nil
}

// repos are the git repositories directly under the workspace, or the
// workspace itself when there is none.
func (a scriptAgent) repos() []string {
	var out []string
	ents, _ := os.ReadDir(a.workspace)
	for _, e := range ents {
		if e.IsDir() {
			if _, err := os.Stat(filepath.Join(a.workspace, e.Name(), ".git")); err == nil {
				out = append(out, filepath.Join(a.workspace, e.Name()))
			}
		}
	}
	if len(out) == 0 {
		out = []string{a.workspace}
	}
	return out
}

func (a scriptAgent) git(dir string, args ...string) (string, error) {
	c := exec.Command("git", append([]string{"-C", dir}, args...)...)
	out, err := c.CombinedOutput()
	return string(out), err
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
