package fleet

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/internal/charset"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
)

// Notifications: each user's channels (a signed webhook, an ntfy topic, a
// Slack-compatible incoming webhook), the events each wants, and an outbox
// of deliveries in the store that a restart resumes. notify_dispatch.go
// turns the fleet's events into deliveries, once per cluster;
// notify_send.go sends them.

// Channel kinds.
const (
	ChannelWebhook = "webhook"
	ChannelNtfy    = "ntfy"
	ChannelSlack   = "slack"
)

// Notification events a channel may want. NotifyPRChecks is published by
// the pull-request watcher as an Event of kind EventPRChecks (its Note the
// one-line summary, e.g. "PR #12: checks passed"); the dispatcher turns
// every such Event into a pr_checks notification for the box's owner.
const (
	NotifyWaiting  = "waiting"   // the agent asked a question
	NotifyDone     = "done"      // a turn finished
	NotifyFailed   = "failed"    // the box failed
	NotifyPRChecks = "pr_checks" // a pull request's checks finished
	NotifyExpiring = "expiring"  // the sleep TTL destroys the box soon
	// NotifyDigest and NotifyTest are not wanted by event: a channel opts
	// into the digest (Digest), and a test goes when asked.
	NotifyDigest = "digest"
	NotifyTest   = "test"
)

// NotifyEvents are the events a channel may ask for, in order; a channel
// added without a list gets them all.
var NotifyEvents = []string{NotifyWaiting, NotifyDone, NotifyFailed, NotifyPRChecks, NotifyExpiring}

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// Channel is one of a user's notification channels as fronts see it: its
// URL in the shown form (scheme, host, path; a Slack URL's path is its
// secret and is not shown), never its secret.
type Channel struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	Digest    bool      `json:"digest"`
	Enabled   bool      `json:"enabled"`
	HasSecret bool      `json:"has_secret"`
	Created   time.Time `json:"created"`
}

// ChannelRequest is a channel to add.
type ChannelRequest struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	URL  string `json:"url"`
	// Secret: a webhook's signing secret (whsec_<base64>; empty: sbx makes
	// one and shows it once), an ntfy access token (optional); a Slack
	// channel takes none (its URL is the secret).
	Secret string `json:"secret,omitempty"`
	// Events it wants (nil: all of NotifyEvents).
	Events []string `json:"events,omitempty"`
	// Digest opts into the daily digest.
	Digest bool `json:"digest,omitempty"`
}

// AddedChannel is a new channel and, for a webhook whose secret sbx made,
// that secret: shown this once, never again.
type AddedChannel struct {
	Channel
	Secret string `json:"secret,omitempty"`
}

