package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/keys"
)

// Internal package mirrors (netpolicy.Mirror): an admin's named, audited
// exception to the box network's address policy for one host that
// resolves into a private or reserved range (a company's npm, PyPI or Go
// mirror on 10.x). A mirror opens nothing by itself: a box reaches it only
// when its allow-list names the mirror's host (e.g. `--allow
// npm.corp.example:4873`), and its address is then accepted only inside
// the mirror's declared ranges (netpolicy/mirror.go says which, and how
// loopback and the gateway's own addresses need a range of exactly that
// address).
//
// Two sources: the site's configuration (net.mirrors, admin by
// definition, audited at start with the front "config") and the store,
// where admins add and remove them (net.mirror.add, net.mirror.remove).
// Every user may list them.

// MirrorStore keeps the mirrors admins add.
type MirrorStore interface {
	// Mirrors lists them by name.
	Mirrors(ctx context.Context) ([]MirrorInfo, error)
	// AddMirror adds one, with its audit row in the same transaction;
	// ErrConflict when the name is taken.
	AddMirror(ctx context.Context, m MirrorInfo, rec audit.Entry) error
	// RemoveMirror removes one, with its audit row; ErrNotFound when there
	// is none of that name.
	RemoveMirror(ctx context.Context, name string, rec audit.Entry) error
}

// Sources of a mirror.
const (
	MirrorFromAdmin  = "admin"
	MirrorFromConfig = "config"
)

// MirrorInfo is one mirror as the fronts show it.
type MirrorInfo struct {
	Name string `json:"name"`
	// Host is "HOST[:PORT]", the allow-list entry that grants it.
	Host string `json:"host"`
	// Ranges are the prefixes its addresses may fall in.
	Ranges  []string  `json:"ranges"`
	Source  string    `json:"source"`             // MirrorFromAdmin or MirrorFromConfig
	AddedBy string    `json:"added_by,omitempty"` // the admin (MirrorFromAdmin)
	Created time.Time `json:"created,omitzero"`
}

// mirrorInfo is a parsed mirror as MirrorInfo.
func mirrorInfo(m netpolicy.Mirror, source, by string, at time.Time) MirrorInfo {
	return MirrorInfo{Name: m.Name, Host: m.Entry().String(), Ranges: m.RangeStrings(), Source: source, AddedBy: by, Created: at}
}

// mirrors holds the site's and reads the stored ones.
type mirrors struct {
	store MirrorStore
	site  []netpolicy.Mirror
}

// parseSiteMirrors reads net.mirrors ("NAME HOST[:PORT] RANGE,…" each).
func parseSiteMirrors(specs []string) ([]netpolicy.Mirror, error) {
	var out []netpolicy.Mirror
	seen := map[string]bool{}
	for _, s := range specs {
		m, err := netpolicy.ParseMirrorSpec(s)
		if err != nil {
			return nil, err
		}
		if seen[m.Name] {
			return nil, fmt.Errorf("mirror %s is declared twice", m.Name)
		}
		seen[m.Name] = true
		out = append(out, m)
	}
	return out, nil
}

// list is every mirror, the site's first. A stored mirror that no longer
// parses (or shadows a site mirror's name) is left out: it grants nothing.
func (ms *mirrors) list(ctx context.Context) ([]MirrorInfo, []netpolicy.Mirror, error) {
	infos := make([]MirrorInfo, 0, len(ms.site))
	parsed := make([]netpolicy.Mirror, 0, len(ms.site))
	seen := map[string]bool{}
	for _, m := range ms.site {
		infos = append(infos, mirrorInfo(m, MirrorFromConfig, "", time.Time{}))
		parsed = append(parsed, m)
		seen[m.Name] = true
	}
	if ms.store == nil {
		return infos, parsed, nil
	}
	stored, err := ms.store.Mirrors(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("mirrors: %w", err)
	}
	for _, s := range stored {
		m, err := netpolicy.ParseMirror(s.Name, s.Host, s.Ranges)
		if err != nil || seen[m.Name] {
			continue
		}
		seen[m.Name] = true
		infos = append(infos, mirrorInfo(m, MirrorFromAdmin, s.AddedBy, s.Created))
		parsed = append(parsed, m)
	}
	return infos, parsed, nil
}

// grantMirrors are the mirrors the box network applies (every box's: a
// mirror opens nothing a box's allow-list does not name).
func (ms *mirrors) grantMirrors(ctx context.Context) ([]netpolicy.Mirror, error) {
	_, parsed, err := ms.list(ctx)
	return parsed, err
}

// Mirrors lists the internal package mirrors, the site's (net.mirrors)
// and the admins'; every user may read them.
func (f *Fleet) Mirrors(ctx context.Context, caller keys.Actor) ([]MirrorInfo, error) {
	if err := need(caller, keys.RightRead, "mirrors"); err != nil {
		return nil, err
	}
	infos, _, err := f.mirrors.list(ctx)
	return infos, f.safeErr(err)
}

