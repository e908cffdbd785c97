package views

import (
	"regexp"
	"strings"
	"testing"
)

var (
	tagRE  = regexp.MustCompile(`<(/?)([^\s>/]*)([^>]*)>`)
	attrRE = regexp.MustCompile(`\s*([a-zA-Z-]+)="([^"]*)"`)
)

// checkInert asserts Highlight's HTML holds only <pre>, <code> and <span>
// with a class attribute: whatever the patch said is text.
func checkInert(t *testing.T, patch, out string) {
	t.Helper()
	for _, m := range tagRE.FindAllStringSubmatch(out, -1) {
		switch m[2] {
		case "pre", "code", "span":
		default:
			t.Fatalf("Highlight(%q) emitted <%s%s>", patch, m[1]+m[2], m[3])
		}
		rest := attrRE.ReplaceAllStringFunc(m[3], func(a string) string {
			if sub := attrRE.FindStringSubmatch(a); sub[1] == "class" && !strings.ContainsAny(sub[2], "<>&") {
				return ""
			}
			return a
		})
		if strings.TrimSpace(rest) != "" {
			t.Fatalf("Highlight(%q) emitted attributes %q", patch, m[3])
		}
	}
	if strings.Count(out, "<") != len(tagRE.FindAllString(out, -1)) {
		t.Fatalf("Highlight(%q) left a raw '<' in %q", patch, out)
	}
}

// TestHighlightEscapes pins the console's one raw HTML sink: the diff.
func TestHighlightEscapes(t *testing.T) {
	for _, patch := range []string{
		"+<script>alert(1)</script>\n",
		"diff --git a/\"><img src=x onerror=alert(1)> b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-</pre><iframe src=javascript:alert(2)>\n+' onmouseover='alert(3)\n",
		"+&lt;already escaped&gt; &amp; <b>bold</b>\n",
		"",
	} {
		out, err := Highlight(patch)
		if err != nil {
			t.Fatal(err)
		}
		checkInert(t, patch, out)
	}
	out, _ := Highlight("+<script>x</script>\n")
	if !strings.Contains(out, "&lt;script&gt;") {
		t.Errorf("payload not escaped as text: %s", out)
	}
}

func FuzzHighlight(f *testing.F) {
	f.Add("+<script>alert(1)</script>\n")
	f.Add("@@ -1 +1 @@\n-\"'><svg/onload=x>\n")
	f.Fuzz(func(t *testing.T, patch string) {
		out, err := Highlight(patch)
		if err != nil {
			return
		}
		checkInert(t, patch, out)
	})
}
