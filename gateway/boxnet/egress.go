package boxnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"sbx.dev/sbx/internal/netpolicy"
)

// egressVerdict is the outcome of deciding one destination: an egress
// destination or an upstream.
type egressVerdict struct {
	host   string       // normalized
	port   int          // 1..65535
	addrs  []netip.Addr // every address checked, in dial order
	reason string       // why allowed, or why refused
	ok     bool
	// unresolved: refused because the name did not resolve (an upstream
	// that is down, not one the policy forbids).
	unresolved bool
	// all is every address the name resolved to (addrs keeps only the
	// refused one on a refusal).
	all []netip.Addr
}

// decideEgress checks a destination against the box's policy and the
// forbidden ranges. A name not on the allow-list, or a port the list does
// not open, is refused before any DNS lookup, so a box cannot use the
// gateway's resolver as a channel either. Every address the name resolves
// to must pass: a name that mixes public and private answers is refused.
func (s *Server) decideEgress(ctx context.Context, box, rawHost string, port int) egressVerdict {
	v := egressVerdict{host: netpolicy.Host(rawHost), port: port}
	if v.host == "" {
		v.host = rawHost
		v.reason = "malformed host name"
		return v
	}
	if port < 1 || port > 65535 {
		v.reason = "invalid port"
		return v
	}
	pol, err := s.cfg.Policy.Box(ctx, box)
	if err != nil {
		v.reason = "no policy for box: " + err.Error()
		return v
	}
	listed, open := netpolicy.Admit(pol.AllowDomains, v.host, port)
	if !pol.Open && !listed {
		v.reason = "not on the box's allow-list"
		return v
	}
	if !open && !(pol.Open && netpolicy.DefaultPort(port)) {
		v.reason = fmt.Sprintf("port %d is not open for %s: the allow-list opens ports 80 and 443, other ports only by an entry naming them (%s)",
			port, v.host, netpolicy.Entry{Host: v.host, Port: port})
		return v
	}
	s.resolve(ctx, &v, s.cfg.EgressTrust)
	if !v.ok && !v.unresolved && listed && len(pol.Mirrors) > 0 {
		s.mirrorException(&v, pol.Mirrors)
		return v
	}
	if v.ok {
		v.reason = "open mode"
		if listed {
			v.reason = "on the box's allow-list"
		}
	}
	return v
}

// resolve resolves v.host once (an IP literal is its own answer) and checks
// every answer: v.ok when all pass, else v.reason names the first that did
// not (and v.addrs holds only it). trusted are the forbidden addresses that
// pass all the same.
func (s *Server) resolve(ctx context.Context, v *egressVerdict, trusted []netpolicy.Trust) {
	if a, err := netip.ParseAddr(v.host); err == nil {
		v.addrs = []netip.Addr{a}
	} else {
		lctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
		addrs, err := s.cfg.Resolver.LookupNetIP(lctx, "ip", v.host)
		cancel()
		if err != nil {
			v.reason, v.unresolved = "cannot resolve: "+err.Error(), true
			return
		}
		if len(addrs) == 0 {
			v.reason, v.unresolved = "cannot resolve: no addresses", true
			return
		}
		v.addrs = preferV4(addrs)
	}
	v.all = v.addrs
	for _, a := range v.addrs {
		if r := netpolicy.Refused(netip.AddrPortFrom(a, uint16(v.port)), trusted); r != "" {
			v.reason = r
			v.addrs = []netip.Addr{a}
			return
		}
	}
	v.ok = true
}

// preferV4 orders IPv4 addresses first: the gateway host may well have no
// IPv6 route.
func preferV4(addrs []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if a.Unmap().Is4() {
			out = append(out, a.Unmap())
		}
	}
	for _, a := range addrs {
		if !a.Unmap().Is4() {
			out = append(out, a)
		}
	}
	return out
}

// dialChecked dials the checked addresses in order: never the name again, so
// a second DNS answer cannot redirect the connection.
func (s *Server) dialChecked(ctx context.Context, v egressVerdict) (net.Conn, netip.AddrPort, error) {
	if !v.ok {
		return nil, netip.AddrPort{}, fmt.Errorf("boxnet: %s was refused: %s", v.host, v.reason)
	}
	var errs []error
	for _, a := range v.addrs {
		ap := netip.AddrPortFrom(a, uint16(v.port))
		dctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
		c, err := s.cfg.Dial(dctx, "tcp", ap.String())
		cancel()
		if err == nil {
			return c, ap, nil
		}
		errs = append(errs, err)
	}
	return nil, netip.AddrPort{}, errors.Join(errs...)
}

func (v egressVerdict) decision(box, detail string) Decision {
	d := Decision{Box: box, Kind: KindEgress, Host: v.host, Port: v.port, Verdict: Deny, Reason: v.reason, Detail: detail}
	if v.ok {
		d.Verdict = Allow
	}
	if len(v.addrs) > 0 {
		d.Addr = v.addrs[0].String()
	}
	return d
}

