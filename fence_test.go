package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "sbx.dev/sbx"

// guestFolders hold this module's packages that run inside a box (the guest
// wing: the init, the agent's server, the guest side of a run, the
// Kubernetes pod agent) and the hooks, which the agent's tools call in the
// box. Every package under them may be linked into the guest binary (go
// build -tags guest), PID 1 of every box; a new guest package goes there.
var guestFolders = []string{"vm/guest", "hooks"}

// sharedPackages are the packages both ends link: the agent protocol (its
// host client and its wire), the egress forwarder, which QEMU runs from the
// guest binary on the host and whose pipe the pod agent uses, the build's
// version, which both binaries answer `sbx version` with, and the command
// line's usage errors and the error kinds behind their exit status (both
// binaries share main). Only these packages, not their subfolders.
var sharedPackages = []string{"vm/agent", "vm/fwd", "internal/buildinfo", "internal/cliusage", "internal/errkind"}

// guestAllowed reports whether the module's package pkg may be linked into
// the guest binary. Anything else of the module is the host's (the gateway,
// the VM manager, the store) and has no business in a box.
func guestAllowed(pkg string) bool {
	if pkg == module {
		return true // main.go with the guest build tag
	}
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return true // not the module's: the standard library or a dependency
	}
	for _, dir := range guestFolders {
		if rel == dir || strings.HasPrefix(rel, dir+"/") {
			return true
		}
	}
	return slices.Contains(sharedPackages, rel)
}

// TestGuestBinaryFenced fails when the guest binary pulls in a host package.
func TestGuestBinaryFenced(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "guest", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -tags guest -deps .: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"/vm/guest/pid1") {
		t.Fatalf("the guest binary does not link its init (vm/guest/pid1): %s", strings.Join(deps, " "))
	}
	var host []string
	for _, p := range deps {
		if !guestAllowed(p) {
			host = append(host, p)
		}
	}
	if len(host) > 0 {
		t.Errorf("the guest binary links host packages: %s", strings.Join(host, " "))
	}
}

// TestGuestAllowed pins the fence's rule: the folders, not their look-alikes.
func TestGuestAllowed(t *testing.T) {
	for pkg, want := range map[string]bool{
		module:                         true,
		module + "/vm/guest/pid1":      true,
		module + "/vm/guest/agentd":    true,
		module + "/hooks":              true,
		module + "/vm/agent":           true,
		module + "/vm/fwd":             true,
		module + "/internal/buildinfo": true,
		module + "/internal/cliusage":  true,
		module + "/internal/errkind":   true,
		module + "/internal/testutil":  false,
		"github.com/hashicorp/yamux":   true,
		module + "/vm":                 false,
		module + "/vm/image":           false,
		module + "/vm/guestx":          false,
		module + "/vm/agent/agenttest": false,
		module + "/fleet":              false,
		module + "/hooksutil":          false,
	} {
		if got := guestAllowed(pkg); got != want {
			t.Errorf("guestAllowed(%q) = %v, want %v", pkg, got, want)
		}
	}
}
