// Command guestinit is the /init of test boxes: the guest half of sbx
// (vm/guest) without the gateway, so the vm tests do not depend on every
// other package of the module compiling.
package main

import (
	"os"

	"sbx.dev/sbx/vm/guest"
)

func main() { os.Exit(guest.Main()) }
