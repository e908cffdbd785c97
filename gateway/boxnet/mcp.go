package boxnet

import (
	"net/http"
	"net/http/httputil"
	"strings"
)

// mcp serves /mcp/NAME[/…]: an operator-configured MCP server (Streamable
// HTTP) with its secret headers added. Responses, SSE included, stream
// through unbuffered.
func (s *Server) mcp(w http.ResponseWriter, r *http.Request, st *boxState) {
	ctx := r.Context()
	rest := strings.TrimPrefix(r.URL.Path, "/mcp/")
	name, sub, _ := strings.Cut(rest, "/")
	if sub != "" {
		sub = "/" + sub
	}
	d := Decision{Box: st.name, Kind: KindMCP, Verdict: Deny, Detail: r.Method + " " + name}
	deny := func(reason string) {
		d.Reason = reason
		s.audit(ctx, d)
		http.Error(w, "sbx mcp: "+reason, http.StatusNotFound)
	}
	if name == "" || (sub != "" && !cleanSubpath(r)) {
		deny("malformed path")
		return
	}
	pol, err := s.cfg.Policy.Box(ctx, st.name)
	if err != nil {
		deny("no policy for box: " + err.Error())
		return
	}
	route, ok := pol.MCP[name]
	if !ok || route.URL == nil {
		deny("no MCP server " + name + " for this box")
		return
	}
	fail := func(w http.ResponseWriter, status int, msg string) { http.Error(w, "sbx mcp: "+msg, status) }
	v, ok := s.upstream(ctx, w, &d, route.URL, fail)
	if !ok {
		return
	}
	d.Verdict, d.Reason = Allow, "configured MCP server"
	s.audit(ctx, d)

	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	target := joinPath(route.URL, sub)
	switch {
	case route.URL.RawQuery == "":
		target.RawQuery = r.URL.RawQuery
	case r.URL.RawQuery != "":
		target.RawQuery = route.URL.RawQuery + "&" + r.URL.RawQuery
	}
	s.relay(w, r, relay{d: d, v: v,
		rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = target
			pr.Out.Host = target.Host
			stripCredentials(pr.Out.Header)
			for k, v := range route.Headers {
				pr.Out.Header.Set(k, v)
			}
		},
		modify: func(resp *http.Response) error {
			resp.Header.Del("WWW-Authenticate")
			return nil
		},
		fail: fail,
	})
}