// Delivery is one notification to one channel, as its delivery log shows.
type Delivery struct {
	ID          int64     `json:"id"`
	Channel     string    `json:"channel"`
	Event       string    `json:"event"`
	Box         string    `json:"box,omitempty"`
	Status      string    `json:"status"`
	Attempts    int       `json:"attempts"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	// LastStatus is the receiver's last HTTP status (0: none).
	LastStatus int         `json:"last_status,omitempty"`
	LastError  redact.Safe `json:"last_error,omitzero"`
	Created    time.Time   `json:"created"`
	Delivered  time.Time   `json:"delivered,omitzero"`
}

// ChannelDoc is a channel row; Sealed holds its URL and secret.
type ChannelDoc struct {
	Owner   string
	Name    string
	Kind    string
	URL     string // shown form
	Sealed  []byte
	Events  []string
	Digest  bool
	Enabled bool
	Created time.Time
}

// DeliveryDoc is an outbox row.
type DeliveryDoc struct {
	ID          int64
	Owner       string
	Channel     string
	Key         string
	Event       string
	Box         string
	Payload     []byte
	Status      string
	Attempts    int
	NextAttempt time.Time
	LastStatus  int
	LastError   string
	Created     time.Time
	Delivered   time.Time
}

// NotifyStore keeps the channels and the outbox (store.Store implements
// it in both dialects).
type NotifyStore interface {
	InsertChannel(ctx context.Context, d ChannelDoc, rec audit.Entry) error
	// ListChannels lists owner's channels by name ("": every owner's).
	ListChannels(ctx context.Context, owner string) ([]ChannelDoc, error)
	// DeleteChannel removes a channel and its deliveries.
	DeleteChannel(ctx context.Context, owner, name string, rec audit.Entry) (found bool, err error)
	SetChannelEnabled(ctx context.Context, owner, name string, enabled bool, rec audit.Entry) (found bool, err error)
	// EnqueueDelivery adds d unless a delivery of the same owner, channel
	// and key exists; it reports whether it added it (and sets its ID).
	EnqueueDelivery(ctx context.Context, d *DeliveryDoc) (bool, error)
	// DueDeliveries lists pending deliveries due at now, oldest first.
	DueDeliveries(ctx context.Context, now time.Time, limit int) ([]DeliveryDoc, error)
	// ClaimDelivery moves a pending delivery's next attempt from was to
	// until, if nobody else did: the one that does sends it.
	ClaimDelivery(ctx context.Context, id int64, was, until time.Time) (bool, error)
	// FinishAttempt writes an attempt's outcome (status, attempts, next
	// attempt, last status and error, delivered).
	FinishAttempt(ctx context.Context, d DeliveryDoc) error
	// ListDeliveries lists a channel's newest deliveries first.
	ListDeliveries(ctx context.Context, owner, channel string, limit int) ([]DeliveryDoc, error)
	// PruneDeliveries keeps a channel's newest keep finished deliveries.
	PruneDeliveries(ctx context.Context, owner, channel string, keep int) error
}

// NotifyConfig tunes the notifications.
type NotifyConfig struct {
	// PublicURL is the web console's base (web.public_url): notifications
	// link to the box's page under it; empty: no link.
	PublicURL string
	// DigestHour is the UTC hour the daily digest goes out (0-23).
	DigestHour int
	// ExpiringLead is how long before the sleep TTL destroys a box its
	// owner hears of it (default 1 h).
	ExpiringLead time.Duration
}

// Limits of the notifications.
const (
	maxChannels       = 16
	maxChannelURL     = 2048
	deliveryLogKeep   = 100
	maxAttempts       = 6
	retryBase         = 2 * time.Minute
	maxRetryAfter     = time.Hour
	claimTTL          = 2 * time.Minute
	sendTimeout       = 10 * time.Second
	maxPayload        = 64 << 10
	maxQuestionChars  = 2000
	maxTitleChars     = 120
	deliveriesPerPump = 32
)

var (
	channelNameFirst = charset.New("a-z0-9")
	channelNameRest  = charset.New("a-z0-9_-")
	ntfyTokenChars   = charset.New("A-Za-z0-9_.-")
)

func channelAAD(owner, name string) []byte { return []byte("notify-channel:" + owner + ":" + name) }

// channelSecret is what a channel seals: its whole URL and its secret.
type channelSecret struct {
	URL    string `json:"url"`
	Secret string `json:"secret,omitempty"`
}

// openChannel is a channel with its URL and secret opened.
type openChannel struct {
	ChannelDoc
	url, secret string
}

// notifier keeps the channels and sends the outbox.
type notifier struct {
	store   NotifyStore // nil: no notifications
	sealer  Sealer
	private []netpolicy.Trust
	cfg     NotifyConfig
	client  *http.Client
	records *records
	events  *events
	leases  *leases
	policy  *livePolicy
	red     *redact.Redactor
	audit   *audit.Log
	bg      *background
	now     func() time.Time
	log     *slog.Logger
	// wake asks the dispatcher to look at the outbox now.
	wake chan struct{}
	// sending bounds the deliveries in flight.
	sending chan struct{}
	// merged lists what merged for a digest (nil: no pull-request data
	// yet; the pull-request part of the core sets it).
	merged func(ctx context.Context, owner string, since time.Time) ([]string, error)
	// mu makes one pump at a time on this gateway.
	mu sync.Mutex
	// recent is what this gateway enqueued lately (enqueued).
	recentMu sync.Mutex
	recent   map[string]time.Time
}

func (n *notifier) ready() error {
	if n.store == nil || n.sealer == nil {
		return fmt.Errorf("this gateway keeps no notification channels: %w", ErrUnavailable)
	}
	return nil
}

// validChannelName checks a channel name: as account names, a lowercase
// letter or digit, then up to 31 of a-z 0-9 _ -.
func validChannelName(s string) error {
	if !charset.Is(s, 1, 32, channelNameFirst, channelNameRest) {
		return fmt.Errorf("channel name %q: want a lowercase letter or digit then up to 31 of a-z 0-9 _ -: %w", s, ErrInvalid)
	}
	return nil
}

// cleanEvents checks a channel's events and puts them in NotifyEvents'
// order; nil or empty means all.
func cleanEvents(in []string) ([]string, error) {
	if len(in) == 0 {
		return slices.Clone(NotifyEvents), nil
	}
	want := map[string]bool{}
	for _, e := range in {
		e = strings.TrimSpace(e)
		if !slices.Contains(NotifyEvents, e) {
			return nil, fmt.Errorf("event %q: want some of %s: %w", e, strings.Join(NotifyEvents, ", "), ErrInvalid)
		}
		want[e] = true
	}
	var out []string
	for _, e := range NotifyEvents {
		if want[e] {
			out = append(out, e)
		}
	}
	return out, nil
}

// checkChannelURL parses a channel's URL and judges its address as the
// MCP servers' are: http(s), no credentials or fragment, a host the
// address policy admits without DNS (and by what it resolves to on every
// send). The error never quotes more than the shown form.
func checkChannelURL(raw string, private []netpolicy.Trust) (*url.URL, error) {
	if len(raw) > maxChannelURL {
		return nil, fmt.Errorf("channel URL: %d bytes (max %d): %w", len(raw), maxChannelURL, ErrInvalid)
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("channel URL: not a URL; want http(s)://host/path: %w", ErrInvalid)
	}
	if u.User != nil {
		return nil, fmt.Errorf("channel URL %q: credentials do not go in the URL; give a token as the secret (it is sealed): %w", shownURL(u), ErrInvalid)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("channel URL %q: want http(s)://host/path: %w", shownURL(u), ErrInvalid)
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("channel URL %q: a #fragment is never sent; leave it out: %w", shownURL(u), ErrInvalid)
	}
	if err := netpolicy.CheckUpstream(u, private); err != nil {
		return nil, fmt.Errorf("channel URL %q: %v: the gateway notifies public addresses only (an operator may trust a private one with net.private_upstreams): %w", shownURL(u), err, ErrInvalid)
	}
	return u, nil
}

// channelShownURL is a channel's URL as lists show it: a Slack webhook's
// path is its credential, so only its host shows.
func channelShownURL(kind string, u *url.URL) string {
	if kind == ChannelSlack {
		return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String() + "/…"
	}
	return shownURL(u)
}

// checkSecret checks (or, for a webhook without one, makes) a channel's
// secret; made reports a secret sbx made.
func checkSecret(kind, secret string) (out string, made bool, err error) {
	secret = strings.TrimSpace(secret)
	switch kind {
	case ChannelWebhook:
		if secret == "" {
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				return "", false, err
			}
			return webhookSecretPrefix + base64.StdEncoding.EncodeToString(b), true, nil
		}
		if _, err := webhookKey(secret); err != nil {
			return "", false, err
		}
		return secret, false, nil
	case ChannelNtfy:
		if secret != "" && !charset.Is(secret, 8, 255, ntfyTokenChars, ntfyTokenChars) {
			return "", false, fmt.Errorf("ntfy access token: want 8 to 255 of A-Z a-z 0-9 _ . - (got %d bytes): %w", len(secret), ErrInvalid)
		}
		return secret, false, nil
	case ChannelSlack:
		if secret != "" {
			return "", false, fmt.Errorf("a slack channel takes no secret (its URL is the secret, and it is sealed): %w", ErrInvalid)
		}
		return "", false, nil
	}
	return "", false, fmt.Errorf("channel kind %q: want webhook, ntfy or slack: %w", kind, ErrInvalid)
}

// addChannel checks and saves a channel (see Fleet.AddChannel).
func (n *notifier) addChannel(ctx context.Context, caller keys.Actor, req ChannelRequest) (AddedChannel, error) {
	e := caller.Entry(n.now(), "notify.channel.add", req.Name)
	out, err := n.saveChannel(ctx, caller, req, &e)
	if err != nil {
		n.audit.Finish(ctx, e, err, audit.ResultError)
		return AddedChannel{}, n.red.Error(err)
	}
	return out, nil
}

func (n *notifier) saveChannel(ctx context.Context, caller keys.Actor, req ChannelRequest, e *audit.Entry) (AddedChannel, error) {
	if err := n.ready(); err != nil {
		return AddedChannel{}, err
	}
	if err := validChannelName(req.Name); err != nil {
		return AddedChannel{}, err
	}
	switch req.Kind {
	case ChannelWebhook, ChannelNtfy, ChannelSlack:
	default:
		return AddedChannel{}, fmt.Errorf("channel kind %q: want webhook, ntfy or slack: %w", req.Kind, ErrInvalid)
	}
	u, err := checkChannelURL(req.URL, n.private)
	if err != nil {
		return AddedChannel{}, err
	}
	events, err := cleanEvents(req.Events)
	if err != nil {
		return AddedChannel{}, err
	}
	secret, made, err := checkSecret(req.Kind, req.Secret)
	if err != nil {
		return AddedChannel{}, err
	}
	existing, err := n.store.ListChannels(ctx, caller.User)
	if err != nil {
		return AddedChannel{}, err
	}
	if len(existing) >= maxChannels {
		return AddedChannel{}, fmt.Errorf("you have %d notification channels (max %d): %w", len(existing), maxChannels, ErrLimit)
	}
	plain, err := json.Marshal(channelSecret{URL: u.String(), Secret: secret})
	if err != nil {
		return AddedChannel{}, err
	}
	sealed, err := n.sealer.Seal(plain, channelAAD(caller.User, req.Name))
	if err != nil {
		return AddedChannel{}, err
	}
	d := ChannelDoc{Owner: caller.User, Name: req.Name, Kind: req.Kind, URL: channelShownURL(req.Kind, u), Sealed: sealed,
		Events: events, Digest: req.Digest, Enabled: true, Created: n.now()}
	e.Detail = fmt.Sprintf("kind=%s url=%s events=%s digest=%t", d.Kind, d.URL, strings.Join(events, ","), d.Digest)
	if err := n.store.InsertChannel(ctx, d, *e); err != nil {
		return AddedChannel{}, err
	}
	n.audit.Finish(ctx, *e, nil, "")
	out := AddedChannel{Channel: channelOf(d, secret != "")}
	if made {
		out.Secret = secret
	}
	return out, nil
}

func channelOf(d ChannelDoc, hasSecret bool) Channel {
	ev := d.Events
	if ev == nil {
		ev = []string{}
	}
	return Channel{Name: d.Name, Kind: d.Kind, URL: d.URL, Events: ev, Digest: d.Digest, Enabled: d.Enabled, HasSecret: hasSecret, Created: d.Created}
}

// channels lists the caller's channels.
func (n *notifier) channels(ctx context.Context, caller keys.Actor) ([]Channel, error) {
	if err := n.ready(); err != nil {
		return nil, n.red.Error(err)
	}
	docs, err := n.store.ListChannels(ctx, caller.User)
	if err != nil {
		return nil, n.red.Error(err)
	}
	out := []Channel{}
	for _, d := range docs {
		oc, err := n.open(d)
		if err != nil {
			return nil, n.red.Error(err)
		}
		out = append(out, channelOf(d, oc.secret != ""))
	}
	return out, nil
}

// open unseals a channel's URL and secret.
func (n *notifier) open(d ChannelDoc) (openChannel, error) {
	plain, err := n.sealer.Open(d.Sealed, channelAAD(d.Owner, d.Name))
	if err != nil {
		return openChannel{}, fmt.Errorf("open channel %q of %q: %w", d.Name, d.Owner, err)
	}
	var s channelSecret
	if err := json.Unmarshal(plain, &s); err != nil {
		return openChannel{}, fmt.Errorf("channel %q of %q: %w", d.Name, d.Owner, err)
	}
	return openChannel{ChannelDoc: d, url: s.URL, secret: s.Secret}, nil
}

// channel finds one of the caller's channels.
func (n *notifier) channel(ctx context.Context, owner, name string) (openChannel, error) {
	docs, err := n.store.ListChannels(ctx, owner)
	if err != nil {
		return openChannel{}, err
	}
	for _, d := range docs {
		if d.Name == name {
			return n.open(d)
		}
	}
	return openChannel{}, fmt.Errorf("notification channel %q: %w", name, ErrNotFound)
}

// removeChannel deletes one of the caller's channels and its deliveries.
func (n *notifier) removeChannel(ctx context.Context, caller keys.Actor, name string) error {
	if err := n.ready(); err != nil {
		return n.red.Error(err)
	}
	e := caller.Entry(n.now(), "notify.channel.rm", name)
	found, err := n.store.DeleteChannel(ctx, caller.User, name, e)
	if err == nil && !found {
		err = fmt.Errorf("notification channel %q: %w", name, ErrNotFound)
	}
	if err != nil {
		n.audit.Finish(ctx, e, err, audit.ResultError)
		return n.red.Error(err)
	}
	n.audit.Finish(ctx, e, nil, "")
	return nil
}

// setEnabled turns one of the caller's channels on or off.
func (n *notifier) setEnabled(ctx context.Context, caller keys.Actor, name string, enabled bool) (Channel, error) {
	if err := n.ready(); err != nil {
		return Channel{}, n.red.Error(err)
	}
	action := "notify.channel.disable"
	if enabled {
		action = "notify.channel.enable"
	}
	e := caller.Entry(n.now(), action, name)
	found, err := n.store.SetChannelEnabled(ctx, caller.User, name, enabled, e)
	if err == nil && !found {
		err = fmt.Errorf("notification channel %q: %w", name, ErrNotFound)
	}
	if err != nil {
		n.audit.Finish(ctx, e, err, audit.ResultError)
		return Channel{}, n.red.Error(err)
	}
	n.audit.Finish(ctx, e, nil, "")
	oc, err := n.channel(ctx, caller.User, name)
	if err != nil {
		return Channel{}, n.red.Error(err)
	}
	return channelOf(oc.ChannelDoc, oc.secret != ""), nil
}

// deliveries lists a channel's delivery log, newest first.
func (n *notifier) deliveries(ctx context.Context, caller keys.Actor, name string, limit int) ([]Delivery, error) {
	if err := n.ready(); err != nil {
		return nil, n.red.Error(err)
	}
	if limit <= 0 || limit > deliveryLogKeep {
		limit = deliveryLogKeep
	}
	if _, err := n.channel(ctx, caller.User, name); err != nil {
		return nil, n.red.Error(err)
	}
	docs, err := n.store.ListDeliveries(ctx, caller.User, name, limit)
	if err != nil {
		return nil, n.red.Error(err)
	}
	out := []Delivery{}
	for _, d := range docs {
		out = append(out, n.deliveryOf(d))
	}
	return out, nil
}

func (n *notifier) deliveryOf(d DeliveryDoc) Delivery {
	out := Delivery{ID: d.ID, Channel: d.Channel, Event: d.Event, Box: d.Box, Status: d.Status, Attempts: d.Attempts,
		LastStatus: d.LastStatus, LastError: n.red.String(d.LastError), Created: d.Created, Delivered: d.Delivered}
	if d.Status == DeliveryPending {
		out.NextAttempt = d.NextAttempt
	}
	return out
}

// newNotifier wires the notifications to the core's parts.
func newNotifier(cfg Config, f *Fleet) *notifier {
	// Requests dial only the addresses the policy admits, checked on
	// every dial (the operator's trusted private upstreams pass).
	rt := checkedTransport(cfg.PrivateUpstreams)
	return &notifier{store: cfg.Notify, sealer: cfg.Sealer, private: cfg.PrivateUpstreams, cfg: cfg.Notifications,
		client: newClient(rt), records: f.records, events: f.events, leases: f.leases, policy: f.policy,
		red: f.red, audit: f.audit, bg: f.bg, now: f.now, log: f.log,
		wake: make(chan struct{}, 1), sending: make(chan struct{}, 4), recent: map[string]time.Time{},
		merged: f.mergedPRs}
}

// mergedPRs is what merged for owner's digest: "owner/name#N title (box)".
func (f *Fleet) mergedPRs(ctx context.Context, owner string, since time.Time) ([]string, error) {
	docs, err := f.store.MergedPRs(ctx, owner, since)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(docs))
	for _, d := range docs {
		line := fmt.Sprintf("%s#%d", d.Repo, d.Number)
		if c := storedCard(d); c.Title != "" {
			line += " " + c.Title
		}
		out = append(out, line+" ("+d.Box+")")
	}
	return out, nil
}
