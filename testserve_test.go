package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"charm.land/ssh"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sbx.dev/sbx/gateway"
)

// sbxForScripts is the sbx the scripts run: the shipped command tree whose
// serve has what only tests need, none of it in the shipped binary: a clock
// shifted by the duration in a file (--test-clock-file), the SSH commands
// test-panic and test-sleep, and an HTTP route that panics.
func sbxForScripts() {
	root := newRoot()
	for _, c := range root.Commands() {
		if c.Name() == "serve" {
			root.RemoveCommand(c)
			root.AddCommand(testServeCommand())
		}
	}
	execute(root)
}

func testServeCommand() *cobra.Command {
	var clockFile string
	// The fault suite runs this binary as sbx, so the guest binary is not
	// next to it: the environment names it (only this test binary reads it).
	cmd := gateway.NewServeCommand(gateway.Options{
		GuestBinary: os.Getenv("SBXTEST_GUEST_BINARY"),
		Now:         func() time.Time { return offsetClock(clockFile)() },
		SSHCommands: testSSHCommands,
		HTTPRoutes: map[string]http.Handler{"GET /api/v1/test/panic": http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			panic("test hook: deliberate panic")
		})},
	})
	cmd.Flags().StringVar(&clockFile, "test-clock-file", "", "shift the clock by the duration written in this file")
	return cmd
}

// testSSHCommands: test-panic panics in a session (the server recovers);
// test-sleep holds a session open (session caps, drain on SIGTERM).
func testSSHCommands(ssh.Session) []*cobra.Command {
	return []*cobra.Command{{Use: "test-panic", Hidden: true, RunE: func(*cobra.Command, []string) error {
		panic("test hook: deliberate panic")
	}}, {Use: "test-sleep DURATION", Hidden: true, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := time.ParseDuration(args[0])
			if err != nil {
				return err
			}
			select {
			case <-time.After(d):
				fmt.Fprintln(cmd.OutOrStdout(), "slept", d)
			case <-cmd.Context().Done():
			}
			return nil
		}}}
}

// offsetClock is time.Now shifted by the duration in path (re-read on every
// call, so a test can move time forward while the server runs).
func offsetClock(path string) func() time.Time {
	return func() time.Time {
		data, err := os.ReadFile(path)
		if err != nil {
			return time.Now()
		}
		d, err := time.ParseDuration(strings.TrimSpace(string(data)))
		if err != nil {
			return time.Now()
		}
		return time.Now().Add(d)
	}
}

func TestOffsetClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	now := offsetClock(path)
	if d := time.Until(now()); d > time.Second || d < -time.Second {
		t.Fatalf("no file: offset %v", d)
	}
	if err := os.WriteFile(path, []byte("11m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if d := time.Until(now()); d < 10*time.Minute || d > 12*time.Minute {
		t.Fatalf("11m file: offset %v", d)
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if d := time.Until(now()); d > time.Second {
		t.Fatalf("garbage file: offset %v", d)
	}
}

// TestShippedCommandsHaveNoTestHooks: the shipped binary's command line has
// no command or flag for tests, hidden or not (the gateway's own SSH and
// HTTP trees are checked by gateway's TestShippedFrontsHaveNoTestHooks).
func TestShippedCommandsHaveNoTestHooks(t *testing.T) {
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if strings.HasPrefix(cmd.Name(), "test") {
			t.Errorf("command %q is a test hook", cmd.CommandPath())
		}
		for _, fs := range []*pflag.FlagSet{cmd.LocalFlags(), cmd.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if strings.HasPrefix(f.Name, "test") {
					t.Errorf("%s --%s is a test hook", cmd.CommandPath(), f.Name)
				}
			})
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	root := newRoot()
	if _, _, err := root.Find([]string{"serve"}); err != nil {
		t.Fatalf("no serve command: %v", err)
	}
	walk(root)
}
