package agentd

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/vm/agent"
)

// agentPath is the PATH a process run as the agent user starts with: no
// sbin directories (nothing there is the agent's to run).
const agentPath = "PATH=/usr/local/bin:/usr/bin:/bin"

// dropCommandArgv is how the agent starts a process as the agent user: the
// guest binary itself (the running one, through /proc/self/exe in the
// forked child, so it works before and after the switch to an image root)
// as a trampoline that drops every privilege and then execs the target.
// The path and argv follow "--".
var dropCommandArgv = []string{"sbx", "box", "drop", "--"}

// dropFirstFD is where the trampoline finds the target's stdin; stdout and
// stderr follow. Its own fds 0-2 are /dev/null, so whatever the guest binary
// does at start (a linked library probing the terminal, say) cannot reach
// the process's terminal or read its input.
const dropFirstFD = 3

// selfExe is the guest binary as seen by a freshly forked child.
const selfExe = "/proc/self/exe"

// checkUser refuses any user but root ("") and AgentUser.
func checkUser(user string) error {
	switch user {
	case "", agent.AgentUser:
		return nil
	}
	return fmt.Errorf("exec: user %q: only %q (or \"\" for root) may be asked for: %w", user, agent.AgentUser, errInvalid)
}

// userEnv is the base environment of a process run as user: for AgentUser
// the agent's defaults with the user's identity (HOME, USER, LOGNAME) and a
// PATH without sbin in place of root's; the request's Env still follows it.
func userEnv(user string, base []string) []string {
	if user != agent.AgentUser {
		return append([]string{}, base...)
	}
	out := make([]string, 0, len(base)+4)
	for _, kv := range base {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "HOME", "USER", "LOGNAME", "PATH":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "HOME="+agent.AgentHome, "USER="+agent.AgentUser, "LOGNAME="+agent.AgentUser, agentPath)
}

// asUser is the program to start for a process run as user: for AgentUser
// the trampoline, with the target's path and argv after "--"; for root its
// inputs.
func asUser(user, path string, argv []string) (string, []string) {
	if user != agent.AgentUser {
		return path, argv
	}
	return selfExe, append(append(append([]string{}, dropCommandArgv...), path), argv...)
}

// NewDropCommand is the hidden guest subcommand `sbx box drop -- PATH
// ARGV...`: run by the (root) agent for ExecRequest.User "agent" with the
// target's stdin, stdout and stderr on fds 3, 4 and 5, it moves them to 0-2,
// drops to the agent user for good and execs PATH with ARGV. It never
// returns on success.
func NewDropCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "drop -- PATH ARGV...",
		Short:              "Drop to the unprivileged agent user for good, then exec PATH with ARGV (run by the guest agent as root)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && args[0] == "--" {
				args = args[1:]
			}
			if len(args) < 2 {
				return errors.New("usage: sbx box drop -- PATH ARGV")
			}
			for fd := range 3 {
				if err := unix.Dup3(dropFirstFD+fd, fd, 0); err != nil {
					return fmt.Errorf("drop: fd %d (the target's fd %d): %w", dropFirstFD+fd, fd, err)
				}
				unix.CloseOnExec(dropFirstFD + fd)
			}
			if err := DropPrivileges(); err != nil {
				return err
			}
			err := syscall.Exec(args[0], args[1:], os.Environ())
			return fmt.Errorf("exec %s: %w", args[0], err)
		},
	}
}

