package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

// The dispatcher: the one place the fleet's events become notifications.
// Every gateway of a cluster sees every event; the first to take the
// event's lease enqueues it, and the outbox's key (owner, channel, key)
// keeps a second enqueue out all the same. Deliveries are claimed in the
// store before they are sent, so two gateways never send one twice.

// start runs the dispatcher until the core closes.
func (n *notifier) start() {
	if n.store == nil || n.sealer == nil {
		return
	}
	evs := n.events.subscribe(n.bg.ctx, system())
	n.bg.wg.Go(func() {
		for e := range evs {
			n.onEvent(n.bg.ctx, e)
		}
	})
	n.bg.wg.Go(func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-n.bg.ctx.Done():
				return
			case <-n.wake:
			case <-t.C:
			}
			n.pump(n.bg.ctx)
		}
	})
	n.poke() // what a restart left pending
}

// poke asks the dispatcher to look at the outbox.
func (n *notifier) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// onEvent enqueues the notifications an event of the fleet means.
func (n *notifier) onEvent(ctx context.Context, e Event) {
	var kind string
	switch {
	case e.Kind == EventQuestion:
		kind = NotifyWaiting
	case e.Kind == EventState && e.State == Done:
		kind = NotifyDone
	case e.Kind == EventState && e.State == Failed:
		kind = NotifyFailed
	case e.Kind == EventPRChecks:
		kind = NotifyPRChecks
	default:
		return
	}
	note := notification{Type: kind, Box: e.Box, Owner: e.Owner, State: string(e.State), At: e.At, URL: n.boxURL(e.Box)}
	rec, err := n.records.load(ctx, e.Box)
	var created int64
	turn := -1
	if err == nil {
		created, turn = rec.Created.UnixNano(), rec.Turn
		note.Title = n.title(rec)
	}
	switch kind {
	case NotifyWaiting:
		note.Question = truncate(e.Note.String(), maxQuestionChars)
	default:
		note.Note = truncate(e.Note.String(), maxQuestionChars)
	}
	// A box's turn is done once, however often it is woken to done again.
	var key string
	switch {
	case kind == NotifyFailed && err == nil:
		key = fmt.Sprintf("failed/%s/%d", e.Box, created)
	case (kind == NotifyWaiting || kind == NotifyDone) && err == nil:
		key = fmt.Sprintf("%s/%s/%d/%d", kind, e.Box, created, turn)
	default:
		key = fmt.Sprintf("%s/%s/at/%d", kind, e.Box, e.At.UnixNano())
	}
	n.enqueue(ctx, e.Owner, kind, e.Box, key, note)
}

// title is a box's title as notifications show it (its task's first line
// for a box stored before titles were).
func (n *notifier) title(r record) string {
	t := r.Title
	if t == "" {
		t, _, _ = strings.Cut(strings.TrimSpace(r.Task), "\n")
	}
	return truncate(n.red.String(t).String(), maxTitleChars)
}

// boxURL links to the box's page when the console's public URL is known.
func (n *notifier) boxURL(box string) string {
	if n.cfg.PublicURL == "" || box == "" {
		return ""
	}
	return strings.TrimRight(n.cfg.PublicURL, "/") + "/boxes/" + url.PathEscape(box)
}

// enqueue adds a delivery of note for every channel of owner that wants
// kind (the digest: every channel that opted into it).
func (n *notifier) enqueue(ctx context.Context, owner, kind, box, key string, note notification) {
	if n.enqueued(owner, key) || !n.leases.once(ctx, "notify/"+owner+"/"+key, timerTTL) {
		return
	}
	chans, err := n.store.ListChannels(ctx, owner)
	if err != nil {
		n.log.Warn("notify: list channels", "owner", owner, "err", err)
		return
	}
	payload, err := json.Marshal(note)
	if err != nil {
		return
	}
	now := n.now()
	added := false
	for _, ch := range chans {
		if !ch.Enabled || !wants(ch, kind) {
			continue
		}
		d := DeliveryDoc{Owner: owner, Channel: ch.Name, Key: key, Event: kind, Box: box, Payload: payload,
			Status: DeliveryPending, NextAttempt: now, Created: now}
		ok, err := n.store.EnqueueDelivery(ctx, &d)
		if err != nil {
			n.log.Warn("notify: enqueue", "owner", owner, "channel", ch.Name, "event", kind, "err", err)
			continue
		}
		added = added || ok
	}
	if added {
		n.poke()
	}
}

