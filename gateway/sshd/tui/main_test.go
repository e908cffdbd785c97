package tui

import (
	"os"
	"testing"

	"sbx.dev/sbx/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveGuestBinary()
	os.Exit(code)
}