// AddMirror declares an internal package mirror (admins only): name, its
// HOST[:PORT] and the ranges (CIDR or address) its addresses may fall in;
// a host that is an address needs none (it is its own range), a DNS name
// does. Invalid input is ErrInvalid, a taken name ErrConflict. Audited
// (net.mirror.add, the declaration in the detail).
func (f *Fleet) AddMirror(ctx context.Context, caller keys.Actor, name, host string, ranges []string) (MirrorInfo, error) {
	if err := need(caller, keys.RightWrite, "add a mirror"); err != nil {
		return MirrorInfo{}, err
	}
	e := f.entry(caller, "net.mirror.add", name)
	fail := func(err error, result string) (MirrorInfo, error) {
		f.audit.Finish(ctx, e, err, result)
		return MirrorInfo{}, f.safeErr(err)
	}
	if caller.Role != keys.RoleAdmin {
		return fail(fmt.Errorf("mirrors are set by admins: %w", ErrForbidden), audit.ResultDenied)
	}
	if f.mirrors.store == nil {
		return fail(fmt.Errorf("mirrors are not kept on this gateway: %w", ErrUnavailable), audit.ResultError)
	}
	m, err := netpolicy.ParseMirror(name, host, ranges)
	if err != nil {
		return fail(fmt.Errorf("mirror: %w: %w", err, ErrInvalid), audit.ResultDenied)
	}
	e.Target = m.Name
	e.Detail = m.Entry().String() + " ranges " + strings.Join(m.RangeStrings(), ",")
	for _, s := range f.mirrors.site {
		if s.Name == m.Name {
			return fail(fmt.Errorf("mirror %s is declared in the configuration (net.mirrors): %w", m.Name, ErrConflict), audit.ResultDenied)
		}
	}
	info := mirrorInfo(m, MirrorFromAdmin, caller.User, f.now().UTC())
	if err := f.mirrors.store.AddMirror(ctx, info, e); err != nil {
		result := audit.ResultError
		if errors.Is(err, ErrConflict) {
			err = fmt.Errorf("mirror %s exists (remove it first): %w", m.Name, ErrConflict)
			result = audit.ResultDenied
		}
		return fail(err, result)
	}
	f.audit.Finish(ctx, e, nil, "")
	return info, nil
}

// RemoveMirror removes an admin's mirror (admins only); boxes that name
// its host are refused its private addresses from their next request. A
// mirror of the configuration is removed there. Audited
// (net.mirror.remove).
func (f *Fleet) RemoveMirror(ctx context.Context, caller keys.Actor, name string) error {
	if err := need(caller, keys.RightWrite, "remove a mirror"); err != nil {
		return err
	}
	e := f.entry(caller, "net.mirror.remove", name)
	fail := func(err error, result string) error {
		f.audit.Finish(ctx, e, err, result)
		return f.safeErr(err)
	}
	if caller.Role != keys.RoleAdmin {
		return fail(fmt.Errorf("mirrors are set by admins: %w", ErrForbidden), audit.ResultDenied)
	}
	n, err := netpolicy.ParseMirrorName(name)
	if err != nil {
		return fail(fmt.Errorf("mirror: %w: %w", err, ErrInvalid), audit.ResultDenied)
	}
	e.Target = n
	for _, s := range f.mirrors.site {
		if s.Name == n {
			return fail(fmt.Errorf("mirror %s is declared in the configuration (net.mirrors): remove it there: %w", n, ErrConflict), audit.ResultDenied)
		}
	}
	if f.mirrors.store == nil {
		return fail(fmt.Errorf("no mirror %s: %w", n, ErrNotFound), audit.ResultDenied)
	}
	if err := f.mirrors.store.RemoveMirror(ctx, n, e); err != nil {
		result := audit.ResultError
		if errors.Is(err, ErrNotFound) {
			err = fmt.Errorf("no mirror %s: %w", n, ErrNotFound)
			result = audit.ResultDenied
		}
		return fail(err, result)
	}
	f.audit.Finish(ctx, e, nil, "")
	return nil
}

// auditSiteMirrors records the configuration's mirrors at start: the
// exception they make is the site's, and the log says it was in force.
func (f *Fleet) auditSiteMirrors(ctx context.Context) {
	for _, m := range f.mirrors.site {
		e := audit.Entry{Time: f.now().UTC(), Actor: "sbx", Front: "config", Action: "net.mirror.add", Target: m.Name,
			Result: audit.ResultOK, Detail: "net.mirrors: " + m.Entry().String() + " ranges " + strings.Join(m.RangeStrings(), ",")}
		if err := f.audit.Record(ctx, e); err != nil {
			f.log.Warn("audit of net.mirrors", "mirror", m.Name, "err", err)
		}
	}
}
