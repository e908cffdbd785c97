package boxnet

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
)

// maxDrain bounds how much of a refused push's pack the gateway reads (and
// discards) so the git client sees the refusal instead of a broken pipe.
const maxDrain = 1 << 30

// git serves /git/BOX/REPO(.git)/{info/refs,git-upload-pack,git-receive-pack}.
func (s *Server) git(w http.ResponseWriter, r *http.Request, st *boxState) {
	ctx := r.Context()
	d := Decision{Box: st.name, Kind: KindGit, Verdict: Deny}
	notFound := func(reason string) {
		d.Reason = reason
		s.audit(ctx, d)
		http.Error(w, "Repository not found.", http.StatusNotFound)
	}
	rest := strings.TrimPrefix(r.URL.Path, "/git/")
	box, rest, _ := strings.Cut(rest, "/")
	d.Detail = r.Method + " " + r.URL.Path
	if !cleanSubpath(r) {
		notFound("malformed path")
		return
	}
	if box != st.name {
		notFound("path names box " + strconv.Quote(box) + ", not the caller")
		return
	}
	var service, sub string
	switch {
	case strings.HasSuffix(rest, "/info/refs") && r.Method == http.MethodGet:
		sub = "/info/refs"
		service = r.URL.Query().Get("service")
		if service != "git-upload-pack" && service != "git-receive-pack" {
			notFound("only smart HTTP is served (info/refs without a service)")
			return
		}
	case strings.HasSuffix(rest, "/git-upload-pack") && r.Method == http.MethodPost:
		sub, service = "/git-upload-pack", "git-upload-pack"
	case strings.HasSuffix(rest, "/git-receive-pack") && r.Method == http.MethodPost:
		sub, service = "/git-receive-pack", "git-receive-pack"
	default:
		notFound("not a smart HTTP request")
		return
	}
	repo := strings.TrimSuffix(strings.TrimSuffix(rest, sub), ".git")
	d.Detail = service + " " + repo
	pol, err := s.cfg.Policy.Box(ctx, st.name)
	if err != nil {
		notFound("no policy for box: " + err.Error())
		return
	}
	route, ok := pol.Repos[repo]
	if !ok || route.Upstream == nil {
		notFound("repository not delegated to this box")
		return
	}
	fail := func(w http.ResponseWriter, status int, msg string) { http.Error(w, "sbx git: "+msg, status) }
	v, ok := s.upstream(ctx, w, &d, route.Upstream, fail)
	if !ok {
		return
	}

	if sub == "/git-receive-pack" {
		body, decompressed, err := requestBody(r)
		if err != nil {
			d.Reason = "unreadable push: " + err.Error()
			s.audit(ctx, d)
			http.Error(w, "sbx git: "+err.Error(), http.StatusBadRequest)
			return
		}
		push, err := parsePush(body)
		if err != nil {
			d.Reason = "malformed push: " + err.Error()
			s.audit(ctx, d)
			_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
			w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
			_ = refusePush(w, push, nil, "sbx: push refused: "+err.Error())
			return
		}
		refs := make([]string, 0, len(push.Commands))
		reasons := map[string]string{}
		for _, c := range push.Commands {
			refs = append(refs, c.Ref)
			if !refAllowed(c.Ref, route.PushBranches) {
				reasons[c.Ref] = "sbx: not a branch this box may push to"
			}
		}
		d.Detail = service + " " + repo + " " + strings.Join(refs, ",")
		if len(reasons) > 0 {
			d.Reason = "push outside the delegated branches"
			s.audit(ctx, d)
			_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
			w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
			w.Header().Set("Cache-Control", "no-cache")
			_ = refusePush(w, push, reasons, pushRefusal(st.name, repo, push, reasons, route.PushBranches))
			return
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(push.Raw), body), r.Body}
		if decompressed {
			// Decompressed: the length is unknown, send it chunked.
			r.Header.Del("Content-Encoding")
			r.Header.Del("Content-Length")
			r.ContentLength = -1
		}
	}
	d.Verdict, d.Reason = Allow, "delegated repository"
	s.audit(ctx, d)

	target := joinPath(route.Upstream, sub)
	if sub == "/info/refs" {
		target.RawQuery = url.Values{"service": {service}}.Encode()
	} else {
		target.RawQuery = ""
	}
	token := route.Token
	s.relay(w, r, relay{d: d, v: v,
		rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = target
			pr.Out.Host = target.Host
			keep := http.Header{}
			for _, k := range []string{"Content-Type", "Content-Encoding", "Accept", "Accept-Encoding", "Git-Protocol", "User-Agent", "Pragma"} {
				if v := pr.In.Header.Values(k); len(v) > 0 {
					keep[k] = v
				}
			}
			pr.Out.Header = keep
			if token != "" {
				pr.Out.SetBasicAuth("x-access-token", token)
			}
		},
		modify: func(resp *http.Response) error {
			resp.Header.Del("WWW-Authenticate")
			if resp.StatusCode == http.StatusUnauthorized {
				// The box cannot fix the gateway's credentials; a 401 would
				// only make its git ask for a password.
				resp.StatusCode = http.StatusBadGateway
				resp.Status = ""
			}
			return nil
		},
		fail: fail,
	})
}

// pushRefusal is the message the git client prints as "remote: …".
func pushRefusal(box, repo string, p pushRequest, reasons map[string]string, allowed []string) string {
	var b strings.Builder
	for _, c := range p.Commands {
		if _, bad := reasons[c.Ref]; bad {
			fmt.Fprintf(&b, "sbx: box %s may not push to %s in %s\n", box, c.Ref, repo)
		}
	}
	if len(allowed) == 0 {
		b.WriteString("sbx: this box may not push to this repository\n")
	} else {
		fmt.Fprintf(&b, "sbx: allowed branches: %s\n", strings.Join(allowed, ", "))
	}
	return b.String()
}

// requestBody is the request body, decompressed when the client sent it
// gzip-encoded (git does for large fetch negotiations; a push may too).
func requestBody(r *http.Request) (body io.Reader, decompressed bool, err error) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return r.Body, false, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, false, fmt.Errorf("gzip body: %w", err)
		}
		return zr, true, nil
	default:
		return nil, false, fmt.Errorf("unsupported Content-Encoding %q", enc)
	}
}
