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
	"syscall"
	"time"
	"unicode/utf8"

	"sbx.dev/sbx/hooks/guard"
	"sbx.dev/sbx/hooks/readonly"
	"sbx.dev/sbx/hooks/toolcall"
)

// DefaultWorkspace is the box's workspace, where the question file and the
// decision log live.
const DefaultWorkspace = "/workspace"

// LogFile is the decision log's name in the workspace (one JSON line per
// decision), unless SBX_HOOK_LOG or --log names another file.
const LogFile = toolcall.LogFile

// deciders are the hooks by name.
var deciders = map[string]func(cfg Config) func(*toolcall.Input) toolcall.Decision{
	"guard": func(cfg Config) func(*toolcall.Input) toolcall.Decision {
		return guard.Guard{Home: cfg.Home, Workspace: cfg.Workspace, Log: cfg.Log, State: cfg.State}.Decide
	},
	"ask-gate": func(cfg Config) func(*toolcall.Input) toolcall.Decision {
		return AskGate{Question: filepath.Join(cfg.Workspace, QuestionFile)}.Decide
	},
	"read-only": func(Config) func(*toolcall.Input) toolcall.Decision { return readonly.Decide },
	// lane is the lane's own hook from one fixed command (the box's managed
	// settings pin a single list of hooks for both lanes): read-only in the
	// side lane (SBX_LANE=side, set by the gateway when it starts the
	// process), the ask-gate in the driver's.
	"lane": func(cfg Config) func(*toolcall.Input) toolcall.Decision {
		if cfg.Lane == SideLane {
			return readonly.Decide
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
	Home      string // the agent's home (HOME); default guard.DefaultHome
	State     string // the guard's session state; default Workspace/guard.StateDir
	Lane      string // SBX_LANE: SideLane for the read-only lane, else the driver's
	Peer      *Peer  // who asked, when the broker decides; logged
}

// Main runs `sbx hook` with its arguments (NAME and flags), the PreToolUse
// payload on stdin, and returns the exit status: ExitAllow or ExitDeny,
// never anything else. getenv supplies SBX_WORKSPACE, SBX_HOOK_LOG,
// SBX_HOOK_STATE, SBX_LANE and HOME. It decides in this process; see
// MainBroker for a box, where the root broker decides.
func Main(args []string, stdin io.Reader, stderr io.Writer, getenv func(string) string) int {
	cfg := Config{Workspace: getenv("SBX_WORKSPACE"), Log: getenv("SBX_HOOK_LOG"), Home: getenv("HOME"), State: getenv("SBX_HOOK_STATE"), Lane: getenv("SBX_LANE")}
	return decide(args, stdin, stderr, cfg, false)
}

// MainBroker is Main through the hook broker at socket when there is one
// (inside a box: the root guest agent decides, logs and keeps the state),
// else Main.
func MainBroker(socket string, args []string, stdin io.Reader, stderr io.Writer, getenv func(string) string) int {
	if code, used := viaBroker(socket, args, stdin, stderr, getenv); used {
		return code
	}
	return Main(args, stdin, stderr, getenv)
}

// decide parses the hook's arguments and decides. With fixed (the broker),
// cfg's workspace and log are the decider's own and --workspace/--log are
// accepted but ignored: they come from the agent's side.
func decide(args []string, stdin io.Reader, stderr io.Writer, cfg Config, fixed bool) (code int) {
	name := "hook"
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "sbx hook %s: internal error, denying: %v\n", name, p)
			code = ExitDeny
		}
	}()
	fs := flag.NewFlagSet("hook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	workspace, log := cfg.Workspace, cfg.Log
	fs.StringVar(&workspace, "workspace", workspace, "workspace directory")
	fs.StringVar(&log, "log", log, "decision log file")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "sbx hook: %v; usage: sbx hook [--workspace DIR] [--log FILE] %s < payload.json; denying\n",
			err, strings.Join(Names(), "|"))
		return ExitDeny
	}
	if !fixed {
		cfg.Workspace, cfg.Log = workspace, log
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
		cfg.State = filepath.Join(cfg.Workspace, guard.StateDir)
	}
	if !filepath.IsAbs(cfg.Home) {
		cfg.Home = guard.DefaultHome
	}

	in, err := toolcall.ParseInput(stdin)
	var d toolcall.Decision
	switch mk, known := deciders[name]; {
	case !known:
		d = toolcall.Deny("unknown hook %q (known: %s)", name, strings.Join(Names(), ", "))
	case !filepath.IsAbs(cfg.Workspace):
		d = toolcall.Deny("workspace %q is not an absolute path", cfg.Workspace)
	case err != nil:
		d = toolcall.Deny("%v", err)
	default:
		d = mk(cfg)(in)
	}
	if err := appendDecision(cfg.Log, name, in, d, cfg.Peer); err != nil {
		// Unlogged decisions would not show in the transcript: deny.
		d = toolcall.Decision{Reason: fmt.Sprintf("%s (and the decision log failed: %v)", d.Reason, err)}
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
	// Peer is the process that asked, when the root broker decided (the
	// kernel's word, not the hook's).
	Peer *Peer `json:"peer,omitempty"`
}

const maxDetail = 2000

// appendDecision appends one JSON line. A single write to an O_APPEND file
// keeps lines from concurrent hooks whole.
func appendDecision(path, hook string, in *toolcall.Input, d toolcall.Decision, peer *Peer) error {
	e := Entry{Time: time.Now().UTC(), Hook: hook, Decision: "deny", Reason: d.Reason, Peer: peer}
	if d.Allow {
		e.Decision = "allow"
	}
	if in != nil {
		e.Session, e.Tool = in.SessionID, in.ToolName
		for _, k := range []string{"command", "file_path", "notebook_path", "path", "url"} {
			if s, ok, err := toolcall.StringField(in.ToolInput, k); ok && err == nil {
				e.Detail = truncate(s, maxDetail)
				break
			}
		}
	}
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode decision: %w", err)
	}
	// Never through a symlink; when the broker writes (peer known) the log
	// must be its own: in the workspace's sticky top directory the agent
	// could otherwise have made it first, as a file it may edit or a link
	// to a file of root's.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("open decision log: %w", err)
	}
	if peer != nil {
		if err := ownedBySelf(f); err != nil {
			f.Close()
			return fmt.Errorf("decision log %s: %w", path, err)
		}
	}
	_, werr := f.Write(append(line, '\n'))
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("write decision log %s: %w", path, err)
	}
	return nil
}

// ownedBySelf refuses a file this process does not own.
func ownedBySelf(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("not owned by uid %d", os.Geteuid())
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file")
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
