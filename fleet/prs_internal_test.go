package fleet

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"sbx.dev/sbx/fleet/forge"
)

func TestCheckPRRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  PRRequest
		ok   bool
	}{
		{"empty: every default", PRRequest{}, true},
		{"all given", PRRequest{Title: "Fix it", Body: "# Why\n\nbecause", Draft: true, Base: "release/1.2"}, true},
		{"title on two lines", PRRequest{Title: "a\nb"}, false},
		{"title too long", PRRequest{Title: strings.Repeat("t", maxPRTitle+1)}, false},
		{"body too long", PRRequest{Body: strings.Repeat("b", maxPRBody+1)}, false},
		{"NUL in the body", PRRequest{Body: "a\x00b"}, false},
		{"not UTF-8", PRRequest{Title: "\xff"}, false},
		{"base an option", PRRequest{Base: "--upload-pack=x"}, false},
		{"base with ..", PRRequest{Base: "main..x"}, false},
	} {
		err := checkPRRequest(tc.req)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestDefaultTitleAndBody(t *testing.T) {
	long := strings.Repeat("é", 100)
	for task, want := range map[string]string{
		"Fix the flaky test\n\nIt fails on CI.": "Fix the flaky test",
		"  padded  ":                            "padded",
		"":                                      "Changes from sbx",
		long:                                    strings.Repeat("é", defaultTitleRunes-1) + "…",
	} {
		if got := defaultTitle(task); got != want || utf8.RuneCountInString(got) > defaultTitleRunes {
			t.Errorf("defaultTitle(%q) = %q, want %q", task, got, want)
		}
	}
	body := defaultBody(record{Name: "fix-1", Task: "Fix it", Summary: "Fixed: the test waits now."})
	for _, want := range []string{"Fix it", "Fixed: the test waits now.", "`fix-1`"} {
		if !strings.Contains(body, want) {
			t.Errorf("body %q lacks %q", body, want)
		}
	}
	if b := defaultBody(record{Name: "x", Task: strings.Repeat("ü", maxPRBody)}); len(b) > maxPRBody || !utf8.ValidString(b) {
		t.Errorf("a long task's body: %d bytes, valid %v", len(b), utf8.ValidString(b))
	}
}

func TestParseMergeMethod(t *testing.T) {
	for in, want := range map[string]forge.MergeMethod{"": forge.Merge, "merge": forge.Merge, "Squash": forge.Squash, "rebase": forge.Rebase} {
		if got, err := ParseMergeMethod(in); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	if _, err := ParseMergeMethod("fast-forward"); !errors.Is(err, ErrInvalid) {
		t.Errorf("fast-forward: %v", err)
	}
}

// TestPRCardChanged: what a front shows decides whether a poll saves and
// announces a card.
func TestPRCardChanged(t *testing.T) {
	base := PR{PullRequest: forge.PullRequest{State: "open", HeadSHA: "a", Mergeable: "yes", Review: "none",
		Checks: []forge.Check{{Name: "ci", Outcome: "pending"}}}}
	same := base
	same.Checks = []forge.Check{{Name: "ci", Outcome: "pending"}}
	if changed(base, same) {
		t.Error("an equal card changed")
	}
	done := base
	done.Checks = []forge.Check{{Name: "ci", Outcome: "success"}}
	moved := base
	moved.HeadSHA = "b"
	for _, c := range []PR{done, moved} {
		if !changed(base, c) {
			t.Errorf("%+v did not change", c)
		}
	}
}
