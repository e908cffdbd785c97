package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/pkg/sftp"
	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// The files of a box over every front (issue 15, findings 4, 5 and 7): the
// whole gateway listening on loopback, a QEMU box from the agent image with
// the script agent, the real OpenSSH client, the console over HTTP with a
// session cookie, the MCP endpoint through the SDK's client with a
// read-scoped API key.

// frontsBox is a running gateway with one done box of alice's and a client
// for each front.
type frontsBox struct {
	*boxGateway
	box     string
	keyFile string // alice's OpenSSH private key
	sshPort string
	webURL  string
	web     *http.Client // signed in as alice
	mcp     *sdk.ClientSession
	ghp     string // credential-shaped, unknown to the gateway
}

func newFrontsBox(t *testing.T) *frontsBox {
	t.Helper()
	for _, tool := range []string{"ssh", "scp", "sftp"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs the OpenSSH client (%s)", tool)
		}
	}
	g := newBoxGateway(t, nil)
	ctx := context.Background()
	if err := g.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f := &frontsBox{boxGateway: g, webURL: g.s.HTTPURL()}
	_, f.sshPort, _ = net.SplitHostPort(g.s.SSHAddr().String())
	cli := keys.Actor{User: "test", Role: keys.RoleAdmin, Front: keys.FrontCLI}

	keyFile, signer := testutil.OpenSSHKey(t)
	f.keyFile = keyFile
	if _, err := g.s.keys.AddKeys(ctx, cli, "alice", string(gossh.MarshalAuthorizedKey(signer.PublicKey()))); err != nil {
		t.Fatal(err)
	}

	b, err := g.f.Delegate(ctx, g.alice, fleet.DelegateRequest{Agent: "script", Task: "!say ready"})
	if err != nil {
		t.Fatal(err)
	}
	f.box = b.Name
	g.waitState(f.box, fleet.Done)

	link, _, err := g.s.keys.CreateLoginLink(ctx, cli, "alice")
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	f.web = &http.Client{Jar: jar, Timeout: time.Minute, // a read that hangs (a FIFO did) fails, not the test run
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := f.web.PostForm(f.webURL+"/login/"+link, url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("web login: %d", resp.StatusCode)
	}

	tok, _, err := g.s.keys.CreateAPIKey(ctx, cli, "alice", "reader", []string{"read"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "sbx-test", Version: "v0"}, nil)
	tr := &sdk.StreamableClientTransport{Endpoint: f.webURL + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{token: tok, base: http.DefaultTransport}}}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if f.mcp, err = c.Connect(cctx, tr, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.mcp.Close() })

	r := make([]byte, 18)
	rand.Read(r)
	f.ghp = "ghp_" + strings.ToUpper(hex.EncodeToString(r))[:36]
	return f
}

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// put writes a file into the box through the core.
func (f *frontsBox) put(name string, data []byte) {
	f.t.Helper()
	if err := f.f.WriteFile(context.Background(), f.alice, f.box, name, 0o644, bytes.NewReader(data)); err != nil {
		f.t.Fatalf("put %s: %v", name, err)
	}
}

// get sends a GET as alice's browser.
func (f *frontsBox) get(path string) (*http.Response, []byte) {
	f.t.Helper()
	resp, err := f.web.Get(f.webURL + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("GET %s: %v", path, err)
	}
	return resp, body
}

func (f *frontsBox) sshOpts() []string {
	return []string{"-i", f.keyFile, "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"}
}

// ssh runs a command over the real OpenSSH client.
func (f *frontsBox) ssh(args ...string) (string, int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", append(append(f.sshOpts(), "-p", f.sshPort, "127.0.0.1"), args...)...)
	return runCode(f.t, cmd)
}

// scp copies BOX/PATH out with the real scp, in SFTP mode or legacy (-O).
func (f *frontsBox) scp(legacy bool, remote, local string, extra ...string) (string, int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(f.sshOpts(), "-P", f.sshPort)
	if legacy {
		args = append(args, "-O")
	}
	args = append(append(args, extra...), "127.0.0.1:"+remote, local)
	return runCode(f.t, exec.CommandContext(ctx, "scp", args...))
}

