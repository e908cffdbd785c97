package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// guestPackages are this module's packages that may be linked into the
// guest binary (go build -tags guest), PID 1 of every box: the init, the
// agent's server, the hooks, the guest side of a run, the egress forwarder
// and the Kubernetes pod agent. Anything else of the module is the host's
// (the gateway, the VM manager, the store) and has no business in a box.
var guestPackages = []string{
	"sbx.dev/sbx",
	"sbx.dev/sbx/vm/guest/boxcmd",
	"sbx.dev/sbx/hooks",
	"sbx.dev/sbx/vm/agent",
	"sbx.dev/sbx/vm/fwd",
	"sbx.dev/sbx/vm/guest/pid1",
	"sbx.dev/sbx/vm/guest/podagent",
}

// TestGuestBinaryFenced fails when the guest binary pulls in a host package.
func TestGuestBinaryFenced(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "guest", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -tags guest -deps .: %v", err)
	}
	var host []string
	for _, p := range strings.Fields(string(out)) {
		if (p == "sbx.dev/sbx" || strings.HasPrefix(p, "sbx.dev/sbx/")) && !slices.Contains(guestPackages, p) {
			host = append(host, p)
		}
	}
	if len(host) > 0 {
		t.Errorf("the guest binary links host packages: %s", strings.Join(host, " "))
	}
}
