package sshd

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// The numbers of issue 6: attach keystroke echo round trip and scp
// throughput out of a box, each beside the same operation through
// OpenSSH's own sshd on this machine (to a local shell / a local file).
// Both sides use the same clients, so the ratio is the servers'.
//
//	go test ./gateway/sshd -run XXX -bench 'Attach|SCP' -benchtime 200x

// localSSHD runs OpenSSH's sshd on a free port, letting user's key in as
// root. It needs root (privilege separation) and /usr/sbin/sshd.
func localSSHD(b *testing.B, g *gateway, user string) (port string) {
	b.Helper()
	if os.Getuid() != 0 {
		b.Skip("the local sshd needs root")
	}
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		b.Skip("needs openssh-server")
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // sshd's privilege separation directory
		b.Fatal(err)
	}
	dir := b.TempDir()
	hostKey := filepath.Join(dir, "host")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", hostKey).CombinedOutput(); err != nil {
		b.Fatalf("ssh-keygen: %v %s", err, out)
	}
	pub, err := exec.Command("ssh-keygen", "-y", "-f", g.keys[user]).Output()
	if err != nil {
		b.Fatal(err)
	}
	auth := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(auth, pub, 0o600); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	ln.Close()
	cfg := filepath.Join(dir, "sshd_config")
	conf := fmt.Sprintf(`ListenAddress 127.0.0.1
HostKey %s
AuthorizedKeysFile %s
PidFile none
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
Subsystem sftp internal-sftp
LogLevel ERROR
`, hostKey, auth)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", cfg, "-p", port)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			c.Close()
			return port
		}
		if i > 100 {
			b.Fatalf("local sshd did not listen: %s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// echoer is a PTY session running cat: a key sent comes back as the TTY's
// echo, the round trip a person feels when typing in attach.
type echoer struct {
	sess *gossh.Session
	in   io.Writer
	out  io.Reader
}

func newEchoer(b *testing.B, addr, user, keyFile, command string) *echoer {
	b.Helper()
	key, err := os.ReadFile(keyFile)
	if err != nil {
		b.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	c, err := gossh.Dial("tcp", addr, &gossh.ClientConfig{User: user, Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}) // local test servers
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	sess, err := c.NewSession()
	if err != nil {
		b.Fatal(err)
	}
	if err := sess.RequestPty("xterm", 24, 80, gossh.TerminalModes{gossh.ECHO: 1}); err != nil {
		b.Fatal(err)
	}
	in, err := sess.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := sess.Start(command); err != nil {
		b.Fatal(err)
	}
	e := &echoer{sess: sess, in: in, out: out}
	// Wait until cat runs: a marker line comes back from it.
	if _, err := io.WriteString(in, "ready\r"); err != nil {
		b.Fatal(err)
	}
	var seen []byte
	buf := make([]byte, 256)
	for !bytes.Contains(seen, []byte("ready\r\nready\r\n")) {
		n, err := out.Read(buf)
		if err != nil {
			b.Fatalf("echo session: %v %q", err, seen)
		}
		seen = append(seen, buf[:n]...)
	}
	return e
}

// roundTrip sends one key and waits for its echo. The key is 'y', which
// cannot begin a secret pattern: the core's redactor holds bytes that
// could (a, b, e, g, n, p, r, s, t, x, ...) until the line ends.
func (e *echoer) roundTrip(b *testing.B) time.Duration {
	start := time.Now()
	if _, err := e.in.Write([]byte{'y'}); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64)
	for {
		n, err := e.out.Read(buf)
		if err != nil {
			b.Fatal(err)
		}
		if bytes.IndexByte(buf[:n], 'y') >= 0 {
			return time.Since(start)
		}
	}
}

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(int(float64(len(s))*q), len(s)-1)]
}

// BenchmarkAttachEcho: one keystroke to a cat on the box's PTY through
// attach, against the same on OpenSSH's sshd to a local PTY; alternated,
// so both see the same load.
func BenchmarkAttachEcho(b *testing.B) {
	g := newGateway(b)
	name := g.newBox("alice", "!say bench")
	port := localSSHD(b, g, "alice")
	sbx := newEchoer(b, g.addr, "alice", g.keys["alice"], "attach "+name+" -- cat")
	ossh := newEchoer(b, "127.0.0.1:"+port, "root", g.keys["alice"], "cat")
	var ts, to []time.Duration
	for b.Loop() {
		ts = append(ts, sbx.roundTrip(b))
		to = append(to, ossh.roundTrip(b))
	}
	ms, mo := quantile(ts, 0.5), quantile(to, 0.5)
	b.ReportMetric(float64(ms.Microseconds()), "sbx-median-µs")
	b.ReportMetric(float64(quantile(ts, 0.99).Microseconds()), "sbx-p99-µs")
	b.ReportMetric(float64(mo.Microseconds()), "openssh-median-µs")
	b.ReportMetric(float64(quantile(to, 0.99).Microseconds()), "openssh-p99-µs")
	b.ReportMetric(float64(ms)/float64(mo), "median-ratio")
	b.ReportMetric(float64(quantile(ts, 0.99))/float64(quantile(to, 0.99)), "p99-ratio")
}

// BenchmarkSCP: a 50 MB file out of a box with scp (SFTP mode and -O),
// against the same file from OpenSSH's sshd on this machine.
func BenchmarkSCP(b *testing.B) {
	const size = 50_000_000
	g := newGateway(b)
	name := g.newBox("alice", "!say bench")
	g.must("alice", "exec", name, "--", "sh", "-c", fmt.Sprintf("'head -c %d /dev/urandom > /workspace/big.bin'", size))
	port := localSSHD(b, g, "alice")
	local := filepath.Join(b.TempDir(), "big.bin")
	if out, err := exec.Command("sh", "-c", fmt.Sprintf("head -c %d /dev/urandom > %s", size, local)).CombinedOutput(); err != nil {
		b.Fatalf("%v %s", err, out)
	}
	dst := filepath.Join(b.TempDir(), "out.bin")
	scp := func(port, src string, extra ...string) time.Duration {
		args := append(append(g.sshOpts("alice"), "-P", port), extra...)
		args = append(args, src, dst)
		start := time.Now()
		if out, err := exec.Command("scp", args...).CombinedOutput(); err != nil {
			b.Fatalf("scp %s: %v %s", src, err, out)
		}
		d := time.Since(start)
		if fi, err := os.Stat(dst); err != nil || fi.Size() != size {
			b.Fatalf("scp %s: %v size %d", src, err, fi.Size())
		}
		return d
	}
	for _, mode := range []struct {
		name  string
		extra []string
	}{{"sftp", nil}, {"legacy", []string{"-O"}}} {
		b.Run(mode.name, func(b *testing.B) {
			var ts, to []time.Duration
			for b.Loop() {
				ts = append(ts, scp(g.port, "root@127.0.0.1:"+name+"/big.bin", mode.extra...))
				to = append(to, scp(port, "root@127.0.0.1:"+local, mode.extra...))
			}
			mbps := func(d time.Duration) float64 { return size / d.Seconds() / 1e6 }
			ms, mo := mbps(quantile(ts, 0.5)), mbps(quantile(to, 0.5))
			b.ReportMetric(ms, "sbx-MB/s")
			b.ReportMetric(mo, "openssh-MB/s")
			b.ReportMetric(ms/mo, "ratio")
		})
	}
}