// sftp runs an sftp batch (each line may fail: "-" prefixes).
func (f *frontsBox) sftp(batch string) (string, int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(f.sshOpts(), "-P", f.sshPort, "-b", "-", "127.0.0.1")
	cmd := exec.CommandContext(ctx, "sftp", args...)
	cmd.Stdin = strings.NewReader(batch)
	return runCode(f.t, cmd)
}

func runCode(t *testing.T, cmd *exec.Cmd) (string, int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return string(out), 0
}

// tool calls an MCP tool as alice's read-scoped key.
func (f *frontsBox) tool(name string, args map[string]any) *sdk.CallToolResult {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := f.mcp.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		f.t.Fatalf("%s: protocol error: %v", name, err)
	}
	return res
}

// resultText is everything a tool result carries, as text, blobs included.
func resultText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			b.WriteString(c.Text)
		case *sdk.EmbeddedResource:
			b.WriteString(c.Resource.Text)
			b.Write(c.Resource.Blob)
		case *sdk.ResourceLink:
			b.WriteString(c.Name + " " + c.URI)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%v", res.StructuredContent)
	return b.String()
}

// sftpClient is a Go SFTP client on the gateway as alice, for what the
// OpenSSH client does not show (the size of an open file).
func (f *frontsBox) sftpClient() *sftp.Client {
	f.t.Helper()
	pemBytes, err := os.ReadFile(f.keyFile)
	if err != nil {
		f.t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(pemBytes)
	if err != nil {
		f.t.Fatal(err)
	}
	conn, err := gossh.Dial("tcp", "127.0.0.1:"+f.sshPort, &gossh.ClientConfig{User: "alice",
		Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)}, HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 30 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	c, err := sftp.NewClient(conn)
	if err != nil {
		conn.Close()
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close(); conn.Close() })
	return c
}

