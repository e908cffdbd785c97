package boxnet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
)

// maxUsageJSON bounds the copy of a non-streamed response kept to read its
// usage; the response itself is streamed through whatever its size.
const maxUsageJSON = 16 << 20

// maxSSELine bounds one SSE line kept for parsing; longer lines (big text
// deltas) are passed through and skipped, usage events are small.
const maxSSELine = 1 << 20

// apiError writes an error in the Messages API's shape, so the agent's SDK
// shows the message.
func apiError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Sbx-Denied", msg)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type":  "error",
		"error": map[string]string{"type": typ, "message": msg},
	})
}

// model serves /model/…: the Messages API with the box's key and budget.
func (s *Server) model(w http.ResponseWriter, r *http.Request, st *boxState) {
	ctx := r.Context()
	sub := strings.TrimPrefix(r.URL.Path, "/model")
	d := Decision{Box: st.name, Kind: KindModel, Verdict: Deny, Detail: r.Method + " " + sub}
	deny := func(status int, typ, reason string) {
		d.Reason = reason
		s.audit(ctx, d)
		apiError(w, status, typ, reason)
	}
	if sub != "" && !cleanSubpath(r) {
		deny(http.StatusNotFound, "not_found_error", "sbx: malformed model path")
		return
	}
	if sub == "/api/hello" && (r.Method == http.MethodHead || r.Method == http.MethodGet) {
		// Claude Code's start-up connectivity probe: the gateway answers, the
		// upstream is not involved.
		w.WriteHeader(http.StatusOK)
		return
	}
	if !modelPathAllowed(r.Method, sub) {
		deny(http.StatusForbidden, "permission_error", "sbx: only the Messages API is relayed ("+r.Method+" "+sub+" is not)")
		return
	}
	pol, err := s.cfg.Policy.Box(ctx, st.name)
	if err != nil {
		deny(http.StatusServiceUnavailable, "api_error", "sbx: no policy for box: "+err.Error())
		return
	}
	m := pol.Model
	if m == nil {
		deny(http.StatusNotFound, "not_found_error", "sbx: no model endpoint is configured for box "+st.name)
		return
	}
	up := m.Upstream
	if up == nil {
		up = &url.URL{Scheme: "https", Host: strings.TrimPrefix(DefaultModelUpstream, "https://")}
	}
	fail := func(w http.ResponseWriter, status int, msg string) {
		apiError(w, status, "api_error", "sbx: model "+msg)
	}
	v, ok := s.upstream(ctx, w, &d, up, fail)
	if !ok {
		return
	}
	if m.MaxRequests > 0 && m.Used.Requests >= m.MaxRequests {
		deny(http.StatusTooManyRequests, "rate_limit_error", fmt.Sprintf("sbx: box %s has used its model request budget (%d of %d requests)", st.name, m.Used.Requests, m.MaxRequests))
		return
	}
	if m.MaxTokens > 0 && m.Used.Tokens() >= m.MaxTokens {
		deny(http.StatusTooManyRequests, "rate_limit_error", fmt.Sprintf("sbx: box %s has used its model token budget (%d of %d tokens)", st.name, m.Used.Tokens(), m.MaxTokens))
		return
	}
	if err := s.cfg.Policy.Spend(ctx, st.name, Usage{Requests: 1}); err != nil {
		deny(http.StatusTooManyRequests, "rate_limit_error", "sbx: model budget: "+err.Error())
		return
	}
	d.Verdict, d.Reason = Allow, "within budget"
	s.audit(ctx, d)

	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	target := joinPath(up, sub)
	target.RawQuery = r.URL.RawQuery
	key := m.APIKey
	box := st.name
	s.relay(w, r, relay{d: d, v: v,
		rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = target
			pr.Out.Host = target.Host
			stripCredentials(pr.Out.Header)
			// The transport then asks for and undoes compression itself, so
			// the usage counter reads plain text.
			pr.Out.Header.Del("Accept-Encoding")
			pr.Out.Header.Set("X-Api-Key", key)
		},
		modify: func(resp *http.Response) error {
			ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
			var c usageCounter
			switch ct {
			case "text/event-stream":
				c = &sseUsage{}
			case "application/json":
				c = &jsonUsage{}
			default:
				return nil
			}
			resp.Body = &countingBody{rc: resp.Body, c: c, done: func(u Usage) {
				if u.Tokens() == 0 {
					return
				}
				if err := s.cfg.Policy.Spend(context.WithoutCancel(ctx), box, u); err != nil {
					s.log.Warn("boxnet: recording model usage", "box", box, "err", err)
				}
			}}
			return nil
		},
		fail: fail,
	})
}

