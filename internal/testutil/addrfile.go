package testutil

import (
	"os"
	"strings"
)

// ReadAddrFile reads the key=value lines `sbx serve` writes to its address
// file (gateway.AddrFile in the data dir) and reports whether every one of
// want has a value yet (the file may be missing or half written).
func ReadAddrFile(path string, want ...string) (map[string]string, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	m := map[string]string{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	for _, k := range want {
		if m[k] == "" {
			return m, false
		}
	}
	return m, true
}
