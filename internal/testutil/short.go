package testutil

import "testing"

// SkipShort skips t under `go test -short` (`task test-short`, the loop
// without VMs, cluster or browser), saying why: the shared helpers that boot
// a VM, reach the test cluster or start Chromium call it, so every test
// built on them joins the fast loop's skips without a line of its own. The
// full suite (no -short) runs them all.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + why)
	}
}
