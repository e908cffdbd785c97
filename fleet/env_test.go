package fleet_test

import (
	"context"
	"os"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/store"
	"sbx.dev/sbx/vm"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveGuestBinary()
	os.Exit(code)
}

// env is one gateway's core over real parts (fleettest): SQLite, the QEMU
// backend booting the Debian agent image, a git server over smart HTTP,
// on a clock the test moves.
type env struct {
	*fleettest.Env
	t     testing.TB
	data  string
	store *store.SQLite
	vm    *vm.Manager
	fleet *fleet.Fleet
	token string
	clock *testutil.Clock
	logs  *testutil.SyncBuffer
	cfg   *fleet.Config
	alice keys.Actor
	bob   keys.Actor
	admin keys.Actor
}

func newEnv(t testing.TB, policy fleet.Policy) *env {
	t.Helper()
	clock := testutil.NewClock(time.Now())
	h := fleettest.New(t, fleettest.Options{Policy: policy, MaxBoxes: 6, Now: clock.Now})
	return &env{Env: h, t: t, data: h.Data, store: h.Store, vm: h.VM, fleet: h.Fleet, token: h.Token, clock: clock,
		logs: h.Logs, cfg: &h.Config, alice: h.Actors["alice"], bob: h.Actors["bob"], admin: h.Actors["root"]}
}

// start (re)starts the core over the same store and machines.
func (e *env) start() {
	e.Start()
	e.fleet = e.Fleet
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

// waitState waits until alice sees the box in one of states.
func (e *env) waitState(name string, states ...fleet.State) fleet.Box {
	e.t.Helper()
	return e.WaitState(e.alice, name, states...)
}

// log reads a box's whole log as alice sees it.
func (e *env) log(name string) string { return e.Log(e.alice, name) }

// waitLog waits until the box's log contains want.
func (e *env) waitLog(name, want string) string {
	e.t.Helper()
	return e.WaitLog(e.alice, name, want)
}
