package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
)

// TestNotifyOutbox: in both dialects, through two gateways: a channel
// once per owner and name, an event's delivery enqueued once however many
// gateways try, one claim wins, the outcome is kept, the log is pruned to
// its newest finished rows (pending ones stay), and removing the channel
// removes its deliveries.
func TestNotifyOutbox(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		a, b := connect(t), connect(t)
		now := time.Unix(1_800_000_000, 0)
		ch := fleet.ChannelDoc{Owner: "erin", Name: "hook", Kind: "webhook", URL: "https://example.com/h", Sealed: []byte{1, 2, 0, 3},
			Events: []string{"done", "failed"}, Digest: true, Enabled: true, Created: now}
		if err := a.InsertChannel(ctx, ch, testRec); err != nil {
			t.Fatal(err)
		}
		if err := b.InsertChannel(ctx, ch, testRec); !errors.Is(err, fleet.ErrConflict) {
			t.Fatalf("the same channel again: %v", err)
		}
		list, err := b.ListChannels(ctx, "erin")
		if err != nil || len(list) != 1 || string(list[0].Sealed) != "\x01\x02\x00\x03" || !list[0].Digest || !list[0].Enabled ||
			fmt.Sprint(list[0].Events) != "[done failed]" || !list[0].Created.Equal(now) {
			t.Fatalf("channels: %+v %v", list, err)
		}
		if all, _ := a.ListChannels(ctx, ""); len(all) != 1 {
			t.Fatalf("every owner's channels: %+v", all)
		}
		if found, err := a.SetChannelEnabled(ctx, "erin", "hook", false, testRec); err != nil || !found {
			t.Fatalf("disable: %v %v", found, err)
		}
		if found, _ := a.SetChannelEnabled(ctx, "frank", "hook", false, testRec); found {
			t.Fatal("another owner's channel disabled")
		}

		var added atomic.Int32
		var wg sync.WaitGroup
		for _, s := range []*Store{a, b, a, b} {
			wg.Go(func() {
				d := fleet.DeliveryDoc{Owner: "erin", Channel: "hook", Key: "done/box/1/1", Event: "done", Box: "box",
					Payload: []byte(`{"type":"done"}`), Status: fleet.DeliveryPending, NextAttempt: now, Created: now}
				ok, err := s.EnqueueDelivery(ctx, &d)
				if err != nil {
					t.Error(err)
				}
				if ok {
					added.Add(1)
					if d.ID == 0 {
						t.Error("no id")
					}
				}
			})
		}
		wg.Wait()
		if added.Load() != 1 {
			t.Fatalf("%d enqueues of one key took", added.Load())
		}
		due, err := b.DueDeliveries(ctx, now, 10)
		if err != nil || len(due) != 1 || string(due[0].Payload) != `{"type":"done"}` {
			t.Fatalf("due: %+v %v", due, err)
		}
		if d, _ := a.DueDeliveries(ctx, now.Add(-time.Second), 10); len(d) != 0 {
			t.Fatalf("due before its time: %+v", d)
		}
		won := 0
		for _, s := range []*Store{a, b} {
			if ok, err := s.ClaimDelivery(ctx, due[0].ID, due[0].NextAttempt, now.Add(time.Minute)); err != nil {
				t.Fatal(err)
			} else if ok {
				won++
			}
		}
		if won != 1 {
			t.Fatalf("%d claims won", won)
		}
		d := due[0]
		d.Status, d.Attempts, d.LastStatus, d.LastError, d.Delivered = fleet.DeliveryDelivered, 1, 200, "", now.Add(time.Second)
		if err := a.FinishAttempt(ctx, d); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			status := fleet.DeliveryFailed
			if i == 0 {
				status = fleet.DeliveryPending
			}
			x := fleet.DeliveryDoc{Owner: "erin", Channel: "hook", Key: fmt.Sprint("k", i), Event: "failed", Payload: []byte("{}"),
				Status: status, NextAttempt: now.Add(time.Hour), Created: now, LastError: "HTTP 500"}
			if _, err := b.EnqueueDelivery(ctx, &x); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.PruneDeliveries(ctx, "erin", "hook", 2); err != nil {
			t.Fatal(err)
		}
		log, err := b.ListDeliveries(ctx, "erin", "hook", 100)
		if err != nil || len(log) != 3 || log[0].Key != "k4" || log[1].Key != "k3" || log[2].Key != "k0" || log[2].Status != fleet.DeliveryPending {
			t.Fatalf("pruned log: %+v %v", log, err)
		}
		if found, err := b.DeleteChannel(ctx, "erin", "hook", testRec); err != nil || !found {
			t.Fatalf("remove: %v %v", found, err)
		}
		if log, _ := a.ListDeliveries(ctx, "erin", "hook", 100); len(log) != 0 {
			t.Fatalf("deliveries outlived their channel: %+v", log)
		}
	})
}
