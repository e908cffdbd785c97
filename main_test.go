package main

// End-to-end tests: testdata/script/*.txtar drive the real sbx binary (this
// test binary re-executed as "sbx", its serve given the test's extensions:
// sbxForScripts) with the real OpenSSH client, real SQLite and real HTTP.
// Custom commands:
//
//	serve [-admin KEY] [-data DIR] [-env NAME=VALUE]... [args...]
//	                                          start `sbx serve` on random ports; sets SSH_PORT, HTTP_URL
//	shutdown [-9] [-within DUR] [-when RE [-after DUR]]  signal once serve.log matches RE (and DUR passed); TERM must finish within DUR
//	sshx [-exit N] KEY [ssh options... --] [command...] run OpenSSH as the owner of $WORK/KEY against the server;
//	                                          -exit: it must exit with status N (README's exit codes)
//	sshloop N KEY [command...]                run sshx N times, each must fail authentication
//	http [-token FILE] [-H 'K: V'] [-body S] [-bodysize N] [-secure [-console]] [-jar FILE] METHOD PATH|@FILE
//	                                          one HTTP request; prints "HTTP <code>", headers, a blank line, the body
//	clock DUR                                 shift the server's clock by DUR (test clock file)
//	sshprobe KEY KIND                         x/crypto client: ask for agent|x11|direct-tcpip|tcpip-forward|env and print accepted/refused
//	addkeys N FILE                            write N fresh ed25519 public keys to FILE (authorized_keys text)
//	sleep DUR                                 pause the script
//	waitlog RE                                wait until serve.log matches RE
//	tlscert CERT KEY                          write a self-signed certificate for 127.0.0.1
//	blackhole FILE                            listen on loopback, never answer; sets BLACKHOLE, creates FILE at the first connection

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/gateway/config"
	"sbx.dev/sbx/internal/testutil"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"sbx": sbxForScripts})
}

func TestScripts(t *testing.T) {
	for tool, pkg := range map[string]string{
		"ssh": "openssh-client", "ssh-keygen": "openssh-client", "ssh-agent": "openssh-client",
		"sqlite3": "sqlite3", "bash": "bash", "timeout": "coreutils",
	} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the end-to-end tests need %s (apt-get install %s)", tool, pkg)
		}
	}
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Values[serverKey{}] = &server{}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"serve":     cmdServe,
			"shutdown":  cmdStop,
			"sshx":      cmdSSH,
			"sshloop":   cmdSSHLoop,
			"http":      cmdHTTP,
			"clock":     cmdClock,
			"sshprobe":  cmdSSHProbe,
			"addkeys":   cmdAddKeys,
			"tlscert":   cmdTLSCert,
			"blackhole": cmdBlackhole,
			"waitlog": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: waitlog REGEXP")
				}
				waitLog(ts, args[0])
			},
			"sleep": func(ts *testscript.TestScript, neg bool, args []string) {
				d, err := time.ParseDuration(args[0])
				ts.Check(err)
				time.Sleep(d)
			},
		},
	})
}

type serverKey struct{}

// server is the `sbx serve` process of one script.
type server struct {
	cmd  *exec.Cmd
	done chan error
}

func serverOf(ts *testscript.TestScript) *server { return ts.Value(serverKey{}).(*server) }

// lookPath finds name on the script's PATH (where testscript put sbx).
func lookPath(ts *testscript.TestScript, name string) string {
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	ts.Fatalf("%s not on PATH", name)
	return ""
}

func cmdServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! serve")
	}
	// -admin, -data and -env are ours; everything else goes to `sbx serve`.
	admin, data := "", "data"
	var rest, extraEnv []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-admin" && i+1 < len(args):
			admin, i = args[i+1], i+1
		case args[i] == "-data" && i+1 < len(args):
			data, i = args[i+1], i+1
		case args[i] == "-env" && i+1 < len(args):
			extraEnv, i = append(extraEnv, args[i+1]), i+1
		default:
			rest = append(rest, args[i])
		}
	}
	srv := serverOf(ts)
	if srv.cmd != nil {
		ts.Fatalf("serve: a server is already running; stop it first")
	}
	dataDir := ts.MkAbs(data)
	addrFile := filepath.Join(dataDir, "sbx.addr")
	_ = os.Remove(addrFile)

	env := []string{"PATH=" + ts.Getenv("PATH"), "HOME=" + ts.Getenv("HOME"), "TMPDIR=" + ts.Getenv("TMPDIR"),
		// Under -race the runtime sleeps 1 s at exit; the drain check measures ours.
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}
	// These scripts test the gateway itself: no boxes (and no KVM probe at
	// every start) unless a script sets SBX_VM_BACKEND.
	if ts.Getenv(config.EnvName("vm.backend")) == "" {
		env = append(env, config.EnvName("vm.backend")+"=none")
	}
	// Pass through the SBX_* variables the script set (config precedence).
	for _, k := range append(config.Keys(), "data") {
		name := config.EnvName(k)
		if v := ts.Getenv(name); v != "" {
			env = append(env, name+"="+v)
		}
	}
	// Variables that are no config key (a typo, another tool's).
	env = append(env, extraEnv...)
	if admin != "" {
		pub, err := os.ReadFile(ts.MkAbs(admin + ".pub"))
		ts.Check(err)
		env = append(env, "SBX_ADMIN_KEYS="+string(pub))
	}
	cmdArgs := append([]string{"serve", "--data", dataDir,
		"--ssh-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--test-clock-file", ts.MkAbs("clock")}, rest...)
	cmd := exec.Command(lookPath(ts, "sbx"), cmdArgs...)
	cmd.Env = env
	cmd.Dir = ts.MkAbs(".")
	out, err := os.OpenFile(ts.MkAbs("serve.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	ts.Check(err)
	logf, err := os.OpenFile(ts.MkAbs("serve.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	ts.Check(err)
	// A restart appends to serve.out: only a banner past this offset is this start's.
	var before int
	if fi, err := out.Stat(); err == nil {
		before = int(fi.Size())
	}
	cmd.Stdout, cmd.Stderr = out, logf
	ts.Check(cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); out.Close(); logf.Close() }()
	srv.cmd, srv.done = cmd, done
	ts.Defer(func() {
		// One deferred stop per serve: the first to run stops the server
		// still running, the rest find none (a second receive on done would
		// hang a failed script until the test timeout).
		if srv.cmd != nil {
			_ = srv.cmd.Process.Kill()
			<-srv.done
			srv.cmd = nil
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		// Ready once the address file names this process and its banner
		// (written in one piece after the file) is out.
		out, _ := os.ReadFile(ts.MkAbs("serve.out"))
		i := bytes.LastIndex(out, []byte("sbx is serving"))
		if addrs, ok := testutil.ReadAddrFile(addrFile, "ssh", "url"); ok && addrs["pid"] == strconv.Itoa(cmd.Process.Pid) && i >= before {
			_, port, _ := net.SplitHostPort(addrs["ssh"])
			ts.Setenv("SSH_PORT", port)
			ts.Setenv("HTTP_URL", addrs["url"])
			ts.Setenv("SBX_PID", addrs["pid"])
			// What this start printed, for `stdout` checks.
			fmt.Fprintf(ts.Stdout(), "%s", out[i:])
			return
		}
		select {
		case err := <-done:
			srv.cmd = nil
			log, _ := os.ReadFile(ts.MkAbs("serve.log"))
			ts.Fatalf("sbx serve exited before listening: %v\n%s", err, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			ts.Fatalf("sbx serve did not write %s within 30s", addrFile)
		}
	}
}

func cmdStop(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("stop", flag.ContinueOnError)
	kill := fs.Bool("9", false, "SIGKILL instead of SIGTERM")
	within := fs.Duration("within", 5*time.Second, "SIGTERM must finish within this")
	when := fs.String("when", "", "first wait until serve.log matches this regexp")
	after := fs.Duration("after", 0, "then wait this long")
	ts.Check(fs.Parse(args))
	srv := serverOf(ts)
	if srv.cmd == nil {
		ts.Fatalf("stop: no server running")
	}
	if *when != "" {
		waitLog(ts, *when)
		time.Sleep(*after)
	}
	sig := syscall.SIGTERM
	if *kill {
		sig = syscall.SIGKILL
	}
	start := time.Now()
	ts.Check(srv.cmd.Process.Signal(sig))
	var err error
	select {
	case err = <-srv.done:
	case <-time.After(30 * time.Second):
		ts.Fatalf("sbx serve still running 30s after %v", sig)
	}
	took := time.Since(start)
	srv.cmd = nil
	ts.Logf("sbx serve stopped by %v in %v (err %v)", sig, took.Round(time.Millisecond), err)
	if *kill {
		return
	}
	if err != nil && !neg {
		ts.Fatalf("sbx serve exited with %v after SIGTERM", err)
	}
	if took > *within {
		ts.Fatalf("SIGTERM drain took %v, more than %v", took, *within)
	}
}

// sshArgs builds the OpenSSH command line for the owner of $WORK/key.
func sshArgs(ts *testscript.TestScript, key string, args []string) []string {
	var opts, command []string
	if i := slices.Index(args, "--"); i >= 0 {
		opts, command = args[:i], args[i+1:]
	} else {
		command = args
	}
	out := []string{"-F", "none", "-i", ts.MkAbs(key), "-p", ts.Getenv("SSH_PORT"),
		"-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
		// One alias for every port, so a changed host key across restarts
		// fails instead of being accepted as a new host.
		"-o", "HostKeyAlias=sbx-test", "-o", "StrictHostKeyChecking=accept-new",
		"-o", "UserKnownHostsFile=" + ts.MkAbs("known_hosts")}
	if !slices.Contains(opts, "-v") {
		out = append(out, "-o", "LogLevel=ERROR")
	}
	if !slices.Contains(opts, "-tt") && !slices.Contains(opts, "-t") {
		out = append(out, "-T")
	}
	out = append(out, opts...)
	out = append(out, "127.0.0.1")
	return append(out, command...)
}

func cmdSSH(ts *testscript.TestScript, neg bool, args []string) {
	want := -1
	if len(args) > 1 && args[0] == "-exit" {
		n, err := strconv.Atoi(args[1])
		ts.Check(err)
		want, args = n, args[2:]
	}
	if len(args) < 1 {
		ts.Fatalf("usage: sshx [-exit N] KEY [ssh options... --] [command...]")
	}
	err := ts.Exec("ssh", sshArgs(ts, args[0], args[1:])...)
	if want >= 0 {
		got := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			got = exit.ExitCode()
		} else if err != nil {
			ts.Fatalf("ssh: %v", err)
		}
		if got != want {
			ts.Fatalf("ssh exit status %d, want %d", got, want)
		}
	}
	if err != nil {
		ts.Logf("[%v]", err)
		if !neg {
			ts.Fatalf("unexpected ssh failure")
		}
	} else if neg {
		ts.Fatalf("unexpected ssh success")
	}
}

func cmdSSHLoop(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: sshloop N KEY [command...]")
	}
	n, err := strconv.Atoi(args[0])
	ts.Check(err)
	for i := range n {
		if err := ts.Exec("ssh", sshArgs(ts, args[1], args[2:])...); err == nil {
			ts.Fatalf("attempt %d: ssh succeeded", i+1)
		}
	}
}

// cmdBlackhole listens on loopback and never answers: a start step that
// connects there (a postgres store.dsn) blocks until it is interrupted.
func cmdBlackhole(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: blackhole FILE")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	ts.Setenv("BLACKHOLE", ln.Addr().String())
	marker := ts.MkAbs(args[0])
	accepted := make(chan []net.Conn, 1)
	go func() {
		var conns []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				accepted <- conns
				return
			}
			conns = append(conns, c)
			_ = os.WriteFile(marker, nil, 0o600)
		}
	}()
	ts.Defer(func() {
		ln.Close()
		for _, c := range <-accepted {
			c.Close()
		}
	})
}

// waitLog polls serve.log until it matches re.
func waitLog(ts *testscript.TestScript, re string) {
	rx, err := regexp.Compile(re)
	ts.Check(err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, _ := os.ReadFile(ts.MkAbs("serve.log"))
		if rx.Match(data) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("serve.log never matched %q", re)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func cmdClock(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: clock DURATION")
	}
	_, err := time.ParseDuration(args[0])
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs("clock"), []byte(args[0]), 0o600))
}

