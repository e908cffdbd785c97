package hooks

import "testing"

// An empty question file means "no question", so writing the question file
// empty while it is pending would let a hijacked agent unblock itself.
func TestRegressionAgentClearsOwnQuestion(t *testing.T) {
	e := newEnv(t)
	e.question(t, "May I delete the fixtures?")
	q := e.workspace + "/" + QuestionFile
	for _, in := range [][]byte{
		payload("Write", map[string]any{"file_path": q, "content": ""}),
		payload("Edit", map[string]any{"file_path": q, "old_string": "May I delete the fixtures?", "new_string": ""}),
	} {
		if code, _ := e.run("ask-gate", in); code != ExitDeny {
			t.Fatalf("allowed emptying the pending question: %s", in)
		}
	}
	if code, _ := e.run("ask-gate", bash("rm -rf fixtures")); code != ExitDeny {
		t.Fatal("question still pending, yet a tool call was allowed")
	}
}