// acquire takes one of the box's tunnel slots.
func (st *boxState) acquire() bool {
	select {
	case st.tunnels <- struct{}{}:
		return true
	default:
		return false
	}
}

func (st *boxState) release() { <-st.tunnels }

func denyEgress(w http.ResponseWriter, status int, reason string) {
	w.Header().Set("X-Sbx-Denied", reason)
	http.Error(w, "sbx egress refused: "+reason, status)
}

// connect serves HTTP CONNECT: a raw tunnel to a checked address.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, st *boxState) {
	ctx := r.Context()
	host, portStr, err := net.SplitHostPort(r.Host)
	if err != nil {
		s.audit(ctx, Decision{Box: st.name, Kind: KindEgress, Host: r.Host, Verdict: Deny, Reason: "CONNECT target is not host:port", Detail: "CONNECT"})
		denyEgress(w, http.StatusBadRequest, "CONNECT target is not host:port")
		return
	}
	port, _ := strconv.Atoi(portStr)
	if !st.acquire() {
		s.audit(ctx, Decision{Box: st.name, Kind: KindEgress, Host: host, Port: port, Verdict: Deny, Reason: "too many concurrent connections", Detail: "CONNECT"})
		denyEgress(w, http.StatusTooManyRequests, "too many concurrent connections")
		return
	}
	defer st.release()
	v := s.decideEgress(ctx, st.name, host, port)
	if !v.ok {
		s.audit(ctx, v.decision(st.name, "CONNECT"))
		denyEgress(w, http.StatusForbidden, v.reason)
		return
	}
	up, ap, err := s.dialChecked(ctx, v)
	d := v.decision(st.name, "CONNECT")
	if err != nil {
		d.Detail = "CONNECT; dial failed: " + err.Error()
		s.audit(ctx, d)
		http.Error(w, "sbx egress: cannot connect to "+v.host, http.StatusBadGateway)
		return
	}
	d.Addr = ap.Addr().String()
	s.audit(ctx, d)
	defer up.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "sbx egress: CONNECT needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		s.log.Warn("boxnet: hijack", "box", st.name, "err", err)
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent right after the CONNECT header (a TLS hello)
	// may already sit in the server's read buffer.
	var client io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 {
		client = io.MultiReader(io.LimitReader(brw.Reader, int64(n)), conn)
	}
	pipe(ctx, conn, client, up, s.cfg.IdleTimeout)
}

// pipe copies both ways until both directions end, ctx ends, or nothing
// moves for idle.
func pipe(ctx context.Context, client net.Conn, clientR io.Reader, up net.Conn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	touch := func() { last.Store(time.Now().UnixNano()) }
	var wg sync.WaitGroup
	copyHalf := func(dst net.Conn, src io.Reader) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				touch()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go copyHalf(up, clientR)
	go copyHalf(client, up)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(max(idle/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			client.Close()
			up.Close()
			<-done
			return
		case <-tick.C:
			if time.Since(time.Unix(0, last.Load())) > idle {
				client.Close()
				up.Close()
				<-done
				return
			}
		}
	}
}

// forward serves an absolute-form plain HTTP request (HTTP_PROXY clients).
func (s *Server) forward(w http.ResponseWriter, r *http.Request, st *boxState) {
	ctx := r.Context()
	if r.URL.Scheme != "http" {
		s.audit(ctx, Decision{Box: st.name, Kind: KindEgress, Host: r.URL.Host, Verdict: Deny, Reason: "only http:// URLs are proxied; use CONNECT for https", Detail: r.Method})
		denyEgress(w, http.StatusBadRequest, "only http:// URLs are proxied; use CONNECT for https")
		return
	}
	port := 80
	if p := r.URL.Port(); p != "" {
		var err error
		if port, err = strconv.Atoi(p); err != nil {
			port = 0
		}
	}
	if !st.acquire() {
		s.audit(ctx, Decision{Box: st.name, Kind: KindEgress, Host: r.URL.Hostname(), Port: port, Verdict: Deny, Reason: "too many concurrent connections", Detail: r.Method})
		denyEgress(w, http.StatusTooManyRequests, "too many concurrent connections")
		return
	}
	defer st.release()
	v := s.decideEgress(ctx, st.name, r.URL.Hostname(), port)
	d := v.decision(st.name, r.Method)
	s.audit(ctx, d)
	if !v.ok {
		denyEgress(w, http.StatusForbidden, v.reason)
		return
	}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, _, err := s.dialChecked(ctx, v)
			return c, err
		},
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: int64(s.cfg.MaxHeaderBytes),
		ResponseHeaderTimeout:  s.cfg.IdleTimeout,
	}
	defer tr.CloseIdleConnections()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.Host = r.Host
			pr.Out.RequestURI = ""
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      nil,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			s.log.Info("boxnet: egress upstream failed", "box", st.name, "host", v.host, "err", err)
			http.Error(w, "sbx egress: upstream failed: "+v.host, http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}
