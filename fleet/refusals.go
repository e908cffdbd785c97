package fleet

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
)

// What the box network refused while a step of a box's start ran: npm,
// pip or go print "403 Forbidden" and nothing of the proxy's reason, so a
// failed setup or install step says which hosts the box network refused
// and why ("127.0.0.1 is a loopback address": the address policy's), read
// back from the decisions' audit rows (net.egress) of the box.

// EgressAuditDetail is the detail of the audit row of a box network
// decision: the box, what was asked (a method, CONNECT), the reason, and
// the address when one was resolved. The gateway writes it; the core
// reads refusals back with it (refusedDuring).
func EgressAuditDetail(box, what, reason, addr string) string {
	d := fmt.Sprintf("box=%s %s %s", box, what, reason)
	if addr != "" {
		d += " addr=" + addr
	}
	return d
}

// addressPolicy reports whether reason is the address policy's
// (netpolicy.Refused: "127.0.0.1 is a loopback address"), not the
// allow-list's.
func addressPolicy(reason string) bool {
	a, rest, _ := strings.Cut(reason, " ")
	_, err := netip.ParseAddr(a)
	return err == nil && strings.HasPrefix(rest, "is a")
}

// maxRefusalsNamed bounds how many refused hosts a failure names.
const maxRefusalsNamed = 3

// refusedDuring says which hosts the box network refused box (owned by
// owner) since began, each once with its reason: "" when none (or when the
// audit log cannot be read: this only explains a failure).
func (f *Fleet) refusedDuring(ctx context.Context, box, owner string, began time.Time) string {
	rows, err := f.audit.List(ctx, audit.Filter{User: owner, Since: began, Limit: audit.MaxLimit})
	if err != nil {
		f.log.Warn("read the box network's refusals", "box", box, "err", err)
		return ""
	}
	prefix := "box=" + box + " "
	seen := map[string]bool{}
	var named []string
	more := 0
	for i := len(rows) - 1; i >= 0; i-- { // oldest first
		r := rows[i]
		rest, ok := strings.CutPrefix(r.Detail, prefix)
		if r.Action != "net.egress" || r.Result != audit.ResultDenied || !ok || seen[r.Target] {
			continue
		}
		seen[r.Target] = true
		_, reason, _ := strings.Cut(rest, " ")
		if i := strings.LastIndex(reason, " addr="); i >= 0 {
			reason = reason[:i]
		}
		if len(named) == maxRefusalsNamed {
			more++
			continue
		}
		reason = strings.TrimSpace(reason)
		if addressPolicy(reason) {
			reason = "the address policy: " + reason
		}
		named = append(named, r.Target+" ("+reason+")")
	}
	if len(named) == 0 {
		return ""
	}
	s := "the box network refused " + strings.Join(named, ", ")
	if more > 0 {
		s += fmt.Sprintf(" and %d more host(s)", more)
	}
	return s
}
