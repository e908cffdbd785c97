package pid1

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestProvisionAgentUser writes the agent user into fresh roots, once and
// again (a reboot of the same overlay), and refuses databases where the
// name or the uid is someone else's.
func TestProvisionAgentUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	const (
		passwd = "root:x:0:0:root:/root:/bin/sh\n"
		group  = "root:x:0:\n"
		shadow = "root:*:19000:0:99999:7:::\n"
	)
	for _, tc := range []struct {
		name                   string
		passwd, group, shadow  string
		wantErr                string
		wantPasswd, wantShadow string
	}{
		{name: "fresh", passwd: passwd, group: group, shadow: shadow,
			wantPasswd: passwd + "agent:x:1000:1000:sbx agent:/home/agent:/bin/sh\n", wantShadow: shadow + "agent:!:::::::\n"},
		{name: "no shadow (the test initramfs)", passwd: passwd, group: group,
			wantPasswd: passwd + "agent:x:1000:1000:sbx agent:/home/agent:/bin/sh\n"},
		{name: "no final newline", passwd: strings.TrimSuffix(passwd, "\n"), group: group,
			wantPasswd: passwd + "agent:x:1000:1000:sbx agent:/home/agent:/bin/sh\n"},
		{name: "already there", passwd: passwd + "agent:x:1000:1000:x:/home/agent:/bin/bash\n", group: group + "agent:x:1000:\n",
			wantPasswd: passwd + "agent:x:1000:1000:x:/home/agent:/bin/bash\n"},
		{name: "name with another uid", passwd: passwd + "agent:x:0:0::/:/bin/sh\n", group: group, wantErr: `"agent" has id "0"`},
		{name: "uid of another name", passwd: passwd + "debian:x:1000:1000::/home/debian:/bin/sh\n", group: group, wantErr: `id 1000 belongs to "debian"`},
		{name: "gid of another group", passwd: passwd, group: group + "users2:x:1000:\n", wantErr: `id 1000 belongs to "users2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			ws := filepath.Join(root, "workspace")
			must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
			must(t, os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(tc.passwd), 0o644))
			must(t, os.WriteFile(filepath.Join(root, "etc/group"), []byte(tc.group), 0o644))
			if tc.shadow != "" {
				must(t, os.WriteFile(filepath.Join(root, "etc/shadow"), []byte(tc.shadow), 0o640))
				must(t, os.Chown(filepath.Join(root, "etc/shadow"), 0, 42))
			}
			err := ProvisionAgentUser(root, ws)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			must(t, err)
			must(t, ProvisionAgentUser(root, ws)) // a reboot: nothing changes
			if got := read(t, filepath.Join(root, "etc/passwd")); got != tc.wantPasswd {
				t.Errorf("passwd %q, want %q", got, tc.wantPasswd)
			}
			if tc.shadow != "" {
				p := filepath.Join(root, "etc/shadow")
				if got := read(t, p); got != tc.wantShadow {
					t.Errorf("shadow %q, want %q", got, tc.wantShadow)
				}
				fi, _ := os.Stat(p)
				if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o640 || st.Uid != 0 || st.Gid != 42 {
					t.Errorf("shadow %v %d:%d, want -rw-r----- 0:42", fi.Mode(), st.Uid, st.Gid)
				}
			}
			for _, want := range []struct {
				path     string
				mode     os.FileMode
				uid, gid uint32
			}{
				{filepath.Join(root, "home/agent"), os.ModeDir | 0o700, 1000, 1000},
				{ws, os.ModeDir | os.ModeSticky | 0o777, 0, 0},
				{filepath.Join(ws, ".agent.hooks.log"), 0o644, 0, 0},
			} {
				fi, err := os.Lstat(want.path)
				must(t, err)
				if st := fi.Sys().(*syscall.Stat_t); fi.Mode() != want.mode || st.Uid != want.uid || st.Gid != want.gid {
					t.Errorf("%s: %v %d:%d, want %v %d:%d", want.path, fi.Mode(), st.Uid, st.Gid, want.mode, want.uid, want.gid)
				}
			}
		})
	}
	t.Run("home is a symlink", func(t *testing.T) {
		root := t.TempDir()
		must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
		must(t, os.MkdirAll(filepath.Join(root, "home"), 0o755))
		must(t, os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(passwd), 0o644))
		must(t, os.WriteFile(filepath.Join(root, "etc/group"), []byte(group), 0o644))
		must(t, os.Symlink("/etc", filepath.Join(root, "home/agent")))
		if err := ProvisionAgentUser(root, filepath.Join(root, "workspace")); err == nil {
			t.Fatal("a symlinked home was taken")
		}
	})
	// A workspace from a box of before: the agent owned the top and may
	// have made the control files its own, or links.
	t.Run("the agent's control files", func(t *testing.T) {
		root := t.TempDir()
		must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
		must(t, os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(passwd), 0o644))
		must(t, os.WriteFile(filepath.Join(root, "etc/group"), []byte(group), 0o644))
		ws := filepath.Join(root, "workspace")
		must(t, os.MkdirAll(filepath.Join(ws, "repo"), 0o755))
		must(t, os.Chown(ws, 1000, 1000))
		must(t, os.WriteFile(filepath.Join(ws, ".agent.task"), []byte("forged\n"), 0o644))
		must(t, os.Chown(filepath.Join(ws, ".agent.task"), 1000, 1000))
		must(t, os.WriteFile(filepath.Join(root, "etc/target"), []byte("root's\n"), 0o600))
		must(t, os.Symlink(filepath.Join(root, "etc/target"), filepath.Join(ws, ".agent.hooks.log")))
		must(t, os.WriteFile(filepath.Join(ws, "repo/x"), []byte("x"), 0o644))
		must(t, ProvisionAgentUser(root, ws))
		if _, err := os.Lstat(filepath.Join(ws, ".agent.task")); !os.IsNotExist(err) {
			t.Errorf("the agent's .agent.task survived: %v", err)
		}
		fi, err := os.Lstat(filepath.Join(ws, ".agent.hooks.log"))
		must(t, err)
		if st := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || st.Uid != 0 {
			t.Errorf("the log is %v owned by %d, want root's regular file", fi.Mode(), st.Uid)
		}
		if got := read(t, filepath.Join(root, "etc/target")); got != "root's\n" {
			t.Errorf("the link's target changed: %q", got)
		}
		if got := read(t, filepath.Join(ws, "repo/x")); got != "x" {
			t.Errorf("the agent's work changed: %q", got)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return string(b)
}
