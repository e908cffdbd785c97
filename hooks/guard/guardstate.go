package guard

// What the guard remembers across the calls of one session: the files a
// command filled from the environment or a secret. A later command that
// sends such a file is exfiltration in two steps.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sbx.dev/sbx/hooks/toolcall"
)

// StateDir is the guard's state directory in the workspace, unless
// SBX_HOOK_STATE names another; the guard protects it like its log.
const StateDir = ".agent.hooks.state"

// maxTainted bounds the files remembered per session; past it the oldest
// are kept and a new dump is refused.
const maxTainted = 4096

type sessionState struct {
	// Tainted are absolute paths (possibly globs) filled from an
	// environment source or a secret.
	Tainted []string `json:"tainted"`
}

func (g Guard) stateFile(session string) string {
	sum := sha256.Sum256([]byte(session))
	return filepath.Join(g.State, "guard-"+hex.EncodeToString(sum[:12])+".json")
}

// loadState reads the session's state; a missing file is an empty state,
// anything else unreadable is an error (the caller denies).
func (g Guard) loadState(session string) (sessionState, error) {
	var st sessionState
	data, err := os.ReadFile(g.stateFile(session))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read the guard's session state: %w", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("the guard's session state %s is corrupt: %w", g.stateFile(session), err)
	}
	return st, nil
}

// saveState writes the state through a temporary file and a rename, so a
// concurrent reader sees the old or the new state, never half of one.
func (g Guard) saveState(session string, st sessionState) error {
	if err := os.MkdirAll(g.State, 0o700); err != nil {
		return fmt.Errorf("create the guard's state directory: %w", err)
	}
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode the guard's session state: %w", err)
	}
	f, err := os.CreateTemp(g.State, ".tmp-*")
	if err != nil {
		return fmt.Errorf("write the guard's session state: %w", err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write the guard's session state: %w", err)
	}
	if err := os.Rename(f.Name(), g.stateFile(session)); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write the guard's session state: %w", err)
	}
	return nil
}

// taintedMention notes an argument or input file that names a file filled
// from the environment earlier in the session.
func (s *gstate) taintedMention(p string) { s.taintedIn(p, false) }

// taintedIn is taintedMention for a program that reads a whole tree (an
// archiver, git add .): a tainted file below p counts too.
func (s *gstate) taintedIn(p string, tree bool) {
	if len(s.tainted) == 0 || hasTaint(p) || p == "" {
		return
	}
	for _, a := range s.absPaths(p) {
		for _, t := range s.tainted {
			if segsMatch(splitPath(a), splitPath(t), true) || tree && !strings.HasPrefix(a, "/**") && segsMatch(append(splitPath(a), "**"), splitPath(t), true) {
				s.fact(&s.envDump, "a file filled from the environment earlier in the session ("+t+")")
				s.taintHit = true
				return
			}
		}
	}
}

// newTaint is what the command adds to the session's tainted files: what
// it writes, when it read the environment, a secret's value ($GH_TOKEN,
// not the name in a grep) or a tainted file.
func (s *gstate) newTaint() []string {
	if s.envDump == "" && !strings.HasPrefix(s.secret, "$") {
		return nil
	}
	var out []string
	for _, w := range s.written {
		if strings.HasPrefix(w, "/dev/") || slices.Contains(s.tainted, w) || slices.Contains(out, w) {
			continue
		}
		out = append(out, w)
	}
	return out
}

// decideBashState runs the Bash check with the session's state: it
// denies sending a tainted file, and records the files this command fills
// from the environment.
func (g Guard) decideBashState(in *toolcall.Input, cmd string) toolcall.Decision {
	if g.State == "" {
		if _, err := g.checkBash(cmd, in.Cwd, nil); err != nil {
			return toolcall.Deny("guard: %v", err)
		}
		return toolcall.Allow("command passes the guard")
	}
	st, err := g.loadState(in.SessionID)
	if err != nil {
		return toolcall.Deny("guard: %v", err)
	}
	s, err := g.checkBash(cmd, in.Cwd, st.Tainted)
	if err != nil {
		return toolcall.Deny("guard: %v", err)
	}
	if add := s.newTaint(); len(add) > 0 {
		if len(st.Tainted)+len(add) > maxTainted {
			return toolcall.Deny("guard: the session has filled too many files from the environment for the guard to follow")
		}
		st.Tainted = append(st.Tainted, add...)
		if err := g.saveState(in.SessionID, st); err != nil {
			return toolcall.Deny("guard: %v", err)
		}
	}
	return toolcall.Allow("command passes the guard")
}
