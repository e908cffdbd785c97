package fleet

import (
	"context"
	"errors"
)

// endFailedStart ends the machine of a box whose start failed (a setup or
// install step, the agent): a failed box holds no machine (its size counts
// for nothing, sizes.go), as a fork that fails ends its own; its log stays
// for rm.
func (f *Fleet) endFailedStart(ctx context.Context, rec record) {
	if rec.VM == "" {
		return
	}
	if err := f.vm.Destroy(ctx, rec.VM); err != nil && !errors.Is(vmErr(err), ErrNotFound) {
		f.log.Warn("end the machine of a box that failed to start", "box", rec.Name, "vm", rec.VM, "err", err)
	}
	if f.net != nil {
		f.net.Detach(rec.VM)
	}
}
