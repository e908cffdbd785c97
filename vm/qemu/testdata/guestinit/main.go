// Command guestinit is the /init of test boxes: the guest half of sbx
// (vm/guest/pid1) without the gateway, so the vm tests do not depend on every
// other package of the module compiling. Like sbx it doubles as the egress
// forwarder QEMU runs (`vm-fwd SOCKET`, see vm/fwd).
package main

import (
	"context"
	"os"

	"sbx.dev/sbx/vm/fwd"
	"sbx.dev/sbx/vm/guest/pid1"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == fwd.Command {
		if err := fwd.Main(context.Background(), os.Args[2]); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(pid1.Main())
}
