package mcp

import (
	"context"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/fleet"
)

// ChannelOut is one notification channel (never its secret).
type ChannelOut struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind" jsonschema:"webhook | ntfy | slack"`
	URL     string   `json:"url" jsonschema:"where it sends (a Slack URL's secret path is not shown)"`
	Events  []string `json:"events" jsonschema:"the events it gets: waiting, done, failed, pr_checks, expiring"`
	Digest  bool     `json:"digest" jsonschema:"whether it gets the daily digest"`
	Enabled bool     `json:"enabled"`
	// Secret is a webhook's signing secret sbx made, shown this once.
	Secret string `json:"secret,omitempty" jsonschema:"the webhook signing secret (whsec_…), shown only when it is made"`
}

func channelOut(c fleet.Channel) ChannelOut {
	return ChannelOut{Name: c.Name, Kind: c.Kind, URL: c.URL, Events: c.Events, Digest: c.Digest, Enabled: c.Enabled}
}

// ChannelsOut lists channels.
type ChannelsOut struct {
	Channels []ChannelOut `json:"channels"`
}

// ChannelIn adds a channel.
type ChannelIn struct {
	Name   string   `json:"name" jsonschema:"a lowercase letter or digit, then up to 31 of a-z 0-9 _ -"`
	Kind   string   `json:"kind" jsonschema:"webhook (signed per Standard Webhooks), ntfy (a topic URL) or slack (an incoming-webhook URL)"`
	URL    string   `json:"url" jsonschema:"the http(s) URL to send to; public addresses only"`
	Secret string   `json:"secret,omitempty" jsonschema:"webhook: a whsec_ secret (omit and sbx makes one); ntfy: an access token; slack: none"`
	Events []string `json:"events,omitempty" jsonschema:"waiting, done, failed, pr_checks, expiring (default all)"`
	Digest bool     `json:"digest,omitempty" jsonschema:"also send the daily digest here"`
}

// ChannelRef names a channel.
type ChannelRef struct {
	Name string `json:"name" jsonschema:"the channel name, as notify_list shows it"`
}

// RemovedOut says a channel is gone.
type RemovedOut struct {
	Name    string `json:"name"`
	Removed bool   `json:"removed"`
}

// TestOut is what a test notification came to.
type TestOut struct {
	Name       string    `json:"name"`
	Delivered  bool      `json:"delivered"`
	HTTPStatus int       `json:"http_status" jsonschema:"the receiver's answer"`
	At         time.Time `json:"at"`
}

// EnableIn turns a channel on or off.
type EnableIn struct {
	Name    string `json:"name" jsonschema:"the channel name, as notify_list shows it"`
	Enabled bool   `json:"enabled" jsonschema:"true sends to it again; false stops sending (its deliveries wait)"`
}

// NotifyLogIn asks for a channel's latest deliveries.
type NotifyLogIn struct {
	Name  string `json:"name" jsonschema:"the channel name, as notify_list shows it"`
	Limit int    `json:"limit,omitempty" jsonschema:"how many, newest first (default 20, at most 100)"`
}

// DeliveriesOut is a channel's delivery log, newest first.
type DeliveriesOut struct {
	Deliveries []fleet.Delivery `json:"deliveries"`
}

func (h *handler) addNotifyTools() {
	add(h, tool{name: "notify_enable", title: "Turn a notification channel on or off", write: true,
		desc: "Turn one of your notification channels on (enabled=true) or off (enabled=false) without removing it."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in EnableIn) (*sdk.CallToolResult, ChannelOut, error) {
			ch, err := h.fleet.SetChannelEnabled(ctx, c.actor, in.Name, in.Enabled)
			if err != nil {
				return nil, ChannelOut{}, err
			}
			return nil, channelOut(ch), nil
		})
	add(h, tool{name: "notify_log", title: "A notification channel's delivery log",
		desc: "The latest deliveries of one of your notification channels: event, box, status (pending, delivered, failed), attempts, the receiver's last HTTP status and error."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in NotifyLogIn) (*sdk.CallToolResult, DeliveriesOut, error) {
			limit := in.Limit
			if limit == 0 {
				limit = 20
			}
			list, err := h.fleet.Deliveries(ctx, c.actor, in.Name, limit)
			if err != nil {
				return nil, DeliveriesOut{}, err
			}
			if list == nil {
				list = []fleet.Delivery{}
			}
			return nil, DeliveriesOut{Deliveries: list}, nil
		})
	add(h, tool{name: "notify_list", title: "List notification channels",
		desc: "List your notification channels (webhook, ntfy, Slack): where you hear that a box waits, is done or failed, and the events each gets. Secrets are never shown."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, ChannelsOut, error) {
			list, err := h.fleet.Channels(ctx, c.actor)
			if err != nil {
				return nil, ChannelsOut{}, err
			}
			out := ChannelsOut{Channels: make([]ChannelOut, 0, len(list))}
			for _, ch := range list {
				out.Channels = append(out.Channels, channelOut(ch))
			}
			return nil, out, nil
		})

	add(h, tool{name: "notify_add", title: "Add a notification channel", write: true,
		desc: "Add a notification channel. A webhook without a secret gets one, returned once in secret: keep it to verify webhook-signature. " +
			"Send notify_test next to check the receiver answers."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in ChannelIn) (*sdk.CallToolResult, ChannelOut, error) {
			ch, err := h.fleet.AddChannel(ctx, c.actor, fleet.ChannelRequest{Name: in.Name, Kind: in.Kind, URL: in.URL, Secret: in.Secret, Events: in.Events, Digest: in.Digest})
			if err != nil {
				return nil, ChannelOut{}, err
			}
			out := channelOut(ch.Channel)
			out.Secret = ch.Secret
			return nil, out, nil
		})

	add(h, tool{name: "notify_remove", title: "Remove a notification channel", write: true, destructive: true,
		desc: "Remove one of your notification channels and its delivery log."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in ChannelRef) (*sdk.CallToolResult, RemovedOut, error) {
			if err := h.fleet.RemoveChannel(ctx, c.actor, in.Name); err != nil {
				return nil, RemovedOut{}, err
			}
			return nil, RemovedOut{Name: in.Name, Removed: true}, nil
		})

	add(h, tool{name: "notify_test", title: "Send a test notification", write: true,
		desc: "Send a test notification to one of your channels now and report the receiver's HTTP status; an error says why it was not delivered."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in ChannelRef) (*sdk.CallToolResult, TestOut, error) {
			d, err := h.fleet.TestChannel(ctx, c.actor, in.Name)
			if err != nil {
				return nil, TestOut{}, err
			}
			return nil, TestOut{Name: in.Name, Delivered: true, HTTPStatus: d.LastStatus, At: d.Created}, nil
		})
}
