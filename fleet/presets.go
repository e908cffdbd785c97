package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/keys"
)

// Egress presets (the table is netpolicy's: internal/netpolicy/presets.go).
//
// "@npm" is accepted wherever an allow-list entry is (delegate, SetAllow,
// EditAllow), checked by cleanAllow: an unknown name is ErrInvalid naming
// the known ones. A box's stored list keeps the reference, so status shows
// "@npm" and the box follows the preset as sbx maintains it; the grant the
// box network gets (grants.grant) is the expansion, so the box network
// matches host names only and its address policy judges every name behind
// a preset like any other.
//
// Defaults:
//   - the site's (SitePresets, the configuration key net.default_presets)
//     are part of every box's grant, not of its stored list: a box cannot
//     drop them, and a change of the configuration reaches every box;
//   - a user's (SetDefaultPresets) are added to the allow-list of each box
//     they delegate, whatever else the request names, and stored with it:
//     status shows them, `allow --set` takes them off that one box, and a
//     later change of the default leaves existing boxes as they are.

// PresetStore keeps each user's default presets.
type PresetStore interface {
	// DefaultPresets returns owner's default presets ("@npm", …), none
	// when they never set any.
	DefaultPresets(ctx context.Context, owner string) ([]string, error)
	// SetDefaultPresets replaces them (an empty list clears them), with
	// the change's audit row in the same transaction.
	SetDefaultPresets(ctx context.Context, owner string, presets []string, at time.Time, rec audit.Entry) error
}

// PresetsView is what the presets are for a user: every preset with its
// entries, their own default set and the site's.
type PresetsView struct {
	Presets []netpolicy.Preset `json:"presets"`
	// Default is the caller's default presets, added to each box they
	// delegate.
	Default []string `json:"default"`
	// Site is the site's default presets (net.default_presets), part of
	// every box's grant.
	Site []string `json:"site"`
}

// Presets lists the egress presets with their entries, the caller's
// default set and the site's.
func (f *Fleet) Presets(ctx context.Context, caller keys.Actor) (PresetsView, error) {
	if err := need(caller, keys.RightRead, "presets"); err != nil {
		return PresetsView{}, err
	}
	def, err := f.userPresets(ctx, caller.User)
	if err != nil {
		return PresetsView{}, f.safeErr(err)
	}
	return PresetsView{Presets: netpolicy.Presets(), Default: def, Site: append([]string{}, f.sitePresets...)}, nil
}

// SetDefaultPresets makes presets ("@npm" or "npm") the caller's default
// set, added to the allow-list of every box they delegate from now on; an
// empty list clears it. An unknown name is ErrInvalid naming the known
// ones. Audited (presets.default). It returns the set as stored.
func (f *Fleet) SetDefaultPresets(ctx context.Context, caller keys.Actor, presets []string) ([]string, error) {
	if err := need(caller, keys.RightWrite, "set default presets"); err != nil {
		return nil, err
	}
	e := f.entry(caller, "presets.default", caller.User)
	if f.presets == nil {
		err := fmt.Errorf("default presets are not kept on this gateway: %w", ErrUnavailable)
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return nil, err
	}
	refs, err := netpolicy.ParsePresetRefs(presets, true)
	if err != nil {
		err = fmt.Errorf("default presets: %w: %w", err, ErrInvalid)
		f.audit.Finish(ctx, e, err, audit.ResultDenied)
		return nil, f.safeErr(err)
	}
	e.Detail = strings.Join(refs, " ")
	if e.Detail == "" {
		e.Detail = "none"
	}
	if err := f.presets.SetDefaultPresets(ctx, caller.User, refs, f.now(), e); err != nil {
		err = fmt.Errorf("save default presets: %w", err)
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return nil, f.safeErr(err)
	}
	f.audit.Finish(ctx, e, nil, "")
	return refs, nil
}

// userPresets are owner's default presets, as stored (a name sbx no longer
// has is left out).
func (f *Fleet) userPresets(ctx context.Context, owner string) ([]string, error) {
	if f.presets == nil {
		return []string{}, nil
	}
	list, err := f.presets.DefaultPresets(ctx, owner)
	if err != nil {
		return nil, fmt.Errorf("default presets of %s: %w", owner, err)
	}
	out := []string{}
	for _, s := range list {
		if ref, err := netpolicy.ParsePresetRef(s, true); err == nil {
			out = append(out, ref)
		}
	}
	return out, nil
}

// withUserPresets adds owner's default presets to a cleaned allow-list.
func (f *Fleet) withUserPresets(ctx context.Context, owner string, allow []string) ([]string, error) {
	def, err := f.userPresets(ctx, owner)
	if err != nil {
		return nil, err
	}
	if len(def) == 0 {
		return allow, nil
	}
	return cleanAllow(append(allow, def...))
}

// cleanPresetRef is cleanAllow's reading of an entry that starts with @.
func cleanPresetRef(s string) (string, error) {
	ref, err := netpolicy.ParsePresetRef(s, false)
	if err != nil {
		return "", fmt.Errorf("allow-list: %w: %w", err, ErrInvalid)
	}
	return ref, nil
}
