// Package vm manages the microVMs ("boxes"): one Manager over a Backend,
// which is a machine Driver (QEMU on this host, Pods on Kubernetes) and the
// Records of its boxes (this host's record files, or the claims every
// gateway of a cluster shares). It knows no owner, policy or front.
//
// Wiring, in the core:
//
//	be, err := qemu.New(ctx, qemu.Config{DataDir: dataDir}) // finds QEMU and the kernel, probes KVM, builds the initramfs from this binary
//	m, err := vm.New(ctx, vm.Config{Backend: be, MaxBoxes: 20, MaxMemoryMiB: 16 << 10}) // re-adopts the boxes of a previous run
//	defer m.Close() // boxes keep running; the next vm.New re-adopts them
//	box, err := m.Create(ctx, "fix-flaky", vm.Spec{Image: "agent", MaxDuration: 2 * time.Hour})
//	box, err = m.Start(ctx, "fix-flaky") // returns once the guest agent answers
//	p, err := m.Exec(ctx, "fix-flaky", agent.ExecRequest{Argv: []string{"git", "status"}})
//
// Every method checks the box name with ValidName itself.
package vm

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"sbx.dev/sbx/internal/errkind"
)

// State is where a box is in its life.
type State string

const (
	Creating  State = "creating"
	Running   State = "running"
	Sleeping  State = "sleeping"
	Destroyed State = "destroyed"
	Failed    State = "failed"
)

// Spec is what a box is created with. Zero fields take the Manager's defaults.
type Spec struct {
	// Image is the root filesystem: "" boots the tiny initramfs only, "agent"
	// the Debian agent image (booted read-only under a per-box overlay).
	Image     string `json:"image,omitempty"`
	MemoryMiB int    `json:"memory_mib"`
	VCPUs     int    `json:"vcpus"`
	// MaxDuration is wall time from the first start, sleeps and gateway
	// restarts included; then the machine is killed and the box fails.
	// 0 = no limit. Manager.SetMaxDuration changes it on a live box.
	MaxDuration  time.Duration `json:"max_duration,omitempty"`
	WorkspaceMiB int           `json:"workspace_mib"`
	// Egress is the absolute path of a host unix socket (the gateway's, one
	// per box): every TCP connection the box opens to EgressAddr becomes one
	// connection to it, and the box reaches nothing else. "" gives the box
	// no network device at all. See ValidEgress for the path rule.
	Egress string `json:"egress,omitempty"`
}

// WithDefaults fills s's zero sizes and max duration from d.
func (s Spec) WithDefaults(d Spec) Spec {
	if s.MemoryMiB <= 0 {
		s.MemoryMiB = d.MemoryMiB
	}
	if s.VCPUs <= 0 {
		s.VCPUs = d.VCPUs
	}
	if s.WorkspaceMiB <= 0 {
		s.WorkspaceMiB = d.WorkspaceMiB
	}
	if s.MaxDuration <= 0 {
		s.MaxDuration = d.MaxDuration
	}
	return s
}

// BuiltinDefaults is what a manager's unset defaults become.
func BuiltinDefaults() Spec { return Spec{MemoryMiB: 256, VCPUs: 1, WorkspaceMiB: 1024} }

// CheckSize refuses a box spec (defaults applied) no machine can run.
func (s Spec) CheckSize(name string) error {
	if s.MemoryMiB < 64 || s.VCPUs > 64 || s.WorkspaceMiB < 16 {
		return fmt.Errorf("box %q: spec %+v: want memory ≥ 64 MiB, 1–64 vCPUs, workspace ≥ 16 MiB", name, s)
	}
	return nil
}

// The one address a box with an Egress socket can reach, and the name its
// /etc/hosts gives it. Everything the gateway offers a box (egress proxy,
// git, model API) is served behind it.
const (
	EgressIP       = "10.0.2.100"
	EgressPort     = 80
	EgressAddr     = "10.0.2.100:80"
	EgressHostname = "sbx-gateway"
)

// Box is what the manager knows about one box. It is a value: callers get
// copies.
type Box struct {
	Name    string    `json:"name"`
	Spec    Spec      `json:"spec"`
	State   State     `json:"state"`
	Reason  string    `json:"reason,omitempty"` // why it failed, or how it last woke
	Created time.Time `json:"created"`
	// Started is the first start; MaxDuration counts from it, across
	// sleeps and gateway restarts.
	Started time.Time `json:"started,omitzero"`
	Updated time.Time `json:"updated"`
}

// Deadline is when the box's max duration ends (zero when unlimited or not
// started yet).
func (b Box) Deadline() time.Time {
	if b.Spec.MaxDuration <= 0 || b.Started.IsZero() {
		return time.Time{}
	}
	return b.Started.Add(b.Spec.MaxDuration)
}

// Event is a state change of one box.
type Event struct {
	Box  string    `json:"box"`
	From State     `json:"from,omitempty"`
	To   State     `json:"to"`
	Note string    `json:"note,omitempty"` // failure reason, "cold boot: snapshot missing", ...
	At   time.Time `json:"at"`
}

// Stats is a box's resource use, sampled by the backend.
type Stats struct {
	// CPUPercent is the box's CPU use since the previous sample (100 = one
	// full core).
	CPUPercent float64 `json:"cpu_percent"`
	// PrivateBytes is memory only this box uses (host RSS minus shared pages).
	PrivateBytes int64 `json:"private_bytes"`
}

var (
	// ErrNotFound is returned for a name with no box.
	ErrNotFound = errkind.New(errkind.NotFound, "no such box")
	// ErrExists is returned when creating a name already taken.
	ErrExists = errkind.New(errkind.Conflict, "box already exists")
	// ErrState is returned for an operation the box's state does not allow.
	ErrState = errkind.New(errkind.Conflict, "wrong box state")
	// ErrLimit is returned when a host cap refuses a box.
	ErrLimit = errkind.New(errkind.Limit, "host limit reached")
	// ErrClosed is returned after Manager.Close.
	ErrClosed = errkind.New(errkind.Unavailable, "manager closed")
)

// ValidEgress checks a Spec.Egress socket path: absolute, clean, at most 107
// bytes (a unix socket path), and only the characters A-Z a-z 0-9 / _ . - +
// @ : = — the path ends up inside a QEMU option and a command line that
// QEMU splits, so a comma, a space or a quote could change what runs.
func ValidEgress(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("egress socket %q: must be an absolute, clean path", path)
	}
	if len(path) > 107 {
		return fmt.Errorf("egress socket %q: longer than the 107 bytes of a unix socket path", path)
	}
	if i := strings.IndexFunc(path, func(r rune) bool { return !safePathRune(r) }); i >= 0 {
		return fmt.Errorf("egress socket %q: character %q not allowed (use A-Z a-z 0-9 / _ . - + @ : =)", path, path[i])
	}
	return nil
}

func safePathRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("/_.-+@:=", r)
}

// ValidName checks a box name: [A-Za-z0-9_.-]{1,128}, never "." or "..".
// Names become directory names, so this is a path-safety check, not taste.
func ValidName(name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("box name %q: must be 1 to 128 characters", name)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("box name %q: not allowed", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return fmt.Errorf("box name %q: character %q not allowed (use A-Z a-z 0-9 _ . -)", name, c)
		}
	}
	return nil
}
