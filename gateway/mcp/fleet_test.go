package mcp

import (
	"os"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveGuestBinary()
	os.Exit(code)
}

// fleetFront is the MCP front over the real core (fleettest): SQLite, QEMU
// boxes from the agent image, a git server over smart HTTP holding
// acme/widget, and alice's GitHub account for it.
type fleetFront struct {
	*front
	fleet  *fleet.Fleet
	secret string // the git token: known to the redactor
	logs   *testutil.SyncBuffer
}

func newFleetFront(t testing.TB, o Options) *fleetFront {
	t.Helper()
	clk := testutil.NewClock(time.Now())
	h := fleettest.New(t, fleettest.Options{Now: clk.Now, Policy: fleet.Policy{
		MaxDuration: time.Hour, MaxLifetime: 3 * time.Hour, MaxBoxMemoryMiB: 1024, MaxBoxVCPUs: 2}})
	admin := keys.Actor{User: "root", Role: keys.RoleAdmin, Front: keys.FrontCLI}
	o.Fleet, o.Identity, o.Audit, o.Now = h.Fleet, h.Keys, h.Audit, clk.Now
	if o.Logger == nil {
		o.Logger = h.Logger
	}
	if o.Throttle == nil {
		o.Throttle = throttle.NewAuth(20, 10*time.Minute, clk.Now)
	}
	f := &front{keys: h.Keys, audit: h.Audit, clock: clk, admin: admin}
	f.url = serve(t, New(o))
	return &fleetFront{front: f, fleet: h.Fleet, secret: h.Token, logs: h.Logs}
}
