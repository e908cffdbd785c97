package keys_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/keys"
)

// sshKeygen makes a real key pair with OpenSSH's ssh-keygen.
func sshKeygen(t *testing.T, path, typ string, extra ...string) string {
	t.Helper()
	args := append([]string{"-q", "-t", typ, "-N", "", "-C", "test@" + typ, "-f", path}, extra...)
	if out, err := exec.Command("ssh-keygen", args...).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen %v: %v\n%s", args, err, out)
	}
	b, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBootstrapFromEnvText(t *testing.T) {
	e := newEnv(t)
	text := mustLine(t) + "\n# second\n" + mustLine(t)
	home := t.TempDir()
	sshKeygen(t, filepath.Join(mkdir(t, home, ".ssh"), "id_ed25519"), "ed25519")
	r, err := e.svc.Bootstrap(ctx, text, home)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Created || r.Source != keys.SourceEnv || len(r.Keys) != 2 || r.User.Name != "admin" || r.User.Role != keys.RoleAdmin {
		t.Fatalf("result %+v", r)
	}
	if msg := r.Message(); !strings.Contains(msg, "SBX_ADMIN_KEYS") || !strings.Contains(msg, r.Keys[0].Fingerprint) {
		t.Errorf("message %q", msg)
	}
	// Second start: an admin exists, nothing happens.
	r, err = e.svc.Bootstrap(ctx, mustLine(t), home)
	if err != nil || !r.Skipped || r.Created {
		t.Fatalf("second bootstrap: %+v %v", r, err)
	}
	if ks, _ := e.svc.Keys(ctx, cli, "admin"); len(ks) != 2 {
		t.Errorf("admin has %d keys after the second start, want 2", len(ks))
	}
}

func TestBootstrapFromHomeDir(t *testing.T) {
	e := newEnv(t)
	home := t.TempDir()
	dir := mkdir(t, home, ".ssh")
	ed := sshKeygen(t, filepath.Join(dir, "id_ed25519"), "ed25519")
	ec := sshKeygen(t, filepath.Join(dir, "id_ecdsa"), "ecdsa", "-b", "384")
	sshKeygen(t, filepath.Join(dir, "id_rsa_small"), "rsa", "-b", "1024")
	// A certificate next to its key is skipped, not fatal.
	if out, err := exec.Command("ssh-keygen", "-q", "-s", filepath.Join(dir, "id_ecdsa"), "-I", "test", "-n", "alice",
		filepath.Join(dir, "id_ed25519.pub")).CombinedOutput(); err != nil {
		t.Fatalf("sign cert: %v\n%s", err, out)
	}
	r, err := e.svc.Bootstrap(ctx, "  \n", home)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Created || len(r.Keys) != 2 {
		t.Fatalf("result %+v", r)
	}
	if !strings.Contains(r.Source, "id_ed25519.pub") || !strings.Contains(r.Source, "id_ecdsa.pub") || strings.Contains(r.Source, "rsa") {
		t.Errorf("source %q", r.Source)
	}
	ignored := strings.Join(r.Ignored, "\n")
	if !strings.Contains(ignored, "id_ed25519-cert.pub: certificate") || !strings.Contains(ignored, "rsa key has 1024 bits") {
		t.Errorf("ignored %q", ignored)
	}
	for _, line := range []string{ed, ec} {
		pk, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(line))
		if u, err := e.svc.UserByPublicKey(ctx, pk); err != nil || u.Name != "admin" {
			t.Errorf("key %s: %+v %v", strings.Fields(line)[0], u, err)
		}
	}
}

func TestBootstrapWithoutKeysStarts(t *testing.T) {
	e := newEnv(t)
	for _, home := range []string{t.TempDir(), "", "/nonexistent/home"} {
		r, err := e.svc.Bootstrap(ctx, "", home)
		if err != nil || r.Created || r.Skipped {
			t.Fatalf("home %q: %+v %v", home, r, err)
		}
		if msg := r.Message(); !strings.Contains(msg, `SBX_ADMIN_KEYS="$(cat ~/.ssh/id_ed25519.pub)" sbx serve`) {
			t.Errorf("message %q does not say how to add a key", msg)
		}
	}
	if users, _ := e.svc.Users(ctx); len(users) != 0 {
		t.Errorf("users created: %+v", users)
	}
}

func TestBootstrapFailsOnMalformedKey(t *testing.T) {
	e := newEnv(t)
	if _, err := e.svc.Bootstrap(ctx, mustLine(t)+"\nssh-ed25519 garbage", ""); !errors.Is(err, keys.ErrInvalid) ||
		!strings.Contains(err.Error(), "SBX_ADMIN_KEYS: line 2") {
		t.Errorf("env: %v", err)
	}
	home := t.TempDir()
	dir := mkdir(t, home, ".ssh")
	sshKeygen(t, filepath.Join(dir, "id_ed25519"), "ed25519")
	os.WriteFile(filepath.Join(dir, "broken.pub"), []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI\n"), 0o644)
	if _, err := e.svc.Bootstrap(ctx, "", home); err == nil || !strings.Contains(err.Error(), "broken.pub line 1") {
		t.Errorf("home: %v", err)
	}
	if users, _ := e.svc.Users(ctx); len(users) != 0 {
		t.Errorf("users created: %+v", users)
	}
}

func TestBootstrapWhenAdminNameIsTaken(t *testing.T) {
	e := newEnv(t)
	mustAdd(t, e, "admin", keys.RoleOperator, 1)
	r, err := e.svc.Bootstrap(ctx, mustLine(t), "")
	if err != nil || !r.Created || r.User.Name != "admin1" {
		t.Fatalf("%+v %v", r, err)
	}
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	p := filepath.Join(parts...)
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}