// modelPathAllowed reports whether the box may call this API path with the
// operator's key. The key reaches the whole organization (files, batches,
// admin endpoints); a box needs messages, token counting and the model list.
func modelPathAllowed(method, path string) bool {
	switch {
	case method == http.MethodPost && (path == "/v1/messages" || path == "/v1/messages/count_tokens"):
		return true
	case method == http.MethodGet && path == "/v1/models":
		return true
	case method == http.MethodGet && strings.HasPrefix(path, "/v1/models/") && !strings.Contains(path[len("/v1/models/"):], "/"):
		return true
	}
	return false
}

// usageCounter reads usage from a response as it streams by.
type usageCounter interface {
	Write(p []byte)
	Usage() Usage
}

// countingBody feeds everything read to a usageCounter and reports the usage
// once, at EOF or Close, whichever comes first.
type countingBody struct {
	rc   io.ReadCloser
	c    usageCounter
	once sync.Once
	done func(Usage)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.c.Write(p[:n])
	}
	if err != nil {
		b.finish()
	}
	return n, err
}

func (b *countingBody) Close() error {
	b.finish()
	return b.rc.Close()
}

func (b *countingBody) finish() { b.once.Do(func() { b.done(b.c.Usage()) }) }

// apiUsage is the usage object of the Messages API.
type apiUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// merge takes the larger of each count: the API's counts are cumulative
// (message_delta repeats and grows what message_start said).
func (u *Usage) merge(a *apiUsage) {
	if a == nil {
		return
	}
	in := val(a.InputTokens) + val(a.CacheCreationInputTokens) + val(a.CacheReadInputTokens)
	if a.InputTokens != nil || a.CacheCreationInputTokens != nil || a.CacheReadInputTokens != nil {
		u.InputTokens = max(u.InputTokens, in)
	}
	if a.OutputTokens != nil {
		u.OutputTokens = max(u.OutputTokens, *a.OutputTokens)
	}
}

func val(p *int64) int64 {
	if p == nil || *p < 0 {
		return 0
	}
	return *p
}

// jsonUsage keeps a bounded copy of a JSON response and reads its top-level
// usage at the end.
type jsonUsage struct {
	buf      bytes.Buffer
	overflow bool
}

func (j *jsonUsage) Write(p []byte) {
	if j.overflow || j.buf.Len()+len(p) > maxUsageJSON {
		j.overflow = true
		return
	}
	j.buf.Write(p)
}

func (j *jsonUsage) Usage() Usage {
	var u Usage
	if j.overflow {
		return u
	}
	var msg struct {
		Usage *apiUsage `json:"usage"`
	}
	if json.Unmarshal(j.buf.Bytes(), &msg) == nil {
		u.merge(msg.Usage)
	}
	return u
}

// sseUsage parses SSE data lines for message_start and message_delta.
type sseUsage struct {
	line []byte
	skip bool // the current line outgrew maxSSELine
	u    Usage
}

func (s *sseUsage) Write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.add(p)
			return
		}
		s.add(p[:i])
		s.endLine()
		p = p[i+1:]
	}
}

func (s *sseUsage) add(p []byte) {
	if s.skip {
		return
	}
	if len(s.line)+len(p) > maxSSELine {
		s.skip, s.line = true, s.line[:0]
		return
	}
	s.line = append(s.line, p...)
}

func (s *sseUsage) endLine() {
	line := s.line
	s.line, s.skip = s.line[:0], false
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if !bytes.Contains(data, []byte(`"usage"`)) {
		return
	}
	var ev struct {
		Type    string `json:"type"`
		Message *struct {
			Usage *apiUsage `json:"usage"`
		} `json:"message"`
		Usage *apiUsage `json:"usage"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil {
			s.u.merge(ev.Message.Usage)
		}
	case "message_delta":
		s.u.merge(ev.Usage)
	}
}

func (s *sseUsage) Usage() Usage { return s.u }