// TestRegressionBinaryArtifactRedaction: a file whose first bytes look
// binary was served byte for byte (issue 15, finding 4): a secret the
// gateway holds or a credential-shaped token behind a NUL byte left the box
// over the web download, SFTP, scp and MCP. Now every byte passes the
// redactor; the bytes around a secret stay, and what a front announces as
// the length is the length it sends.
func TestRegressionBinaryArtifactRedaction(t *testing.T) {
	f := newFrontsBox(t)
	secrets := []string{f.token, f.ghp}
	noise := make([]byte, 200<<10) // several SFTP reads, the secret in the middle
	for i := range noise {
		noise[i] = byte(i*131+i>>9) | 0x80
	}
	small := []byte("\x00" + f.token + "\x00\x01 " + f.ghp + "\xff")
	big := bytes.Join([][]byte{{0}, noise, []byte(f.token), noise, []byte(f.ghp), noise}, nil)
	files := map[string][]byte{"small.bin": small, "big.bin": big}
	for name, data := range files {
		f.put(name, data)
	}
	check := func(front, name string, got []byte) {
		t.Helper()
		for _, s := range secrets {
			if bytes.Contains(got, []byte(s)) {
				t.Errorf("%s %s: a secret left the box (%s…)", front, name, s[:8])
			}
		}
		if !bytes.HasPrefix(got, []byte{0}) || !bytes.Contains(got, []byte("ghp_…")) {
			t.Errorf("%s %s: not the redacted file (%d bytes, starts %q)", front, name, len(got), got[:min(len(got), 16)])
		}
		if name == "big.bin" && !bytes.Contains(got, noise) {
			t.Errorf("%s %s: the bytes around the secrets changed", front, name)
		}
	}
	var served = map[string][]byte{}
	for name := range files {
		// The web download.
		resp, body := f.get("/boxes/" + f.box + "/artifact?path=" + url.QueryEscape(name))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("web %s: %d %s", name, resp.StatusCode, body)
		}
		if resp.ContentLength >= 0 && resp.ContentLength != int64(len(body)) {
			t.Errorf("web %s: Content-Length %d, sent %d bytes", name, resp.ContentLength, len(body))
		}
		check("web", name, body)
		served[name] = body

		// scp in SFTP mode and legacy scp, sftp get.
		dir := t.TempDir()
		for _, legacy := range []bool{false, true} {
			local := filepath.Join(dir, fmt.Sprintf("scp-%v", legacy))
			if out, code := f.scp(legacy, f.box+"/"+name, local); code != 0 {
				t.Fatalf("scp (legacy %v) %s: exit %d: %s", legacy, name, code, out)
			}
			got, _ := os.ReadFile(local)
			check(fmt.Sprintf("scp (legacy %v)", legacy), name, got)
			if !bytes.Equal(got, body) {
				t.Errorf("scp (legacy %v) %s: %d bytes, the web served %d", legacy, name, len(got), len(body))
			}
		}
		local := filepath.Join(dir, "sftp")
		if out, code := f.sftp("get /" + f.box + "/" + name + " " + local + "\n"); code != 0 {
			t.Fatalf("sftp get %s: exit %d: %s", name, code, out)
		}
		got, _ := os.ReadFile(local)
		check("sftp", name, got)

		// An open file's size (fstat) is the size served.
		c := f.sftpClient()
		fh, err := c.Open("/" + f.box + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		all, err := io.ReadAll(fh)
		if err != nil {
			t.Fatal(err)
		}
		st, err := fh.Stat()
		if err != nil || st.Size() != int64(len(all)) {
			t.Errorf("sftp fstat of %s: %v %v, read %d bytes", name, st.Size(), err, len(all))
		}
		fh.Close()
		check("sftp (Go client)", name, all)

		// MCP: the tool and the resource.
		res := f.tool("read_artifact", map[string]any{"box": f.box, "path": name, "max_bytes": 4 << 20})
		if res.IsError {
			t.Fatalf("read_artifact %s: %s", name, resultText(res))
		}
		var blob []byte
		for _, c := range res.Content {
			if e, ok := c.(*sdk.EmbeddedResource); ok {
				blob = e.Resource.Blob
			}
		}
		check("read_artifact", name, blob)
		if text := resultText(res); strings.Contains(text, f.token) || strings.Contains(text, f.ghp) {
			t.Errorf("read_artifact %s: a secret in the result", name)
		}
		if out, _ := res.StructuredContent.(map[string]any); out == nil || out["size"] != float64(len(blob)) {
			t.Errorf("read_artifact %s: size %v, blob %d bytes", name, res.StructuredContent, len(blob))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		rr, err := f.mcp.ReadResource(ctx, &sdk.ReadResourceParams{URI: "sbx://" + f.box + "/" + name})
		cancel()
		if err != nil || len(rr.Contents) != 1 {
			t.Fatalf("resource %s: %v", name, err)
		}
		check("resource", name, rr.Contents[0].Blob)
	}
	if !bytes.Equal(served["small.bin"][:1], []byte{0}) {
		t.Error("the binary lost its first byte")
	}
}

// TestRegressionArtifactNameRedaction: file names in listings were never
// redacted (issue 15, finding 4): a file named after a secret showed it in
// the console's files page, an SFTP listing, scp's records and MCP's
// list_artifacts. Now a name (and a symlink's target) passes the redactor;
// the redacted name opens nothing, so nothing is read out under it.
func TestRegressionArtifactNameRedaction(t *testing.T) {
	f := newFrontsBox(t)
	secrets := []string{f.token, f.ghp}
	if out, code := f.sh(f.box, fmt.Sprintf(`set -e; cd /workspace; mkdir -p out/%[2]s; echo inner > out/%[2]s/x.txt
echo hello > out/leak-%[1]s.txt; echo plain > out/plain.txt; ln -s /tmp/%[1]s out/link`, f.token, f.ghp)); code != 0 {
		t.Fatalf("setup: %s", out)
	}
	leaks := func(front, s string) {
		t.Helper()
		for _, sec := range secrets {
			if strings.Contains(s, sec) {
				t.Errorf("%s: a secret in a name (%s…):\n%s", front, sec[:8], s)
			}
		}
	}

	// The console's files page.
	resp, body := f.get("/boxes/" + f.box + "/files?path=out")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("files page: %d %s", resp.StatusCode, body)
	}
	leaks("files page", string(body))
	if !strings.Contains(string(body), "plain.txt") || !strings.Contains(string(body), "name redacted") ||
		!strings.Contains(string(body), "leak-ghp_…"+f.token[len(f.token)-4:]) {
		t.Errorf("files page does not list the redacted names:\n%s", body)
	}
	// The redacted name opens nothing.
	redacted := "out/leak-ghp_…" + f.token[len(f.token)-4:] + ".txt"
	if resp, body := f.get("/boxes/" + f.box + "/artifact?path=" + url.QueryEscape(redacted)); resp.StatusCode != http.StatusNotFound {
		t.Errorf("artifact by the redacted name: %d %s", resp.StatusCode, body)
	}

	// SFTP listing and a symlink's target.
	out, _ := f.sftp("ls -la /" + f.box + "/out\n")
	leaks("sftp ls", out)
	if !strings.Contains(out, "plain.txt") || !strings.Contains(out, "leak-ghp_") {
		t.Errorf("sftp ls:\n%s", out)
	}
	ents, err := f.sftpClient().ReadDir("/" + f.box + "/out")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		leaks("sftp readdir", e.Name())
	}

	// scp -r, both protocols: no file lands under a secret's name, and the
	// redacted ones are named in a warning.
	for _, legacy := range []bool{false, true} {
		dst := t.TempDir()
		out, _ := f.scp(legacy, f.box+"/out", dst, "-r")
		leaks(fmt.Sprintf("scp -r (legacy %v) output", legacy), out)
		var names []string
		filepath.WalkDir(dst, func(p string, _ os.DirEntry, _ error) error {
			names = append(names, p)
			return nil
		})
		leaks(fmt.Sprintf("scp -r (legacy %v) files", legacy), strings.Join(names, "\n"))
		if b, err := os.ReadFile(filepath.Join(dst, "out", "plain.txt")); err != nil || string(b) != "plain\n" {
			t.Errorf("scp -r (legacy %v): plain.txt %q %v; got %v\n%s", legacy, b, err, names, out)
		}
	}

	// MCP list_artifacts.
	res := f.tool("list_artifacts", map[string]any{"box": f.box, "path": "out"})
	if res.IsError {
		t.Fatalf("list_artifacts: %s", resultText(res))
	}
	text := resultText(res)
	leaks("list_artifacts", text)
	if !strings.Contains(text, "plain.txt") || !strings.Contains(text, "name redacted") {
		t.Errorf("list_artifacts:\n%s", text)
	}
	// A symlink's target is box text too.
	if !strings.Contains(text, "/tmp/ghp_…"+f.token[len(f.token)-4:]) {
		t.Errorf("list_artifacts: the link's target is not shown redacted:\n%s", text)
	}
	res = f.tool("read_artifact", map[string]any{"box": f.box, "path": redacted})
	if !res.IsError {
		t.Errorf("read_artifact by the redacted name worked: %s", resultText(res))
	}
}