// secureHeaders are the headers every response must carry, exactly.
var secureHeaders = map[string]string{
	"Content-Security-Policy":      "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'",
	"X-Content-Type-Options":       "nosniff",
	"X-Frame-Options":              "DENY",
	"Referrer-Policy":              "no-referrer",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
}

func cmdHTTP(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("http", flag.ContinueOnError)
	tokenFile := fs.String("token", "", "file holding an API key")
	var headers multiFlag
	fs.Var(&headers, "H", "extra header 'Name: value'")
	body := fs.String("body", "", "request body")
	bodySize := fs.Int("bodysize", 0, "send a JSON string body of this many bytes")
	secure := fs.Bool("secure", false, "fail unless every security header is present")
	jar := fs.String("jar", "", "cookie file: its name=value lines are sent, Set-Cookie answers update it")
	console := fs.Bool("console", false, "with -secure: a console route, whose CSP may add report-uri and whose errors may be HTML pages")
	ts.Check(fs.Parse(args))
	if fs.NArg() != 2 {
		ts.Fatalf("usage: http [flags] METHOD PATH")
	}
	var rd io.Reader
	switch {
	case *bodySize > 0:
		rd = bytes.NewReader(append(append([]byte(`{"name":"`), bytes.Repeat([]byte("a"), *bodySize)...), `"}`...))
	case *body != "":
		rd = strings.NewReader(*body)
	}
	path := fs.Arg(1)
	if name, ok := strings.CutPrefix(path, "@"); ok {
		// The URL an earlier command printed, e.g. a login link.
		data, err := os.ReadFile(ts.MkAbs(name))
		ts.Check(err)
		path = strings.TrimPrefix(strings.TrimSpace(string(data)), ts.Getenv("HTTP_URL"))
	}
	req, err := http.NewRequest(fs.Arg(0), ts.Getenv("HTTP_URL")+path, rd)
	ts.Check(err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if *tokenFile != "" {
		tok, err := os.ReadFile(ts.MkAbs(*tokenFile))
		ts.Check(err)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	cookies := map[string]string{}
	if *jar != "" {
		data, _ := os.ReadFile(ts.MkAbs(*jar))
		for line := range strings.SplitSeq(string(data), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				cookies[k] = v
				req.AddCookie(&http.Cookie{Name: k, Value: v})
			}
		}
	}
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}, Transport: &http.Transport{
		// The test's own self-signed certificate (tlscert).
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	resp, err := client.Do(req)
	ts.Check(err)
	defer resp.Body.Close()
	if *jar != "" {
		for _, c := range resp.Cookies() {
			if c.MaxAge < 0 || c.Value == "" {
				delete(cookies, c.Name)
			} else {
				cookies[c.Name] = c.Value
			}
		}
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(cookies)) {
			fmt.Fprintf(&b, "%s=%s\n", k, cookies[k])
		}
		ts.Check(os.WriteFile(ts.MkAbs(*jar), []byte(b.String()), 0o600))
	}
	data, err := io.ReadAll(resp.Body)
	ts.Check(err)
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d\n", resp.StatusCode)
	names := make([]string, 0, len(resp.Header))
	for k := range resp.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(resp.Header[k], ", "))
	}
	fmt.Fprintf(&b, "\n%s", data)
	fmt.Fprint(ts.Stdout(), b.String())
	if *secure {
		for k, want := range secureHeaders {
			got := resp.Header.Get(k)
			if *console && k == "Content-Security-Policy" && got == want+"; report-uri /csp-report" {
				continue
			}
			if got != want {
				ts.Fatalf("%s %s → %d: header %s = %q, want %q", fs.Arg(0), fs.Arg(1), resp.StatusCode, k, got, want)
			}
		}
		for _, k := range []string{"Permissions-Policy", "X-Request-Id"} {
			if resp.Header.Get(k) == "" {
				ts.Fatalf("%s %s → %d: header %s missing", fs.Arg(0), fs.Arg(1), resp.StatusCode, k)
			}
		}
		for _, deny := range []string{"camera=()", "microphone=()", "geolocation=()", "usb=()"} {
			if !strings.Contains(resp.Header.Get("Permissions-Policy"), deny) {
				ts.Fatalf("Permissions-Policy lacks %s", deny)
			}
		}
		hsts := resp.Header.Get("Strict-Transport-Security")
		switch {
		case resp.TLS == nil && hsts != "":
			ts.Fatalf("HSTS sent over plain HTTP")
		case resp.TLS != nil && hsts != "max-age=31536000; includeSubDomains":
			ts.Fatalf("HSTS under TLS = %q", hsts)
		}
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode >= 400 && !strings.HasPrefix(ct, "application/json") && !*console {
			ts.Fatalf("error response with Content-Type %q, want JSON", ct)
		}
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// cmdSSHProbe asks for things OpenSSH cannot show a refusal of (agent and
// X11 requests want no reply from OpenSSH), using the Go client.
func cmdSSHProbe(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: sshprobe KEY agent|x11|direct-tcpip|tcpip-forward|env")
	}
	keyPEM, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	signer, err := gossh.ParsePrivateKey(keyPEM)
	ts.Check(err)
	client, err := gossh.Dial("tcp", "127.0.0.1:"+ts.Getenv("SSH_PORT"), &gossh.ClientConfig{
		User:            "probe",
		Auth:            []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), // the probe checks refusals, not the host
		Timeout:         10 * time.Second,
	})
	ts.Check(err)
	defer client.Close()
	accepted := false
	switch kind := args[1]; kind {
	case "agent", "x11", "env":
		sess, err := client.NewSession()
		ts.Check(err)
		defer sess.Close()
		switch kind {
		case "agent":
			accepted, err = sess.SendRequest("auth-agent-req@openssh.com", true, nil)
		case "x11":
			payload := gossh.Marshal(struct {
				Single   bool
				Protocol string
				Cookie   string
				Screen   uint32
			}{false, "MIT-MAGIC-COOKIE-1", "00112233445566778899aabbccddeeff", 0})
			accepted, err = sess.SendRequest("x11-req", true, payload)
		case "env":
			accepted, err = sess.SendRequest("env", true, gossh.Marshal(struct{ Name, Value string }{"LANG", "C"}))
		}
		ts.Check(err)
	case "direct-tcpip":
		c, err := client.Dial("tcp", "127.0.0.1:"+ts.Getenv("SSH_PORT"))
		if err == nil {
			c.Close()
			accepted = true
		} else {
			ts.Logf("direct-tcpip: %v", err)
		}
	case "tcpip-forward":
		l, err := client.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			l.Close()
			accepted = true
		} else {
			ts.Logf("tcpip-forward: %v", err)
		}
	default:
		ts.Fatalf("sshprobe: unknown kind %q", kind)
	}
	if accepted {
		fmt.Fprintf(ts.Stdout(), "%s accepted\n", args[1])
	} else {
		fmt.Fprintf(ts.Stdout(), "%s refused\n", args[1])
	}
}

func cmdAddKeys(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: addkeys N FILE")
	}
	n, err := strconv.Atoi(args[0])
	ts.Check(err)
	var b strings.Builder
	for i := range n {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		ts.Check(err)
		pk, err := gossh.NewPublicKey(pub)
		ts.Check(err)
		fmt.Fprintf(&b, "%s gen-%d\n", strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pk))), i)
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(b.String()), 0o600))
}

func cmdTLSCert(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: tlscert CERT KEY")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ts.Check(err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sbx test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	ts.Check(err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600))
}