// enqueued reports whether this gateway enqueued owner's key lately (the
// timers find the same sleeping box and the same day's digest every tick:
// the store's key would refuse the repeat, this spares it the write), and
// notes it.
func (n *notifier) enqueued(owner, key string) bool {
	n.recentMu.Lock()
	defer n.recentMu.Unlock()
	k := owner + "/" + key
	if _, ok := n.recent[k]; ok {
		return true
	}
	now := n.now()
	if len(n.recent) > 4096 {
		for old, at := range n.recent {
			if now.Sub(at) > 25*time.Hour {
				delete(n.recent, old)
			}
		}
	}
	n.recent[k] = now
	return false
}

func wants(ch ChannelDoc, kind string) bool {
	if kind == NotifyDigest {
		return ch.Digest
	}
	for _, e := range ch.Events {
		if e == kind {
			return true
		}
	}
	return false
}

// pump sends every delivery that is due, a few at a time, and returns
// when they are done.
func (n *notifier) pump(ctx context.Context) {
	if n.store == nil || n.sealer == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for {
		now := n.now()
		due, err := n.store.DueDeliveries(ctx, now, deliveriesPerPump)
		if err != nil {
			n.log.Warn("notify: due deliveries", "err", err)
			return
		}
		var wg sync.WaitGroup
		sent := 0
		for _, d := range due {
			until := now.Add(claimTTL)
			ok, err := n.store.ClaimDelivery(ctx, d.ID, d.NextAttempt, until)
			if err != nil || !ok {
				continue // another gateway (or pump) has it
			}
			d.NextAttempt = until
			sent++
			n.sending <- struct{}{}
			wg.Go(func() {
				defer func() { <-n.sending }()
				n.attempt(ctx, d)
			})
		}
		wg.Wait()
		if len(due) < deliveriesPerPump || sent == 0 || ctx.Err() != nil {
			return
		}
	}
}

// attempt sends a claimed delivery once and records the outcome.
func (n *notifier) attempt(ctx context.Context, d DeliveryDoc) {
	oc, err := n.channel(ctx, d.Owner, d.Channel)
	var o outcome
	var note notification
	switch {
	case err != nil:
		o = outcome{err: "the channel cannot be read: " + err.Error(), permanent: true}
	case !oc.Enabled:
		o = outcome{err: "the channel is disabled", permanent: true}
	case json.Unmarshal(d.Payload, &note) != nil:
		o = outcome{err: "the stored notification is corrupt", permanent: true}
	default:
		o = n.send(ctx, oc, note, messageID(d.Owner, d.Channel, d.Key))
	}
	n.finish(ctx, &d, o, false)
}

