package boxnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"

	"sbx.dev/sbx/internal/netpolicy"
)

// upstreamKey carries a request's checked upstream (an egressVerdict) to
// the transport's dial.
type upstreamKey struct{}

// checkUpstream resolves the host of an upstream URL once and checks every
// address under the egress policy, the operator's trusted private upstreams
// excepted. The relay then dials only what it let through.
func (s *Server) checkUpstream(ctx context.Context, u *url.URL) egressVerdict {
	v := egressVerdict{host: netpolicy.Host(u.Hostname()), port: netpolicy.URLPort(u)}
	switch {
	case v.host == "":
		v.host, v.reason = u.Hostname(), "malformed upstream host"
		return v
	case v.port == 0:
		v.reason = "invalid upstream port"
		return v
	}
	s.resolve(ctx, &v, s.cfg.PrivateUpstreams)
	return v
}

// failFunc writes an error in an endpoint's shape.
type failFunc func(w http.ResponseWriter, status int, msg string)

// upstream checks the upstream u of a request decided by d. When it is
// refused it audits d and answers with fail (403 when the policy forbids
// its address, 502 when it did not resolve) and returns false; else it
// fills in d's destination.
func (s *Server) upstream(ctx context.Context, w http.ResponseWriter, d *Decision, u *url.URL, fail failFunc) (egressVerdict, bool) {
	v := s.checkUpstream(ctx, u)
	d.Host, d.Port = v.host, v.port
	if len(v.addrs) > 0 {
		d.Addr = v.addrs[0].String()
	}
	if v.ok {
		return v, true
	}
	d.Verdict, d.Reason = Deny, "upstream refused: "+v.reason
	s.audit(ctx, *d)
	if v.unresolved {
		fail(w, http.StatusBadGateway, "upstream "+v.reason)
	} else {
		fail(w, http.StatusForbidden, "upstream refused: "+v.reason)
	}
	return v, false
}

// dialUpstream is the upstream transport's dial: only to the addresses the
// request's check let through, and only for the host:port it checked.
func (s *Server) dialUpstream(ctx context.Context, _, addr string) (net.Conn, error) {
	v, ok := ctx.Value(upstreamKey{}).(egressVerdict)
	if !ok {
		return nil, fmt.Errorf("boxnet: dial %s: no checked upstream", addr)
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil || netpolicy.Host(h) != v.host || p != strconv.Itoa(v.port) {
		return nil, fmt.Errorf("boxnet: dial %s: the check was for %s:%d", addr, v.host, v.port)
	}
	c, _, err := s.dialChecked(ctx, v)
	return c, err
}

// redirectError is an upstream's redirect, which the relay never follows.
type redirectError struct {
	status int
	to     string // scheme://host of the Location, for the audit
}

func (e *redirectError) Error() string {
	return fmt.Sprintf("upstream answered %d, a redirect to %s", e.status, e.to)
}

// relay is one request to a checked upstream.
type relay struct {
	// d is the request's decision, audited again (refused) when the
	// upstream answers with a redirect.
	d Decision
	// v is the checked upstream the transport dials.
	v       egressVerdict
	rewrite func(*httputil.ProxyRequest)
	// modify, when set, sees every response but a refused redirect.
	modify func(*http.Response) error
	fail   failFunc
}

// relay forwards r to the upstream rl checked, streaming the response.
// Set-Cookie never reaches the box, and a redirect is refused with 502: the
// gateway follows none, and passing one on would hand the box the
// upstream's own URL.
func (s *Server) relay(w http.ResponseWriter, r *http.Request, rl relay) {
	rp := &httputil.ReverseProxy{
		Rewrite:       rl.rewrite,
		Transport:     s.transport,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.StatusCode != http.StatusNotModified {
				to := "nowhere"
				if loc, err := resp.Location(); err == nil {
					to = (&url.URL{Scheme: loc.Scheme, Host: loc.Host}).String()
				}
				return &redirectError{status: resp.StatusCode, to: to}
			}
			resp.Header.Del("Set-Cookie")
			if rl.modify != nil {
				return rl.modify(resp)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if re, ok := errors.AsType[*redirectError](err); ok {
				d := rl.d
				d.Verdict, d.Reason = Deny, re.Error()+"; the gateway follows no redirect"
				s.audit(req.Context(), d)
				rl.fail(w, http.StatusBadGateway, fmt.Sprintf("upstream answered %d (a redirect), which the gateway does not follow: the configured URL should be the one that answers", re.status))
				return
			}
			s.log.Info("boxnet: upstream failed", "box", rl.d.Box, "kind", rl.d.Kind, "host", rl.v.host, "err", err)
			rl.fail(w, http.StatusBadGateway, "upstream unreachable")
		},
	}
	rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), upstreamKey{}, rl.v)))
}
