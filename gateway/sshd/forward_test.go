package sshd

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/internal/errkind"
)

// TestForwardDestinations: only a box name is a destination; every host
// that could mean the gateway's network, or anything that is not a plain
// name, is refused before the core is asked.
func TestForwardDestinations(t *testing.T) {
	for _, tc := range []struct {
		host string
		port uint32
		box  string // "" when refused
	}{
		{"mybox", 3000, "mybox"},
		{"box-1_a", 1, "box-1_a"},
		{"BOX", 65535, "BOX"},
		{"mybox", 0, ""},
		{"mybox", 65536, ""},
		{"mybox", 1 << 31, ""},
		{"", 80, ""},
		{"localhost", 22, ""},
		{"LocalHost", 22, ""},
		{"127.0.0.1", 22, ""},
		{"0.0.0.0", 22, ""},
		{"::1", 22, ""},
		{"[::1]", 22, ""},
		{"10.0.2.100", 80, ""},
		{"169.254.169.254", 80, ""},
		{"2130706433", 22, ""}, // 127.0.0.1 as one number (see below)
		{"example.com", 443, ""},
		{"mybox.", 80, ""},
		{"..", 80, ""},
		{"a/b", 80, ""},
		{"a b", 80, ""},
		{"box\x00", 80, ""},
		{"box\n", 80, ""},
		{"fe80::1%eth0", 80, ""},
		{strings.Repeat("a", 129), 80, ""},
	} {
		if tc.host == "2130706433" {
			// A name of digits is a legal box name, and reaches no
			// address: it is only ever looked up as a box.
			tc.box = tc.host
		}
		box, port, err := checkForward(tc.host, tc.port)
		if tc.box == "" {
			if err == nil || !errors.Is(err, errkind.Invalid) {
				t.Errorf("checkForward(%q, %d) = %q, %d, %v; want refused as invalid", tc.host, tc.port, box, port, err)
			}
			continue
		}
		if err != nil || box != tc.box || port != int(tc.port) {
			t.Errorf("checkForward(%q, %d) = %q, %d, %v; want %q", tc.host, tc.port, box, port, err, tc.box)
		}
	}
	if _, _, err := parseForward([]byte("short")); !errors.Is(err, errkind.Invalid) {
		t.Errorf("parseForward of a bad payload: %v", err)
	}
	b, p, err := parseForward(gossh.Marshal(forwardData{DestAddr: "mybox", DestPort: 8000, OriginAddr: "127.0.0.1", OriginPort: 5}))
	if err != nil || b != "mybox" || p != 8000 {
		t.Errorf("parseForward: %q %d %v", b, p, err)
	}
}

// FuzzParseForward: whatever the client sends, an accepted destination is
// a plain box name (no address, no dot, no colon) and a port in range.
func FuzzParseForward(f *testing.F) {
	f.Add("mybox", uint32(3000))
	f.Add("127.0.0.1", uint32(22))
	f.Add("::1", uint32(0))
	f.Add("localhost", uint32(80))
	f.Fuzz(func(t *testing.T, host string, port uint32) {
		box, p, err := parseForward(gossh.Marshal(forwardData{DestAddr: host, DestPort: port}))
		if err != nil {
			return
		}
		if box != host || p < 1 || p > 65535 || box == "" || len(box) > 128 ||
			strings.ContainsAny(box, ".:[]%/ \x00") || strings.EqualFold(box, "localhost") {
			t.Fatalf("accepted %q:%d as box %q port %d", host, port, box, p)
		}
	})
}

// TestForwardsPerConnection: one SSH connection holds at most
// maxForwardsPerConn forwards at once; another connection has its own.
func TestForwardsPerConnection(t *testing.T) {
	var f forwards
	a, b := &gossh.ServerConn{}, &gossh.ServerConn{}
	var releases []func()
	for i := range maxForwardsPerConn {
		rel, ok := f.hold(a)
		if !ok {
			t.Fatalf("forward %d refused", i+1)
		}
		releases = append(releases, rel)
	}
	if _, ok := f.hold(a); ok {
		t.Fatal("one forward over the limit held")
	}
	if rel, ok := f.hold(b); !ok {
		t.Fatal("another connection's forward refused")
	} else {
		rel()
	}
	releases[0]()
	if rel, ok := f.hold(a); !ok {
		t.Fatal("a forward after a release refused")
	} else {
		rel()
	}
	for _, rel := range releases[1:] {
		rel()
	}
	if len(f.n) != 0 {
		t.Fatalf("counts left: %v", f.n)
	}
}

// TestRegressionDirectTCPIPNeverDialsGatewayNetwork: the stock
// direct-tcpip handler dials whatever the client names from the gateway
// (the Teleport class of bypass). Ours refuses every destination that is
// not a box name, with the reason, and the gateway's own listener is never
// reached; a box name on a gateway without a fleet is refused too.
func TestRegressionDirectTCPIPNeverDialsGatewayNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	reached := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			reached <- struct{}{}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	f := start(t, 20)
	c, err := f.dial(gossh.PublicKeys(f.op))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, dest := range []string{
		fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("localhost:%d", port), fmt.Sprintf("[::1]:%d", port),
		fmt.Sprintf("0.0.0.0:%d", port), fmt.Sprintf("127.1:%d", port), fmt.Sprintf("localhost.:%d", port),
	} {
		_, err := c.Dial("tcp", dest)
		var oce *gossh.OpenChannelError
		if !errors.As(err, &oce) || oce.Reason != gossh.Prohibited || !strings.Contains(oce.Message, "only a box name") {
			t.Errorf("direct-tcpip to %s: %v, want refused as not a box name", dest, err)
		}
	}
	// A box name passes the front's check and goes to the core: here there
	// is none, and the refusal says so.
	if _, err := c.Dial("tcp", "somebox:80"); err == nil {
		t.Error("direct-tcpip to a box on a gateway without a fleet accepted")
	}
	select {
	case <-reached:
		t.Fatal("a forward reached the gateway's own listener")
	case <-time.After(200 * time.Millisecond):
	}
}