// finish records an attempt's outcome: delivered, given up, or the next
// attempt after a backoff. once: no further attempt whatever happened.
func (n *notifier) finish(ctx context.Context, d *DeliveryDoc, o outcome, once bool) {
	now := n.now()
	d.Attempts++
	d.LastStatus = o.status
	d.LastError = o.err
	switch {
	case o.err == "":
		d.Status, d.Delivered = DeliveryDelivered, now
	case o.permanent || once:
		d.Status = DeliveryFailed
		d.LastError = "given up: " + o.err
	case d.Attempts >= maxAttempts:
		d.Status = DeliveryFailed
		d.LastError = fmt.Sprintf("given up after %d attempts: %s", d.Attempts, o.err)
	default:
		d.Status = DeliveryPending
		d.NextAttempt = now.Add(backoff(d.Attempts, o.retryAfter))
	}
	ctx = context.WithoutCancel(ctx)
	if err := n.store.FinishAttempt(ctx, *d); err != nil {
		n.log.Warn("notify: record attempt", "owner", d.Owner, "channel", d.Channel, "err", err)
		return
	}
	switch d.Status {
	case DeliveryDelivered:
		n.log.Info("notify: delivered", "owner", d.Owner, "channel", d.Channel, "event", d.Event, "box", d.Box, "status", d.LastStatus, "attempts", d.Attempts)
	case DeliveryFailed:
		n.log.Warn("notify: given up", "owner", d.Owner, "channel", d.Channel, "event", d.Event, "box", d.Box, "status", d.LastStatus, "attempts", d.Attempts, "err", n.red.String(d.LastError).String())
	default:
		n.log.Info("notify: will retry", "owner", d.Owner, "channel", d.Channel, "event", d.Event, "attempts", d.Attempts, "next", d.NextAttempt, "err", n.red.String(d.LastError).String())
	}
	if d.Status != DeliveryPending {
		if err := n.store.PruneDeliveries(ctx, d.Owner, d.Channel, deliveryLogKeep); err != nil {
			n.log.Warn("notify: prune delivery log", "channel", d.Channel, "err", err)
		}
	}
}

// tick is the notifications' part of the lifecycle tick: boxes the sleep
// TTL will destroy soon and the daily digests are enqueued, and the
// dispatcher is asked to send what is due (it never holds up the timers).
func (n *notifier) tick(ctx context.Context, recs []record) {
	if n.store == nil || n.sealer == nil {
		return
	}
	now := n.now()
	p := n.policy.get()
	lead := n.cfg.ExpiringLead
	if lead <= 0 {
		lead = time.Hour
	}
	for _, r := range recs {
		if p.SleepTTL <= 0 || r.State != Sleeping || r.Keep || r.SleptAt.IsZero() {
			continue
		}
		expires := r.SleptAt.Add(p.SleepTTL)
		if now.Before(expires.Add(-lead)) || !now.Before(expires) {
			continue
		}
		note := notification{Type: NotifyExpiring, Box: r.Name, Owner: r.Owner, Title: n.title(r), State: string(r.State),
			Note: fmt.Sprintf("asleep since %s UTC; the sleep TTL destroys it at %s UTC unless it is kept (keep) or woken (wake)",
				r.SleptAt.UTC().Format("2006-01-02 15:04"), expires.UTC().Format("2006-01-02 15:04")),
			At: now, URL: n.boxURL(r.Name)}
		n.enqueue(ctx, r.Owner, NotifyExpiring, r.Name, fmt.Sprintf("expiring/%s/%d", r.Name, r.SleptAt.UnixNano()), note)
	}
	n.digests(ctx, recs, now)
	n.poke()
}

// digests enqueues today's digest for every user with a channel that opted
// in, once the configured hour has come (UTC).
func (n *notifier) digests(ctx context.Context, recs []record, now time.Time) {
	utc := now.UTC()
	if utc.Hour() < n.cfg.DigestHour {
		return
	}
	chans, err := n.store.ListChannels(ctx, "")
	if err != nil {
		n.log.Warn("notify: list channels", "err", err)
		return
	}
	owners := map[string]bool{}
	for _, ch := range chans {
		if ch.Digest && ch.Enabled {
			owners[ch.Owner] = true
		}
	}
	day := utc.Format("2006-01-02")
	for owner := range owners {
		n.recentMu.Lock()
		_, done := n.recent[owner+"/digest/"+day]
		n.recentMu.Unlock()
		if done {
			continue
		}
		d := n.digest(ctx, owner, recs, now)
		note := notification{Type: NotifyDigest, Owner: owner, At: now, Digest: &d}
		if n.cfg.PublicURL != "" {
			note.URL = strings.TrimRight(n.cfg.PublicURL, "/") + "/"
		}
		n.enqueue(ctx, owner, NotifyDigest, "", "digest/"+day, note)
	}
}