// DropPrivileges turns the calling process (root, single purpose: about to
// exec) into the agent user with no way back, on every thread: supplementary
// groups only the agent's, the bounding set empty, no ambient or
// inheritable capabilities, no_new_privs (setuid bits and file capabilities
// are ignored by execve from here on), gid and uid the agent's (real,
// effective, saved), then a check that uid 0 cannot be regained. It needs
// CGO_ENABLED=0 (syscall.AllThreadsSyscall).
func DropPrivileges() error {
	if err := syscall.Setgroups([]int{agent.AgentGID}); err != nil {
		return fmt.Errorf("drop: setgroups: %w", err)
	}
	for c := 0; c <= lastCap(); c++ {
		if err := allThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil {
			return fmt.Errorf("drop: bounding capability %d: %w", c, err)
		}
	}
	if err := allThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return fmt.Errorf("drop: ambient capabilities: %w", err)
	}
	if err := allThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("drop: no_new_privs: %w", err)
	}
	if err := syscall.Setresgid(agent.AgentGID, agent.AgentGID, agent.AgentGID); err != nil {
		return fmt.Errorf("drop: setresgid: %w", err)
	}
	// Leaving uid 0 clears the permitted, effective and ambient sets (no
	// SECBIT_KEEP_CAPS); the inheritable set is cleared below.
	if err := syscall.Setresuid(agent.AgentUID, agent.AgentUID, agent.AgentUID); err != nil {
		return fmt.Errorf("drop: setresuid: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // all zero
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return fmt.Errorf("drop: capset: %w", allThreadsErr(errno))
	}
	return verifyDropped()
}

// verifyDropped checks what DropPrivileges promised, on this thread (the
// one that will exec): not root by any id, no way back to uid 0 or gid 0,
// no capability in any set.
func verifyDropped() error {
	ruid, euid, suid := getresuid()
	rgid, egid, sgid := getresgid()
	if ruid != agent.AgentUID || euid != agent.AgentUID || suid != agent.AgentUID || rgid != agent.AgentGID || egid != agent.AgentGID || sgid != agent.AgentGID {
		return fmt.Errorf("drop: still uid %d/%d/%d gid %d/%d/%d", ruid, euid, suid, rgid, egid, sgid)
	}
	if err := unix.Setresuid(0, 0, 0); err == nil {
		return errors.New("drop: uid 0 could be regained")
	}
	if err := unix.Setresgid(0, 0, 0); err == nil {
		return errors.New("drop: gid 0 could be regained")
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop: capget: %w", err)
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return fmt.Errorf("drop: capabilities left: %+v", data)
		}
	}
	if v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || v != 1 {
		return fmt.Errorf("drop: no_new_privs is %d (%v)", v, err)
	}
	if v, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, 0, 0, 0, 0); err == nil && v != 0 {
		return errors.New("drop: the bounding set still holds CAP_CHOWN")
	}
	return nil
}

func getresuid() (r, e, s int) {
	var ru, eu, su uint32
	_, _, _ = unix.RawSyscall(unix.SYS_GETRESUID, uintptr(unsafe.Pointer(&ru)), uintptr(unsafe.Pointer(&eu)), uintptr(unsafe.Pointer(&su)))
	return int(ru), int(eu), int(su)
}

func getresgid() (r, e, s int) {
	var rg, eg, sg uint32
	_, _, _ = unix.RawSyscall(unix.SYS_GETRESGID, uintptr(unsafe.Pointer(&rg)), uintptr(unsafe.Pointer(&eg)), uintptr(unsafe.Pointer(&sg)))
	return int(rg), int(eg), int(sg)
}

// lastCap is the kernel's highest capability number.
func lastCap() int {
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 64 {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}

// allThreadsPrctl runs prctl on every thread of the process: the bounding
// set, the ambient set and no_new_privs are per thread.
func allThreadsPrctl(option, arg2, arg3 uintptr) error {
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, option, arg2, arg3); errno != 0 {
		return allThreadsErr(errno)
	}
	return nil
}

func allThreadsErr(errno syscall.Errno) error {
	if errno == syscall.ENOTSUP {
		return fmt.Errorf("%w: the sbx binary must be built with CGO_ENABLED=0 to change every thread's credentials", errno)
	}
	return errno
}

// AsAgent is how a root process in the box starts PATH with ARGV as the
// agent user through the same trampoline the agent uses: the program to
// start and its argv. The caller puts the target's stdin, stdout and stderr
// on the child's fds 3, 4 and 5 (exec.Cmd.ExtraFiles) and its own 0-2 on
// /dev/null. PATH must be absolute.
func AsAgent(path string, argv []string) (string, []string) {
	return asUser(agent.AgentUser, path, argv)
}

// AgentEnv is base with the agent user's identity (HOME, USER, LOGNAME) and
// PATH in place of root's.
func AgentEnv(base []string) []string {
	return userEnv(agent.AgentUser, base)
}
