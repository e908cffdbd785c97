package hooks

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// DefaultWorkspace is the box's workspace, where the question file and the
// decision log live.
const DefaultWorkspace = "/workspace"

// LogFile is the decision log's name in the workspace (one JSON line per
// decision), unless SBX_HOOK_LOG or --log names another file.
const LogFile = ".agent.hooks.log"

// deciders are the hooks by name.
var deciders = map[string]func(cfg Config) func(*Input) Decision{
	"guard": func(cfg Config) func(*Input) Decision {
		return Guard{Home: cfg.Home, Workspace: cfg.Workspace, Log: cfg.Log, State: cfg.State}.Decide
	},
	"ask-gate": func(cfg Config) func(*Input) Decision {
		return AskGate{Question: filepath.Join(cfg.Workspace, QuestionFile)}.Decide
	},
	"read-only": func(Config) func(*Input) Decision { return ReadOnly },
	// lane is the lane's own hook from one fixed command (the box's managed
	// settings pin a single list of hooks for both lanes): read-only in the
	// side lane (SBX_LANE=side, set by the gateway when it starts the
	// process), the ask-gate in the driver's.
	"lane": func(cfg Config) func(*Input) Decision {
		if cfg.Lane == SideLane {
			return ReadOnly
		}
		return AskGate{Question: filepath.Join(cfg.Workspace, QuestionFile)}.Decide
	},
}

// SideLane is SBX_LANE's value in the read-only side lane.
const SideLane = "side"

// Names lists the hooks Main knows.
func Names() []string {
	var names []string
	for n := range deciders {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Config says where a hook finds the workspace and writes its decisions.
type Config struct {
	Workspace string // absolute; default DefaultWorkspace
	Log       string // default Workspace/LogFile
	Home      string // the agent's home (HOME); default DefaultHome
	State     string // the guard's session state; default Workspace/StateDir
	Lane      string // SBX_LANE: SideLane for the read-only lane, else the driver's
}

// Main runs `sbx hook` with its arguments (NAME and flags), the PreToolUse
// payload on stdin, and returns the exit status: ExitAllow or ExitDeny,
// never anything else. getenv supplies SBX_WORKSPACE and SBX_HOOK_LOG.
func Main(args []string, stdin io.Reader, stderr io.Writer, getenv func(string) string) (code int) {
	name := "hook"
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "sbx hook %s: internal error, denying: %v\n", name, p)
			code = ExitDeny
		}
	}()
	fs := flag.NewFlagSet("hook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := Config{Workspace: getenv("SBX_WORKSPACE"), Log: getenv("SBX_HOOK_LOG"), Home: getenv("HOME"), State: getenv("SBX_HOOK_STATE"), Lane: getenv("SBX_LANE")}
	fs.StringVar(&cfg.Workspace, "workspace", cfg.Workspace, "workspace directory")
	fs.StringVar(&cfg.Log, "log", cfg.Log, "decision log file")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "sbx hook: %v; usage: sbx hook [--workspace DIR] [--log FILE] %s < payload.json; denying\n",
			err, strings.Join(Names(), "|"))
		return ExitDeny
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "sbx hook: want one hook name (%s), got %d arguments; denying\n", strings.Join(Names(), ", "), fs.NArg())
		return ExitDeny
	}
	name = fs.Arg(0)
	if cfg.Workspace == "" {
		cfg.Workspace = DefaultWorkspace
	}
	if cfg.Log == "" {
		cfg.Log = filepath.Join(cfg.Workspace, LogFile)
	}
	if cfg.State == "" {
		cfg.State = filepath.Join(cfg.Workspace, StateDir)
	}
	if !filepath.IsAbs(cfg.Home) {
		cfg.Home = DefaultHome
	}

	in, err := ParseInput(stdin)
	var d Decision
	switch mk, known := deciders[name]; {
	case !known:
		d = deny("unknown hook %q (known: %s)", name, strings.Join(Names(), ", "))
	case !filepath.IsAbs(cfg.Workspace):
		d = deny("workspace %q is not an absolute path", cfg.Workspace)
	case err != nil:
		d = deny("%v", err)
	default:
		d = mk(cfg)(in)
	}
	if err := appendDecision(cfg.Log, name, in, d); err != nil {
		// Unlogged decisions would not show in the transcript: deny.
		d = Decision{Reason: fmt.Sprintf("%s (and the decision log failed: %v)", d.Reason, err)}
	}
	if d.Allow {
		return ExitAllow
	}
	fmt.Fprintf(stderr, "sbx hook %s: %s\n", name, oneLine(d.Reason))
	return ExitDeny
}

// Entry is one line of the decision log.
type Entry struct {
	Time     time.Time `json:"time"`
	Hook     string    `json:"hook"`
	Session  string    `json:"session_id,omitempty"`
	Tool     string    `json:"tool,omitempty"`
	Decision string    `json:"decision"` // "allow" or "deny"
	Reason   string    `json:"reason"`
	// Detail is what was decided on: the Bash command or the file path,
	// cut to maxDetail bytes.
	Detail string `json:"detail,omitempty"`
}

const maxDetail = 2000

// appendDecision appends one JSON line. A single write to an O_APPEND file
// keeps lines from concurrent hooks whole.
func appendDecision(path, hook string, in *Input, d Decision) error {
	e := Entry{Time: time.Now().UTC(), Hook: hook, Decision: "deny", Reason: d.Reason}
	if d.Allow {
		e.Decision = "allow"
	}
	if in != nil {
		e.Session, e.Tool = in.SessionID, in.ToolName
		for _, k := range []string{"command", "file_path", "notebook_path", "path", "url"} {
			if s, ok, err := stringField(in.ToolInput, k); ok && err == nil {
				e.Detail = truncate(s, maxDetail)
				break
			}
		}
	}
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode decision: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open decision log: %w", err)
	}
	_, werr := f.Write(append(line, '\n'))
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("write decision log %s: %w", path, err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// oneLine keeps a reason on one line for Claude's transcript.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
