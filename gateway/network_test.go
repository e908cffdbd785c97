package gateway

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"sbx.dev/sbx/gateway/config"
	"sbx.dev/sbx/vm"
)

// Regression (go tool -modfile=tools/go.mod task up with the default ./.sbx): the socket of a
// box's network path must be absolute, or vm refuses the box.
func TestEgressSocketAbsoluteWithRelativeDataDirRegression(t *testing.T) {
	t.Chdir(t.TempDir())
	n := newNetwork(context.Background(), ".sbx", config.Model{}, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), Egress{})
	for _, box := range []string{"fix-the-flaky-3f2a1c", "pool-0123abcd", "a"} {
		p := n.socketPath(box)
		if !filepath.IsAbs(p) {
			t.Errorf("socket %q is not absolute", p)
		}
		if err := vm.ValidEgress(p); err != nil {
			t.Errorf("socket %q refused: %v", p, err)
		}
	}
}
