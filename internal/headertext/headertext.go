// Package headertext reads the "Name: value" lines a user gives an MCP
// server's secret headers in (SSH `mcp add` on stdin, the web console's
// textarea), the one parser both fronts use. It only splits the text: what
// a valid header is, and how many, is the core's rule (fleet.AddMCPServer).
package headertext

import (
	"bufio"
	"fmt"
	"strings"

	"sbx.dev/sbx/fleet"
)

// MaxBytes caps the text of one server's headers.
const MaxBytes = 64 << 10

// Parse splits text into headers: one "Name: value" per line, blank lines
// skipped, space around names and values trimmed, a later line for the same
// name replacing an earlier one. Errors wrap fleet.ErrInvalid and name a
// line by its number only: the line may hold a secret, so it is never
// quoted.
func Parse(text string) (map[string]string, error) {
	if len(text) > MaxBytes {
		return nil, fmt.Errorf("headers: more than %d bytes: %w", MaxBytes, fleet.ErrInvalid)
	}
	headers := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), MaxBytes+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("header line %d: want \"Name: value\": %w", n, fleet.ErrInvalid)
		}
		headers[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	return headers, nil
}
