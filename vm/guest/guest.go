// Package guest is the sbx binary's life as PID 1 inside a box.
package guest

import "os"

// IsInit reports whether this process was started by the kernel as a box's init.
func IsInit() bool { return os.Getpid() == 1 }

// Main runs the guest init and returns the exit code. (Placeholder until the vm issue lands.)
func Main() int { return 1 }
