package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/views"
)

// notifyCore is the notification channels' part of the core the settings
// page calls (*fleet.Fleet has it; a console without it shows why not).
type notifyCore interface {
	AddChannel(ctx context.Context, caller keys.Actor, req fleet.ChannelRequest) (fleet.AddedChannel, error)
	Channels(ctx context.Context, caller keys.Actor) ([]fleet.Channel, error)
	RemoveChannel(ctx context.Context, caller keys.Actor, name string) error
	SetChannelEnabled(ctx context.Context, caller keys.Actor, name string, enabled bool) (fleet.Channel, error)
	TestChannel(ctx context.Context, caller keys.Actor, name string) (fleet.Delivery, error)
	Deliveries(ctx context.Context, caller keys.Actor, name string, limit int) ([]fleet.Delivery, error)
}

// notifyLogShown is how many deliveries per channel the page shows.
const notifyLogShown = 5

func (s *Server) notifier() (notifyCore, bool) {
	n, ok := s.boxes.(notifyCore)
	return n, ok && s.boxes != nil
}

// notifyData fills the settings page's notification section.
func (s *Server) notifyData(r *http.Request, c caller) views.Notify {
	n, ok := s.notifier()
	if !ok {
		return views.Notify{Err: "Notifications are not available: this gateway runs without the fleet core."}
	}
	list, err := n.Channels(r.Context(), c.actor())
	if err != nil {
		return views.Notify{Err: "Could not list notification channels: " + err.Error()}
	}
	out := views.Notify{Channels: list, Log: map[string][]fleet.Delivery{}}
	for _, ch := range list {
		if d, err := n.Deliveries(r.Context(), c.actor(), ch.Name, notifyLogShown); err == nil {
			out.Log[ch.Name] = d
		}
	}
	return out
}

// renderSettings renders the settings page with the notification section
// as given, at code.
func (s *Server) renderSettings(w http.ResponseWriter, r *http.Request, code int, n views.Notify) {
	st, err := s.settingsData(r, "")
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	st.Notify.Form, st.Notify.NewSecret, st.Notify.NewSecretFor = n.Form, n.NewSecret, n.NewSecretFor
	s.render(w, r, code, views.SettingsPage(s.frame(r, "Settings"), st))
}

// addChannel adds a channel; a webhook secret sbx made is shown in this
// response only (never a redirect, the session or a URL).
func (s *Server) addChannel(w http.ResponseWriter, r *http.Request) {
	n, ok := s.notifier()
	if !ok {
		s.htmlError(w, r, http.StatusServiceUnavailable, "notifications are not available on this gateway")
		return
	}
	if !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	f := views.ChannelForm{Name: strings.TrimSpace(r.PostFormValue("name")), Kind: strings.TrimSpace(r.PostFormValue("kind")),
		URL: strings.TrimSpace(r.PostFormValue("url")), Events: strings.TrimSpace(r.PostFormValue("events")), Digest: r.PostFormValue("digest") != ""}
	req := fleet.ChannelRequest{Name: f.Name, Kind: f.Kind, URL: f.URL, Secret: r.PostFormValue("secret"), Digest: f.Digest}
	if f.Events != "" {
		for _, e := range strings.Split(f.Events, ",") {
			req.Events = append(req.Events, strings.TrimSpace(e))
		}
	}
	ch, err := n.AddChannel(r.Context(), c.actor(), req)
	if err != nil {
		code := errkind.HTTPStatus(err)
		if code == http.StatusInternalServerError {
			s.failPage(w, r, err)
			return
		}
		f.Error = err.Error()
		s.renderSettings(w, r, code, views.Notify{Form: f})
		return
	}
	if ch.Secret != "" {
		s.renderSettings(w, r, http.StatusCreated, views.Notify{NewSecret: ch.Secret, NewSecretFor: ch.Name})
		return
	}
	s.done(w, r, "/settings#notify", fmt.Sprintf("Notification channel %s added (%s).", ch.Name, ch.Kind))
}

// channelAction removes, tests, enables or disables one of the caller's
// channels.
func (s *Server) channelAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n, ok := s.notifier()
		if !ok {
			s.htmlError(w, r, http.StatusServiceUnavailable, "notifications are not available on this gateway")
			return
		}
		c, _ := callerFrom(r.Context())
		name := r.PathValue("name")
		var err error
		msg := ""
		switch action {
		case "delete":
			err, msg = n.RemoveChannel(r.Context(), c.actor(), name), "Notification channel "+name+" removed."
		case "enable", "disable":
			_, err = n.SetChannelEnabled(r.Context(), c.actor(), name, action == "enable")
			msg = "Notification channel " + name + " " + action + "d."
		case "test":
			var d fleet.Delivery
			d, err = n.TestChannel(r.Context(), c.actor(), name)
			if errors.Is(err, fleet.ErrUnavailable) {
				// The receiver's answer is the result, not a page failure.
				err, msg = nil, err.Error()
			} else {
				msg = fmt.Sprintf("Test notification to %s delivered: the receiver answered HTTP %d.", name, d.LastStatus)
			}
		}
		if err != nil {
			s.failPage(w, r, err)
			return
		}
		s.done(w, r, "/settings#notify", msg)
	}
}
