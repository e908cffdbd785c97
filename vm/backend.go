package vm

import (
	"context"
	"net"
	"time"
)

// Backend runs the machines behind boxes and is the authority on their
// records. It keeps no policy: caps, name checks and state rules live in
// the Manager. Every method takes a name the Manager has already validated.
type Backend interface {
	Driver
	// Records starts the authority on the backend's box records (QEMU:
	// this host's record files, through LocalRecords; Kubernetes: the
	// claims every gateway of the cluster shares). It tells f of what the
	// Manager must act on and asks once before acting on what every
	// gateway sharing the records sees. once is never nil: vm.New turns a
	// nil Config.Once into one that always acts.
	Records(ctx context.Context, f Follower, once Once) (Records, error)
}

// Driver boots, connects to, stops and snapshots machines.
type Driver interface {
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
	// Close releases the backend's resources. Machines keep running.
	Close() error
}

// WakeResult says how a box came back.
type WakeResult struct {
	Cold   bool   // booted from scratch instead of restoring memory
	Reason string // why it was cold, empty when restored
}

// Once says whether this gateway acts on key, something every gateway
// sharing the records sees (a max duration reached, a machine that ended
// on its own): a cluster's lease, held for ttl.
type Once func(ctx context.Context, key string, ttl time.Duration) bool

// Records is a Manager's state authority: where the box records live, as
// this gateway knows them. The Manager reads and writes records only
// through it, and publishes nothing itself: the authority emits every state
// change (Follower.Emit), the ones made here and, when the records are
// shared, the ones made by other gateways.
type Records interface {
	// Get returns a box's record as this gateway last knew it.
	Get(name string) (Box, bool)
	// List returns every box's record, in no order.
	List() []Box
	// Fresh reads the record an operation acts on, under the box's lock
	// (ErrNotFound when there is none).
	Fresh(ctx context.Context, name string) (Box, error)
	// Created remembers a box Driver.Create has just provisioned.
	Created(box Box)
	// Save records a state change made here (box is the new record, from
	// its old state); Destroyed forgets the box.
	Save(ctx context.Context, from State, box Box) error
	// Launched says this gateway has just launched box name's machine.
	Launched(name string)
	// Once says whether this gateway acts on key, something every gateway
	// sharing the records sees (always, when no other gateway does).
	Once(ctx context.Context, key string, ttl time.Duration) bool
}

// Follower is what a Records tells its Manager.
type Follower interface {
	// Emit publishes a state change to the Manager's subscribers.
	Emit(ev Event)
	// Arm sets the max-duration timer of a record that holds a machine.
	Arm(box Box)
	// Watch follows box name's current machine (called machine, for the
	// Once key) and fails the box if it ends on its own; stale says the
	// machine is not the box's current one any more.
	Watch(name, machine string, stale func() bool)
	// Forget drops what the Manager holds for a box destroyed elsewhere.
	Forget(name string)
}