// TestRegressionReadOnlyNoWake: reads woke a sleeping box (issue 15,
// finding 5): a read-scoped key's read_artifact, list_artifacts or diff,
// and the console's and SSH's equivalents, changed the box's state. Now a
// read leaves a sleeping box asleep, with no audit row of a wake, and says
// how to wake it.
func TestRegressionReadOnlyNoWake(t *testing.T) {
	f := newFrontsBox(t)
	ctx := context.Background()
	f.put("notes.txt", []byte("notes\n"))
	if _, err := f.f.Sleep(ctx, f.alice, f.box); err != nil {
		t.Fatal(err)
	}
	f.waitState(f.box, fleet.Sleeping)
	wakes := len(f.auditRows("box.wake"))
	asleep := func(what string) {
		t.Helper()
		b, err := f.f.Get(ctx, f.alice, f.box)
		if err != nil || b.State != fleet.Sleeping {
			t.Fatalf("%s: the box is %s (%v), want it asleep", what, b.State, err)
		}
		if n := len(f.auditRows("box.wake")); n != wakes {
			t.Fatalf("%s: %d box.wake audit rows, want %d", what, n, wakes)
		}
	}
	clear := func(what, msg string) {
		t.Helper()
		if !strings.Contains(msg, "asleep") || !strings.Contains(msg, "wake") {
			t.Errorf("%s: the answer does not say the box sleeps: %s", what, msg)
		}
	}

	for _, p := range []string{"/files", "/files?path=.", "/artifact?path=notes.txt", "/diff"} {
		resp, body := f.get("/boxes/" + f.box + p)
		if resp.StatusCode != http.StatusConflict {
			t.Errorf("web %s: %d, want 409", p, resp.StatusCode)
		}
		clear("web "+p, string(body))
		asleep("web " + p)
	}
	// What the gateway holds is still there: the box page and the log.
	for _, p := range []string{"", "/log.txt"} {
		if resp, body := f.get("/boxes/" + f.box + p); resp.StatusCode != http.StatusOK {
			t.Errorf("web %q: %d %s", p, resp.StatusCode, body)
		}
		asleep("web " + p)
	}

	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"read_artifact", map[string]any{"box": f.box, "path": "notes.txt"}},
		{"list_artifacts", map[string]any{"box": f.box}},
		{"diff", map[string]any{"box": f.box}},
	} {
		res := f.tool(c.tool, c.args)
		if !res.IsError {
			t.Errorf("%s on a sleeping box: %s", c.tool, resultText(res))
		}
		clear(c.tool, resultText(res))
		asleep(c.tool)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err := f.mcp.ReadResource(rctx, &sdk.ReadResourceParams{URI: "sbx://" + f.box + "/notes.txt"})
	cancel()
	if err == nil {
		t.Error("resources/read on a sleeping box worked")
	} else {
		clear("resources/read", err.Error())
	}
	asleep("resources/read")
	if res := f.tool("status", map[string]any{"box": f.box}); res.IsError {
		t.Errorf("status: %s", resultText(res))
	}
	asleep("status")

	out, code := f.ssh("diff", f.box)
	if code != 5 { // a conflict: README's exit codes
		t.Errorf("ssh diff: exit %d: %s", code, out)
	}
	clear("ssh diff", out)
	asleep("ssh diff")
	if out, code := f.ssh("status", f.box); code != 0 {
		t.Errorf("ssh status: exit %d: %s", code, out)
	}
	asleep("ssh status")
	for _, legacy := range []bool{false, true} {
		out, code := f.scp(legacy, f.box+"/notes.txt", filepath.Join(t.TempDir(), "n"))
		if code == 0 {
			t.Errorf("scp (legacy %v) from a sleeping box worked: %s", legacy, out)
		}
		if legacy {
			clear("scp -O", out) // legacy scp prints the server's message
		}
		asleep(fmt.Sprintf("scp (legacy %v)", legacy))
	}
	if out, code := f.sftp("ls /" + f.box + "\nget /" + f.box + "/notes.txt " + filepath.Join(t.TempDir(), "n") + "\n"); code == 0 {
		t.Errorf("sftp on a sleeping box worked: %s", out)
	}
	asleep("sftp")
	if _, err := f.sftpClient().ReadDir("/" + f.box); err == nil {
		t.Error("sftp readdir of a sleeping box worked")
	} else {
		clear("sftp readdir", err.Error())
	}
	asleep("sftp readdir")

	// An explicit wake still wakes it, and then the reads work.
	if _, err := f.f.Wake(ctx, f.alice, f.box); err != nil {
		t.Fatal(err)
	}
	if resp, body := f.get("/boxes/" + f.box + "/artifact?path=notes.txt"); resp.StatusCode != http.StatusOK || string(body) != "notes\n" {
		t.Errorf("artifact after wake: %d %q", resp.StatusCode, body)
	}
}

