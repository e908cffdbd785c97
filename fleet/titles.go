package fleet

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"sbx.dev/sbx/keys"
)

// A box's title is a short line people read in lists: by default the
// task's first line, editable with SetTitle. The box's name never changes.
const (
	// MaxTitleLen caps a title given with SetTitle, in characters.
	MaxTitleLen = 80
	// defaultTitleLen caps a title derived from the task.
	defaultTitleLen = 60
)

// DefaultTitle is the title a box gets from its task: the first non-blank
// line, control characters dropped, whitespace collapsed, at most 60
// characters, cut on a word boundary with "…" when longer.
func DefaultTitle(task string) string {
	line := ""
	for l := range strings.Lines(task) {
		if strings.TrimSpace(l) != "" {
			line = l
			break
		}
	}
	var b strings.Builder
	for _, r := range line {
		switch {
		case r == utf8.RuneError || unicode.IsControl(r) && !unicode.IsSpace(r) || unicode.Is(unicode.Cf, r):
			continue
		case unicode.IsSpace(r):
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	t := strings.Join(strings.Fields(b.String()), " ")
	if utf8.RuneCountInString(t) <= defaultTitleLen {
		return t
	}
	rs := []rune(t)
	cut := rs[:defaultTitleLen-1]     // room for the ellipsis
	if rs[defaultTitleLen-1] != ' ' { // a word runs past the cut: drop it
		for i := len(cut) - 1; i > 0; i-- {
			if cut[i] == ' ' {
				cut = cut[:i]
				break
			}
		}
	}
	return strings.TrimRight(string(cut), " ") + "…"
}

// checkTitle validates a title given by a person: 1 to 80 printable
// characters on one line, outer spaces trimmed.
func checkTitle(title string) (string, error) {
	t := strings.TrimSpace(title)
	n := utf8.RuneCountInString(t)
	switch {
	case t == "":
		return "", fmt.Errorf("empty title: %w", ErrInvalid)
	case !utf8.ValidString(t):
		return "", fmt.Errorf("title is not valid UTF-8: %w", ErrInvalid)
	case n > MaxTitleLen:
		return "", fmt.Errorf("title is %d characters (max %d): %w", n, MaxTitleLen, ErrInvalid)
	}
	for _, r := range t {
		if r == '\n' || r == '\r' {
			return "", fmt.Errorf("title has a line break: want one line: %w", ErrInvalid)
		}
		if !unicode.IsPrint(r) && r != ' ' || unicode.Is(unicode.Cf, r) {
			return "", fmt.Errorf("title has the unprintable character %U: %w", r, ErrInvalid)
		}
	}
	return t, nil
}

func (f *Fleet) setTitle(ctx context.Context, caller keys.Actor, name, title string) (Box, error) {
	t, err := checkTitle(title)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	return f.editBox(ctx, caller, name, "box.title", EventTitle, func(rec *record) (string, error) {
		rec.Title = t
		return t, nil
	})
}

// MatchBox reports whether b matches a search query: the query (trimmed,
// case-insensitive) appears in the box's name, title, the first line of its
// task or a repository's name. The empty query matches every box. Every
// front's search (ls QUERY, the TUI's filter, the web fleet's ?q=) is this.
func MatchBox(b Box, query string) bool {
	q := strings.ToLower(strings.TrimSpace(query))
	if q == "" {
		return true
	}
	first, _, _ := strings.Cut(strings.TrimSpace(b.Task.String()), "\n")
	fields := []string{b.Name, b.Title.String(), first}
	for _, r := range b.Repos {
		fields = append(fields, r.Name)
	}
	for _, s := range fields {
		if strings.Contains(strings.ToLower(s), q) {
			return true
		}
	}
	return false
}

// FilterBoxes keeps the boxes that match query (MatchBox), in order.
func FilterBoxes(boxes []Box, query string) []Box {
	out := make([]Box, 0, len(boxes))
	for _, b := range boxes {
		if MatchBox(b, query) {
			out = append(out, b)
		}
	}
	return out
}
