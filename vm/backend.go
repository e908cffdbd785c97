package vm

import (
	"context"
	"net"
)

// Backend runs the machines behind boxes. It keeps no policy: caps, name
// checks and state rules live in the Manager. Every method takes a name the
// Manager has already validated.
type Backend interface {
	// Create provisions a box that is not running yet (disks, its record).
	Create(ctx context.Context, box Box) error
	// Start cold-boots the box's machine and returns once it is launched;
	// the Manager then waits for the agent through Connect.
	Start(ctx context.Context, name string) error
	// Connect opens a new byte stream to the box's agent.
	Connect(ctx context.Context, name string) (net.Conn, error)
	// Wait blocks until the box's machine stops. It returns nil when Sleep,
	// Kill or Destroy stopped it and an error saying why otherwise.
	Wait(ctx context.Context, name string) error
	// Sleep saves the machine's memory where it can, keeps the disk and
	// ends the machine.
	Sleep(ctx context.Context, name string) error
	// Wake resumes a sleeping box from its memory snapshot or, when that is
	// missing or unusable, cold-boots it on the same disk and says why.
	Wake(ctx context.Context, name string) (WakeResult, error)
	// Kill ends the machine at once and keeps the disk.
	Kill(ctx context.Context, name string) error
	// Destroy ends the machine and removes everything the box had.
	Destroy(ctx context.Context, name string) error
	// Stats samples the machine's resource use.
	Stats(ctx context.Context, name string) (Stats, error)
	// Save persists the box's record so a gateway restart finds it.
	Save(ctx context.Context, box Box) error
	// Recover returns every box the backend holds, re-adopting machines
	// that still run. A box whose machine is gone comes back Failed with the
	// reason; stray machines with no box are ended and logged.
	Recover(ctx context.Context) ([]Box, error)
	// Close releases the backend's resources. Machines keep running.
	Close() error
}

// WakeResult says how a box came back.
type WakeResult struct {
	Cold   bool   // booted from scratch instead of restoring memory
	Reason string // why it was cold, empty when restored
}