// TestRegressionFilesPathIsFile: GET /boxes/B/files?path=<a file> answered
// 500 ("readdir: not a directory") and logged an error (issue 15, finding
// 7). Whatever a user can name wrong is their mistake: a 4xx with a clear
// message on the web, the same class on the other fronts, and no ERROR
// line in the gateway's log.
func TestRegressionFilesPathIsFile(t *testing.T) {
	f := newFrontsBox(t)
	if out, code := f.sh(f.box, `set -e; cd /workspace; echo a > a.txt; mkdir -p d; mkfifo fifo; ln -s loop2 loop1; ln -s loop1 loop2; ln -s /etc etc`); code != 0 {
		t.Fatalf("setup: %s", out)
	}
	long := strings.Repeat("x", 300)
	mark := len(f.logs.String())
	b := "/boxes/" + f.box
	cases := []struct {
		path string
		code int
		msg  string
	}{
		{b + "/files?path=a.txt", 400, "not a directory"},
		{b + "/files?path=a.txt/x", 400, "not a directory"},
		{b + "/files?path=" + long, 400, "file name too long"},
		{b + "/files?path=nope", 404, "no such file"},
		{b + "/files?path=loop1", 400, ""},
		{b + "/files?path=etc", 400, "escapes /workspace"},
		{b + "/files?path=%00", 400, "NUL"},
		{b + "/artifact?path=d", 400, "is a directory"},
		{b + "/artifact?path=fifo", 400, "not a regular file"},
		{b + "/artifact?path=nope", 404, "no such file"},
		{b + "/artifact?path=a.txt/x", 400, "not a directory"},
		{b + "/artifact?path=" + long, 400, "file name too long"},
		{b + "/artifact?path=etc/passwd", 400, "escapes /workspace"},
		{b + "/artifact", 400, "path"},
		{"/boxes/nobox/files", 404, "not found"},
		{"/boxes/nobox/artifact?path=a.txt", 404, "not found"},
		{"/boxes/nobox/diff", 404, "not found"},
		{"/boxes/nobox", 404, "not found"},
		{"/boxes/nobox/log.txt", 404, "not found"},
	}
	for _, c := range cases {
		resp, body := f.get(c.path)
		if resp.StatusCode != c.code || !strings.Contains(strings.ToLower(string(body)), strings.ToLower(c.msg)) {
			t.Errorf("GET %s: %d, want %d with %q:\n%.400s", c.path, resp.StatusCode, c.code, c.msg, body)
		}
	}
	// The other fronts answer the same mistake as the caller's.
	res := f.tool("list_artifacts", map[string]any{"box": f.box, "path": "a.txt"})
	if text := resultText(res); !res.IsError || !strings.Contains(text, "not a directory") || !strings.Contains(text, "Fix the argument") {
		t.Errorf("list_artifacts of a file: %s", text)
	}
	res = f.tool("read_artifact", map[string]any{"box": f.box, "path": "nope"})
	if text := resultText(res); !res.IsError || !strings.Contains(text, "No such file") {
		t.Errorf("read_artifact of a missing file: %s", text)
	}
	if out, code := f.scp(true, f.box+"/a.txt/x", filepath.Join(t.TempDir(), "x")); code == 0 || !strings.Contains(out, "not a directory") {
		t.Errorf("scp -O below a file: exit %d: %s", code, out)
	}
	// SFTP v3 has no "invalid": the caller's mistake is a permission
	// denial (the client drops the message), where a fault of sbx is a
	// generic failure, as this was.
	if _, err := f.sftpClient().ReadDir("/" + f.box + "/a.txt"); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("sftp readdir of a file: %v, want a permission denial", err)
	}
	if logs := f.logs.String()[mark:]; strings.Contains(logs, "level=ERROR") {
		var lines []string
		for l := range strings.Lines(logs) {
			if strings.Contains(l, "level=ERROR") {
				lines = append(lines, l)
			}
		}
		t.Errorf("wrong input logged errors:\n%s", strings.Join(lines, ""))
	}
}
