package guest

import "testing"

// Regression: a gateway running as PID 1 in a container must not become a
// guest init; only the kernel's /init is.
func TestIsInitNeedsKernelName(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"/init"}, true},
		{[]string{"/usr/local/bin/sbx", "serve"}, false},
		{[]string{"sbx"}, false},
		{nil, false},
	} {
		if got := isInitName(tc.args); got != tc.want {
			t.Errorf("isInitName(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
	if IsInit() {
		t.Error("the test process is not a box init")
	}
}
