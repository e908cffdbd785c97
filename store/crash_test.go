package store

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

const crashChildEnv = "SBX_STORE_CRASH_CHILD"

// crashChild adds users with keys and API keys in a loop through the real
// keys.Service until it is killed, printing each name once committed.
func crashChild(path string) {
	s, err := Open(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	svc := keys.NewService(s, audit.New(s, slog.New(slog.NewTextHandler(io.Discard, nil)), nil), nil)
	cli := keys.Actor{User: "crash", Role: keys.RoleAdmin, Front: keys.FrontCLI}
	line := func() string {
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		pk, _ := ssh.NewPublicKey(pub)
		return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk)))
	}
	fmt.Println("ready")
	for i := 0; ; i++ {
		name := fmt.Sprintf("u%d-%d", os.Getpid(), i)
		if _, _, err := svc.AddUser(ctx, cli, name, keys.RoleOperator, line()+"\n"+line()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		if _, err := svc.AddKeys(ctx, cli, name, line()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		if _, _, err := svc.CreateAPIKey(ctx, cli, name, "k", nil, time.Hour); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		if i%5 == 4 {
			if err := svc.RemoveUser(ctx, cli, fmt.Sprintf("u%d-%d", os.Getpid(), i-1)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
		}
		fmt.Println("ok", name)
	}
}

// TestCrashDuringUserAdd kills a writer with SIGKILL at random points; every
// reopen must find an intact database, every acknowledged user with all its
// keys, and no user, key or API key half-written.
func TestCrashDuringUserAdd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sbx.db")
	acked := map[string]bool{}
	const rounds = 6
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: child did not start: %q", round, sc.Text())
		}
		lines := make(chan string, 1<<16)
		go func() {
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		time.Sleep(time.Duration(30+mrand.IntN(300)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: child ended by itself (%v), not by the kill", round, err)
		}
		n := 0
		for l := range lines {
			if name, ok := strings.CutPrefix(l, "ok "); ok {
				acked[name] = true
				n++
			}
		}
		t.Logf("round %d: %d users acknowledged before the kill", round, n)
		checkConsistent(t, path, acked)
	}
	if len(acked) == 0 {
		t.Fatal("no user was ever added; the test proved nothing")
	}
}

func checkConsistent(t *testing.T, path string, acked map[string]bool) {
	t.Helper()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer s.Close()
	if res, err := s.IntegrityCheck(ctx); err != nil || res != "ok" {
		t.Fatalf("integrity_check: %q %v", res, err)
	}
	var bad int
	queries := map[string]string{
		"foreign key violations":         "SELECT COUNT(*) FROM pragma_foreign_key_check",
		"users with fewer than two keys": "SELECT COUNT(*) FROM users u WHERE (SELECT COUNT(*) FROM ssh_keys k WHERE k.user_id = u.id) < 2",
		"keys without a user":            "SELECT COUNT(*) FROM ssh_keys k WHERE NOT EXISTS (SELECT 1 FROM users u WHERE u.id = k.user_id)",
		"api keys without a user":        "SELECT COUNT(*) FROM api_keys a WHERE NOT EXISTS (SELECT 1 FROM users u WHERE u.id = a.user_id)",
		"user.add rows without the user": "SELECT COUNT(*) FROM audit a WHERE action = 'user.add' AND result = 'ok' AND NOT EXISTS (SELECT 1 FROM users u WHERE u.name = a.target) AND NOT EXISTS (SELECT 1 FROM audit r WHERE r.action = 'user.rm' AND r.target = a.target)",
	}
	for what, q := range queries {
		if err := s.reader.QueryRowContext(ctx, q).Scan(&bad); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if bad != 0 {
			t.Errorf("%d %s", bad, what)
		}
	}
	// Every user the child acknowledged is there with 3 keys and its API key,
	// unless the child removed it on purpose.
	users, err := s.ListUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, u := range users {
		present[u.Name] = true
	}
	for name := range acked {
		if !present[name] {
			// Removed by the child's i%5==4 step: its audit row says so.
			var n int
			s.reader.QueryRowContext(ctx, "SELECT COUNT(*) FROM audit WHERE action = 'user.rm' AND target = ? AND result = 'ok'", name).Scan(&n)
			if n == 0 {
				t.Errorf("acknowledged user %s lost", name)
			}
			continue
		}
		ks, err := s.ListKeys(ctx, name)
		if err != nil || len(ks) != 3 {
			t.Errorf("acknowledged user %s has %d keys (%v), want 3", name, len(ks), err)
		}
		aks, err := s.ListAPIKeys(ctx, name)
		if err != nil || len(aks) != 1 {
			t.Errorf("acknowledged user %s has %d api keys (%v), want 1", name, len(aks), err)
		}
	}
}
