package fleet

import "testing"

// TestAddressPolicyReason: only the address policy's refusals are named
// as its; the allow-list's and the others' are not.
func TestAddressPolicyReason(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   bool
	}{
		{"127.0.0.1 is a loopback address", true},
		{"10.1.2.3 is a private address", true},
		{"fd00::1 is a unique local address", true},
		{"not on the box's allow-list", false},
		{"cannot resolve: no addresses", false},
		{"port 8080 is not open for x.test: the allow-list opens ports 80 and 443", false},
		{"too many concurrent connections", false},
		{"", false},
	} {
		if got := addressPolicy(tc.reason); got != tc.want {
			t.Errorf("addressPolicy(%q) = %v, want %v", tc.reason, got, tc.want)
		}
	}
}
