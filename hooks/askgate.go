package hooks

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"sbx.dev/sbx/hooks/toolcall"
)

// QuestionFile is where the agent writes a question for the operator,
// relative to the workspace.
const QuestionFile = ".agent.question"

// AskGate denies every tool call while a question is pending (the question
// file exists and is not empty), except writing the question file itself:
// asking is the point. A hijacked agent that asked cannot barrel on before
// the operator answers.
type AskGate struct {
	// Question is the absolute path of the question file.
	Question string
}

// Decide rules on one tool call.
func (g AskGate) Decide(in *toolcall.Input) toolcall.Decision {
	// Lstat, and read with O_NOFOLLOW below: the gate may run as root (the
	// broker) on a file the agent names, and a link must not make it read
	// a file of root's.
	st, err := os.Lstat(g.Question)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return toolcall.Allow("no question pending")
	case err != nil:
		return toolcall.Deny("ask-gate cannot check the question file %s: %v; denying until it can", g.Question, err)
	case st.Mode().IsRegular() && st.Size() == 0:
		return toolcall.Allow("no question pending")
	}
	switch in.ToolName {
	case "Write", "Edit", "MultiEdit":
		p, err := in.ToolPath("file_path")
		if err != nil {
			return toolcall.Deny("ask-gate: %v", err)
		}
		if p == filepath.Clean(g.Question) {
			return g.decideQuestionWrite(in)
		}
	}
	return toolcall.Deny("A question for the operator is pending in %s. Every tool call is denied until the operator answers; "+
		"the answer arrives as your next message. Stop here and end your turn.", g.Question)
}

// maxQuestion bounds the question file the gate reads to simulate an edit.
const maxQuestion = 1 << 20

// decideQuestionWrite allows rewording the pending question but not
// emptying it: an empty question file means "no question", so a hijacked
// agent could otherwise unblock itself without the operator.
func (g AskGate) decideQuestionWrite(in *toolcall.Input) toolcall.Decision {
	var after string
	switch in.ToolName {
	case "Write":
		content, err := in.ToolString("content")
		if err != nil {
			return toolcall.Deny("ask-gate: %v", err)
		}
		after = content
	case "Edit", "MultiEdit":
		cur, err := readNoFollow(g.Question, maxQuestion)
		if err != nil {
			return toolcall.Deny("ask-gate cannot read the question file to check the edit: %v", err)
		}
		edits, err := questionEdits(in)
		if err != nil {
			return toolcall.Deny("ask-gate: %v", err)
		}
		after = string(cur)
		for _, e := range edits {
			if e.ReplaceAll {
				after = strings.ReplaceAll(after, e.Old, e.New)
			} else {
				after = strings.Replace(after, e.Old, e.New, 1)
			}
		}
	}
	if after == "" {
		return toolcall.Deny("Emptying %s does not answer the question; wait for the operator's answer, which arrives as your next message.", g.Question)
	}
	return toolcall.Allow("writing the question file")
}

type questionEdit struct {
	Old        string `json:"old_string"`
	New        string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all"`
}

// questionEdits reads the edits of an Edit or MultiEdit call.
func questionEdits(in *toolcall.Input) ([]questionEdit, error) {
	if in.ToolName == "Edit" {
		var e questionEdit
		var err error
		if e.Old, err = in.ToolString("old_string"); err != nil {
			return nil, err
		}
		if e.New, err = in.ToolString("new_string"); err != nil {
			return nil, err
		}
		if raw, ok := in.ToolInput["replace_all"]; ok {
			if err := json.Unmarshal(raw, &e.ReplaceAll); err != nil {
				return nil, fmt.Errorf("%s input: replace_all is not a boolean", in.ToolName)
			}
		}
		return []questionEdit{e}, nil
	}
	raw, ok := in.ToolInput["edits"]
	if !ok {
		return nil, fmt.Errorf("%s input has no \"edits\"", in.ToolName)
	}
	var edits []questionEdit
	if err := json.Unmarshal(raw, &edits); err != nil {
		return nil, fmt.Errorf("%s input: edits is not a list of edits", in.ToolName)
	}
	return edits, nil
}

// readNoFollow reads a regular file of at most limit bytes, never through a
// symlink.
func readNoFollow(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}
