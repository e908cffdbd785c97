package sshd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// boxServerJS is a web server a process in the box runs on 127.0.0.1 only:
// reachable through the agent connection, not through any network.
const boxServerJS = `require('http').createServer((q, s) => {
  s.end('hello from ' + process.argv[1] + ' ' + q.url);
}).listen(8000, '127.0.0.1', () => console.log('listening'));`

// serveInBox starts boxServerJS in the box as owner and waits until it
// listens; the process ends with the test.
func serveInBox(t *testing.T, g *gateway, owner, name string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := g.fleet.Exec(ctx, g.actors[owner], name, fleet.ExecRequest{Argv: []string{"node", "-e", boxServerJS, name}, User: fleet.AgentUser})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stdin().Close() })
	line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
	if err != nil || line != "listening\n" {
		t.Fatalf("box server: %q %v", line, err)
	}
}

// freePort is a local port nobody listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestPortForwardOpenSSH: `ssh -N -L` with the real OpenSSH client reaches
// a web server inside the caller's box; -L to another user's box, to the
// gateway's own addresses and to unknown names gets no byte of anything,
// the client is told why, and every attempt is an audit row.
func TestPortForwardOpenSSH(t *testing.T) {
	g := newGateway(t)
	mine := g.newBox("alice", "!say x")
	bobs := g.newBox("bob", "!say y")
	serveInBox(t, g, "alice", mine)
	serveInBox(t, g, "bob", bobs)

	// A listener on the gateway's own loopback: forwarding must never reach
	// the gateway's network (the stock handler would).
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HOST SECRET\n"))
			c.Close()
		}
	}()
	hostPort := host.Addr().(*net.TCPAddr).Port

	dests := map[string]string{
		"own":     mine + ":8000",
		"other":   bobs + ":8000",
		"ip":      fmt.Sprintf("127.0.0.1:%d", hostPort),
		"local":   fmt.Sprintf("localhost:%d", hostPort),
		"unknown": "nosuchbox:8000",
		"closed":  mine + ":8001",
	}
	order := []string{"own", "other", "ip", "local", "unknown", "closed"}
	ports := map[string]int{}
	var opts []string
	for _, k := range order {
		ports[k] = freePort(t)
		opts = append(opts, "-L", fmt.Sprintf("%d:%s", ports[k], dests[k]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// OpenSSH logs a refused channel at INFO ("open failed"); the first
	// LogLevel given wins, so the test's options are rebuilt.
	args := replace(g.sshOpts("alice"), "LogLevel=ERROR", "LogLevel=INFO")
	args = append(append(append(args, "-p", g.port, "-N", "-o", "ExitOnForwardFailure=yes"), opts...), "127.0.0.1")
	cmd := exec.CommandContext(ctx, "ssh", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	waitListen(t, ports["own"])

	// Over HTTP, through the tunnel, twice (a fresh channel each).
	for i := range 2 {
		body := httpGet(t, ports["own"], fmt.Sprintf("/x%d", i))
		if want := fmt.Sprintf("hello from %s /x%d", mine, i); body != want {
			t.Fatalf("through the tunnel: %q, want %q", body, want)
		}
	}
	// A large upload and its answer both ways, with the client's
	// half-close (the box's server answers after reading to EOF).
	echoThroughBox(t, g, "alice", mine)

	for _, k := range order[1:] {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[k]))
		if err != nil {
			t.Fatalf("%s: the client's listener: %v", k, err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.0\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(time.Minute))
		got, _ := io.ReadAll(c)
		c.Close()
		if len(got) != 0 {
			t.Errorf("-L to %s (%s) got %q, want nothing", k, dests[k], got)
		}
	}
	// OpenSSH prints each refusal with the server's reason.
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(stderr.String(), "open failed") < len(order)-1 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	msgs := stderr.String()
	for _, want := range []string{
		fmt.Sprintf("administratively prohibited: box %q: not found", bobs),
		`administratively prohibited: destination "127.0.0.1": only a box name can be forwarded to`,
		`administratively prohibited: destination "localhost": only a box name`,
		`administratively prohibited: box "nosuchbox": not found`,
		fmt.Sprintf("connect failed: nothing listens on port 8001 in box %q", mine),
	} {
		if !strings.Contains(msgs, want) {
			t.Errorf("ssh's stderr lacks %q:\n%s", want, msgs)
		}
	}
	if strings.Contains(msgs, "HOST SECRET") {
		t.Fatal("a forward reached the gateway's own network")
	}

	// An admin may forward to anyone's box; bob may not reach alice's.
	if body := forwardOnce(t, g, "root", mine+":8000"); body != "hello from "+mine+" /admin" {
		t.Fatalf("admin's forward: %q", body)
	}
	if body := forwardOnce(t, g, "bob", mine+":8000"); body != "" {
		t.Fatalf("bob reached alice's box: %q", body)
	}

	// Remote forwarding stays off.
	c, err := gossh.Dial("tcp", g.addr, &gossh.ClientConfig{User: "alice", Auth: []gossh.AuthMethod{gossh.PublicKeys(keySigner(t, g, "alice"))},
		HostKeyCallback: gossh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
		t.Fatal("tcpip-forward accepted")
	}

	// A sleeping box's ports are refused with the reason (Conflict), not woken.
	g.must("alice", "sleep", mine)
	if _, err := c.Dial("tcp", mine+":8000"); err == nil || !strings.Contains(err.Error(), "asleep") {
		t.Fatalf("forward to a sleeping box: %v", err)
	}

	rows, err := g.audit.List(context.Background(), audit.Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ok, refused int
	for _, r := range rows {
		if r.Action != "box.forward" {
			continue
		}
		if r.Result == audit.ResultOK && r.Target == mine && r.Detail == "port 8000" && r.Front == "ssh" {
			ok++
		} else if r.Result != audit.ResultOK {
			refused++
		}
	}
	if ok < 4 || refused < 2 { // 2 GETs + the echo by alice, 1 by root; 8001 and the sleeping box
		t.Fatalf("box.forward audit rows: %d ok, %d refused, want ≥ 4 and ≥ 2", ok, refused)
	}
}

func waitListen(t *testing.T, port int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ssh -L never listened on %d", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func httpGet(t *testing.T, port int, path string) string {
	t.Helper()
	cl := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		t.Fatalf("GET %s through the tunnel: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// forwardOnce runs `ssh -N -L` as user to dest and GETs /admin through it;
// "" when the channel was refused.
func forwardOnce(t *testing.T, g *gateway, user, dest string) string {
	t.Helper()
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := g.sshCmd(ctx, user, []string{"-N", "-L", fmt.Sprintf("%d:%s", port, dest)})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	waitListen(t, port)
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /admin HTTP/1.0\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(time.Minute))
	b, _ := io.ReadAll(c)
	if len(b) == 0 {
		return ""
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		t.Fatalf("answer through the tunnel %q: %v", b, err)
	}
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// echoThroughBox sends 2 MB to a counting server in the box through the
// core's DialPort, half-closes, and reads the count back.
func echoThroughBox(t *testing.T, g *gateway, user, name string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const js = `require('net').createServer(c => { let n = 0; c.on('data', d => n += d.length); c.on('end', () => c.end('got ' + n)); }).listen(8002, '127.0.0.1', () => console.log('listening'));`
	p, err := g.fleet.Exec(ctx, g.actors[user], name, fleet.ExecRequest{Argv: []string{"node", "-e", js}, User: fleet.AgentUser})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stdin().Close()
	if line, err := bufio.NewReader(p.Stdout()).ReadString('\n'); err != nil || line != "listening\n" {
		t.Fatalf("counting server: %q %v", line, err)
	}
	conn, err := g.fleet.DialPort(ctx, g.actors[user], name, 8002)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const size = 2 << 20
	go func() {
		conn.Write(bytes.Repeat([]byte{'z'}, size))
		conn.(interface{ CloseWrite() error }).CloseWrite()
	}()
	conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	b, err := io.ReadAll(conn)
	if err != nil || string(b) != fmt.Sprintf("got %d", size) {
		t.Fatalf("count through DialPort: %q %v", b, err)
	}
	// The core refuses a port out of range and a box of someone else.
	if _, err := g.fleet.DialPort(ctx, g.actors[user], name, 0); err == nil {
		t.Fatal("DialPort to port 0 accepted")
	}
	if _, err := g.fleet.DialPort(ctx, g.actors["bob"], name, 8002); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("bob's DialPort to alice's box: %v", err)
	}
}

// keySigner loads user's private key file for x/crypto's client.
func keySigner(t *testing.T, g *gateway, user string) gossh.Signer {
	t.Helper()
	b, err := os.ReadFile(g.keys[user])
	if err != nil {
		t.Fatal(err)
	}
	s, err := gossh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
