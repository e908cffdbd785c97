package hooks

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
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
func (g AskGate) Decide(in *Input) Decision {
	st, err := os.Stat(g.Question)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return allow("no question pending")
	case err != nil:
		return deny("ask-gate cannot check the question file %s: %v; denying until it can", g.Question, err)
	case st.Mode().IsRegular() && st.Size() == 0:
		return allow("no question pending")
	}
	switch in.ToolName {
	case "Write", "Edit", "MultiEdit":
		p, err := in.toolPath("file_path")
		if err != nil {
			return deny("ask-gate: %v", err)
		}
		if p == filepath.Clean(g.Question) {
			return allow("writing the question file")
		}
	}
	return deny("A question for the operator is pending in %s. Every tool call is denied until the operator answers; "+
		"the answer arrives as your next message. Stop here and end your turn.", g.Question)
}
