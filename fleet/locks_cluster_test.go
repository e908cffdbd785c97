package fleet_test

import (
	"context"
	"testing"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/pgtest"
	"sbx.dev/sbx/store/postgres"
)

// TestEndTurnTakesTheClusterLease: the end of a turn took only this
// gateway's lock of the box, so an action through another gateway (a
// follow-up, a sleep) could read and write the box's record between its
// read and its write. endTurn now goes through the locks' tryLock, which
// takes the lease across gateways too and waits for neither.
func TestEndTurnTakesTheClusterLease(t *testing.T) {
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.FreshDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, b := fleet.NewGatewayLocks(db, "a"), fleet.NewGatewayLocks(db, "b")

	unlockB, err := b.Lock(ctx, "box1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := a.TryLock(ctx, "box1"); ok || err != nil {
		t.Fatalf("gateway a's end of turn took box1 while gateway b holds it (err %v)", err)
	}
	// The failed try leaves a's own lock free: a's next action is not
	// stuck behind it.
	if !a.LocalFree("box1") {
		t.Fatal("a failed try kept this gateway's lock")
	}
	if unlock, ok, err := a.TryLock(ctx, "box2"); !ok || err != nil {
		t.Fatalf("another box: %v", err)
	} else {
		unlock()
	}

	unlockB()
	unlockA, ok, err := a.TryLock(ctx, "box1")
	if !ok || err != nil {
		t.Fatalf("after b let go: %v", err)
	}
	if _, ok, _ := b.TryLock(ctx, "box1"); ok {
		t.Fatal("gateway b took box1 while gateway a's end of turn holds it")
	}
	unlockA()
	if unlock, ok, err := b.TryLock(ctx, "box1"); !ok || err != nil {
		t.Fatalf("after a let go: %v", err)
	} else {
		unlock()
	}
}

// TestTryLockAlone: with no cluster a gateway's tryLock is its own lock.
func TestTryLockAlone(t *testing.T) {
	ctx := context.Background()
	g := fleet.NewGatewayLocks(nil, "")
	unlock, ok, err := g.TryLock(ctx, "box1")
	if !ok || err != nil {
		t.Fatalf("alone: %v", err)
	}
	if _, ok, _ := g.TryLock(ctx, "box1"); ok {
		t.Fatal("took a held lock")
	}
	unlock()
	if !g.LocalFree("box1") {
		t.Fatal("unlock left it held")
	}
}
