package views

import (
	"fmt"

	"sbx.dev/sbx/fleet"
)

// BoxSize is a box's machine size for people: "1024 MiB, 2 vCPUs".
func BoxSize(b fleet.Box) string {
	unit := "vCPUs"
	if b.VCPUs == 1 {
		unit = "vCPU"
	}
	return fmt.Sprintf("%d MiB, %d %s", b.MemoryMiB, b.VCPUs, unit)
}

// canExtend: a started, live box has a deadline to push out.
func canExtend(b fleet.Box) bool {
	switch b.State {
	case fleet.Creating, fleet.Failed, fleet.Destroyed:
		return false
	}
	return true
}
