package fleet

import (
	"context"
	"io"
	"io/fs"
	"time"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

// Machines is what the core needs of the machines under the boxes: the
// one vm.Manager, whichever backend runs them (on a cluster every gateway
// sees every box).
type Machines interface {
	Create(ctx context.Context, name string, spec vm.Spec) (vm.Box, error)
	Start(ctx context.Context, name string) (vm.Box, error)
	Sleep(ctx context.Context, name string) (vm.Box, error)
	Wake(ctx context.Context, name string) (vm.Box, error)
	Destroy(ctx context.Context, name string) error
	// SetMaxDuration moves a live machine's max duration (its deadline).
	SetMaxDuration(ctx context.Context, name string, d time.Duration) (vm.Box, error)
	Get(name string) (vm.Box, error)
	List() []vm.Box
	Events(ctx context.Context) <-chan vm.Event
	Stats(ctx context.Context, name string) (vm.Stats, error)
	Exec(ctx context.Context, name string, req agent.ExecRequest) (*agent.Process, error)
	Stat(ctx context.Context, name, path string) (agent.FileInfo, error)
	ReadDir(ctx context.Context, name, path string) ([]agent.FileInfo, error)
	ReadFile(ctx context.Context, name, path string) (io.ReadCloser, error)
	WriteFile(ctx context.Context, name, path string, mode fs.FileMode, r io.Reader) error
	MkdirAll(ctx context.Context, name, path string, mode fs.FileMode) error
	Remove(ctx context.Context, name, path string) error
	TarIn(ctx context.Context, name, dir string, r io.Reader) error
	// Dial connects to a TCP port on the box's loopback over its agent
	// connection (forward.go).
	Dial(ctx context.Context, name string, d agent.DialRequest) (*agent.Conn, error)
}

var _ Machines = (*vm.Manager)(nil)
