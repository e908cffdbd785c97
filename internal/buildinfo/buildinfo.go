// Package buildinfo is what this binary was built from: the module version,
// the VCS revision and its time, whether the tree had changes, the Go
// version. `sbx version`, the SSH whoami, /healthz and MCP all say the same.
package buildinfo

import (
	"runtime/debug"
	"strings"
	"sync"
)

// Info describes one build.
type Info struct {
	// Version is the module version; "dev" for a build that has none (a
	// test binary, go run).
	Version string `json:"version"`
	// Revision is the VCS revision, shortened to 12 hex digits; "unknown"
	// when the build could find out none (see Stamped).
	Revision string `json:"revision,omitempty"`
	// Time is the revision's commit time (RFC 3339), as the VCS recorded it.
	Time string `json:"time,omitempty"`
	// Dirty: the working tree had uncommitted changes.
	Dirty bool   `json:"dirty,omitempty"`
	Go    string `json:"go"`
}

// The Taskfile's build stamps these with -ldflags -X from git, for when
// the go command records no revision itself (GOFLAGS=-buildvcs=false, a
// tree without .git): the full revision or "unknown" (git could not say),
// its commit time (RFC 3339) and "true" for a tree with changes. Set at
// link time only, never written at run time.
var (
	stampRevision string
	stampTime     string
	stampModified string
)

// Unknown is the revision of a build that could not find out its own.
const Unknown = "unknown"

// get reads the build information once: it cannot change while the
// process runs.
var get = sync.OnceValue(func() Info {
	bi, ok := debug.ReadBuildInfo()
	return From(bi, ok).Stamped(stampRevision, stampTime, stampModified)
})

// Get returns this binary's build information.
func Get() Info { return get() }

// From extracts Info from what debug.ReadBuildInfo returned.
func From(bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: "dev"}
	if !ok || bi == nil {
		return info
	}
	info.Go = bi.GoVersion
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		info.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value[:min(12, len(s.Value))]
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Dirty = s.Value == "true"
		}
	}
	return info
}

// Stamped fills the revision from the link-time stamp (revision, its
// commit time, modified "true" or "false") when the go command recorded
// none; the go command's own record wins.
func (i Info) Stamped(revision, time, modified string) Info {
	if i.Revision != "" || revision == "" {
		return i
	}
	i.Revision = revision[:min(12, len(revision))]
	if revision == Unknown {
		i.Revision = Unknown
		return i
	}
	i.Time, i.Dirty = time, modified == "true"
	return i
}

// Short names the build in one word: the module version, or for a build
// without one "dev" and the revision ("dev+1a2b3c4d5e6f", "+dirty" when the
// tree had changes), so two dev builds are told apart.
func (i Info) Short() string {
	if i.Version != "dev" || i.Revision == "" || i.Revision == Unknown {
		return i.Version
	}
	v := i.Version + "+" + i.Revision
	if i.Dirty {
		v += "+dirty"
	}
	return v
}

// String is Short with the revision, its time and the Go version:
// "v1.2.0 (1a2b3c4d5e6f, 2026-11-30T10:00:00Z, go1.26.1)".
func (i Info) String() string {
	var parts []string
	if i.Revision == Unknown {
		parts = append(parts, "revision unknown")
	} else if i.Revision != "" {
		rev := i.Revision
		if i.Dirty {
			rev += "+dirty"
		}
		parts = append(parts, rev)
	}
	for _, p := range []string{i.Time, i.Go} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return i.Short()
	}
	return i.Short() + " (" + strings.Join(parts, ", ") + ")"
}