// digest is owner's last 24 hours.
func (n *notifier) digest(ctx context.Context, owner string, recs []record, now time.Time) Digest {
	since := now.Add(-24 * time.Hour)
	d := Digest{Since: since, Created: []DigestBox{}, Done: []DigestBox{}, Failed: []DigestBox{}, Waiting: []DigestBox{}, Merged: []string{}}
	for _, r := range recs {
		if r.Owner != owner || r.State == Destroyed {
			continue
		}
		b := DigestBox{Box: r.Name, Title: n.title(r), State: string(r.State)}
		if r.Created.After(since) {
			d.Created = append(d.Created, b)
		}
		switch {
		case r.State == Done && r.Updated.After(since):
			d.Done = append(d.Done, b)
		case r.State == Failed && r.Updated.After(since):
			d.Failed = append(d.Failed, b)
		case r.State == Waiting || (r.State == Sleeping && r.StateBeforeSleep == Waiting):
			d.Waiting = append(d.Waiting, b)
		}
	}
	if n.merged == nil {
		d.MergedNote = "no pull-request data on this gateway yet"
		return d
	}
	merged, err := n.merged(ctx, owner, since)
	if err != nil {
		d.MergedNote = "pull requests could not be listed"
		n.log.Warn("notify: digest merged", "owner", owner, "err", err)
		return d
	}
	for _, m := range merged {
		d.Merged = append(d.Merged, n.red.String(m).String())
	}
	return d
}

// testChannel sends a test notification to one of the caller's channels
// at once, records it in the channel's log, and reports what the receiver
// answered: an error (ErrUnavailable) when it was not delivered.
func (n *notifier) testChannel(ctx context.Context, caller keys.Actor, name string) (Delivery, error) {
	if err := n.ready(); err != nil {
		return Delivery{}, n.red.Error(err)
	}
	e := caller.Entry(n.now(), "notify.channel.test", name)
	oc, err := n.channel(ctx, caller.User, name)
	if err != nil {
		n.audit.Finish(ctx, e, err, audit.ResultError)
		return Delivery{}, n.red.Error(err)
	}
	now := n.now()
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	note := notification{Type: NotifyTest, Owner: caller.User, At: now,
		Note: "A test notification from sbx: this channel works."}
	if n.cfg.PublicURL != "" {
		note.URL = strings.TrimRight(n.cfg.PublicURL, "/") + "/settings"
	}
	payload, err := json.Marshal(note)
	if err != nil {
		return Delivery{}, err
	}
	d := DeliveryDoc{Owner: caller.User, Channel: name, Key: fmt.Sprintf("test/%d/%s", now.UnixNano(), hex.EncodeToString(nonce[:])),
		Event: NotifyTest, Payload: payload, Status: DeliveryPending, NextAttempt: now.Add(claimTTL), Created: now}
	if _, err := n.store.EnqueueDelivery(ctx, &d); err != nil {
		n.audit.Finish(ctx, e, err, audit.ResultError)
		return Delivery{}, n.red.Error(err)
	}
	o := n.send(ctx, oc, note, messageID(d.Owner, d.Channel, d.Key))
	n.finish(ctx, &d, o, true)
	out := n.deliveryOf(d)
	if o.err != "" {
		err := fmt.Errorf("test notification to %q not delivered: %s: %w", name, o.err, ErrUnavailable)
		n.audit.Finish(ctx, e, err, audit.ResultError)
		return out, n.red.Error(err)
	}
	// Nothing of the store changed but the delivery log: the row is the
	// record of the test.
	e.Detail = fmt.Sprintf("HTTP %d", o.status)
	if err := n.audit.Record(ctx, e); err != nil {
		n.log.Warn("notify: audit the test", "err", err)
	}
	return out, nil
}
