package fleettest

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

var _ fleet.Machines = NoMachines{}

// NoMachines is a host without machines (fleet.Machines): every call says
// so. Tests of what needs no box (notifications, settings) run on it on
// hosts without QEMU.
type NoMachines struct{}

// ErrNoMachines is what NoMachines answers.
var ErrNoMachines = errors.New("no machines on this host")

func (NoMachines) Create(context.Context, string, vm.Spec) (vm.Box, error) {
	return vm.Box{}, ErrNoMachines
}
func (NoMachines) Start(context.Context, string) (vm.Box, error) { return vm.Box{}, ErrNoMachines }
func (NoMachines) Sleep(context.Context, string) (vm.Box, error) { return vm.Box{}, ErrNoMachines }
func (NoMachines) Wake(context.Context, string) (vm.Box, error)  { return vm.Box{}, ErrNoMachines }
func (NoMachines) Destroy(context.Context, string) error         { return ErrNoMachines }
func (NoMachines) Get(string) (vm.Box, error)                    { return vm.Box{}, ErrNoMachines }
func (NoMachines) SetMaxDuration(context.Context, string, time.Duration) (vm.Box, error) {
	return vm.Box{}, ErrNoMachines
}
func (NoMachines) List() []vm.Box { return nil }
func (NoMachines) Events(ctx context.Context) <-chan vm.Event {
	ch := make(chan vm.Event)
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}
func (NoMachines) Stats(context.Context, string) (vm.Stats, error) { return vm.Stats{}, ErrNoMachines }
func (NoMachines) Exec(context.Context, string, agent.ExecRequest) (*agent.Process, error) {
	return nil, ErrNoMachines
}
func (NoMachines) Stat(context.Context, string, string) (agent.FileInfo, error) {
	return agent.FileInfo{}, ErrNoMachines
}
func (NoMachines) ReadDir(context.Context, string, string) ([]agent.FileInfo, error) {
	return nil, ErrNoMachines
}
func (NoMachines) ReadFile(context.Context, string, string) (io.ReadCloser, error) {
	return nil, ErrNoMachines
}
func (NoMachines) WriteFile(context.Context, string, string, fs.FileMode, io.Reader) error {
	return ErrNoMachines
}
func (NoMachines) MkdirAll(context.Context, string, string, fs.FileMode) error { return ErrNoMachines }
func (NoMachines) Remove(context.Context, string, string) error                { return ErrNoMachines }
func (NoMachines) TarIn(context.Context, string, string, io.Reader) error      { return ErrNoMachines }
func (NoMachines) Dial(context.Context, string, agent.DialRequest) (*agent.Conn, error) {
	return nil, ErrNoMachines
}
