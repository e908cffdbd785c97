package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/gateway/config"
	"sbx.dev/sbx/gateway/web"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// The access matrix: every registered HTTP route, SSH command and
// subsystem, and MCP tool and resource, called with every kind of
// credential against a real gateway holding a real box. A route, command or
// tool registered without an entry here fails the test, so the next one
// cannot skip the question of who may call it.

// outcome is the class of an answer.
type outcome string

const (
	ok        outcome = "ok"        // done (2xx/3xx; exit 0; no tool error)
	unauth    outcome = "unauth"    // not authenticated (401 or to /login; ssh refuses the key)
	forbidden outcome = "forbidden" // authenticated, not allowed (403; admins only; scope)
	notFound  outcome = "notfound"  // another user's thing answers like a missing one
	invalid   outcome = "invalid"   // authenticated and allowed, the input or state refused (400/409/422)
)

// credential kinds, in the order the issue names them.
const (
	credNone      = "none"
	credMalformed = "malformed"
	credRevoked   = "revoked"
	credExpired   = "expired"
	credRead      = "read-key"
	credOther     = "other-user"
	credRight     = "right"
)

var httpCreds = []string{credNone, credMalformed, credRevoked, credExpired, credRead, credOther, credRight}

// matrix is the fixture: alice owns the box, bob is another operator, ada
// an admin (the right credential for admin-only routes).
type matrix struct {
	t       *testing.T
	g       *boxGateway
	box     string
	httpURL string
	sshPort string
	ada     keys.Actor
	bob     keys.Actor

	// API keys by credential kind; adminKey is ada's.
	apiKey   map[string]string
	adminKey string
	// Console session cookies by credential kind; adminSession is ada's.
	session      map[string]*http.Cookie
	adminSession *http.Cookie
	// SSH private key files by credential kind; adminSSH is ada's.
	sshKey   map[string]string
	adminSSH string
	// adminMCP is ada's MCP session: admin tools' right call.
	adminMCP *sdk.ClientSession

	// Things a right call may consume, made for it.
	victimKey     keys.APIKey // alice's, revoked by the right call
	victimSession string
	coverage      map[string]map[string]string // row → credential → outcome
	calls         int
	open          map[string]outcome // what an open route answered first
}

func TestAccessMatrix(t *testing.T) {
	g := newBoxGatewayWith(t, nil, func(c *config.Config) {
		c.HTTP.MetricsAuth = true
		c.Web.PreviewAddr = "127.0.0.1:0" // the box page's preview form redirects there
		// The matrix fails authentication on purpose hundreds of times; the
		// throttle has its own tests.
		c.Auth.ThrottleAttempts = 1 << 20
	})
	ctx := context.Background()
	if err := g.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	m := &matrix{t: t, g: g, open: map[string]outcome{}, coverage: map[string]map[string]string{}, apiKey: map[string]string{}, session: map[string]*http.Cookie{}, sshKey: map[string]string{}}
	m.httpURL = "http://" + g.s.HTTPAddr().String()
	_, m.sshPort, _ = net.SplitHostPort(g.s.SSHAddr().String())
	m.setUp(ctx)
	// Each front's right credential ends by destroying the box (and the
	// console's by logging out): each gets a fresh box and fresh things to
	// revoke.
	for _, front := range []struct {
		name string
		run  func(*testing.T)
	}{{"http", m.httpMatrix}, {"mcp", m.mcpMatrix}, {"ssh", m.sshMatrix}} {
		m.prepare(ctx)
		t.Run(front.name, front.run)
	}
	// The table goes to the test's standard output, so `go tool -modfile=tools/go.mod task test`
	// shows it even when the test passes.
	fmt.Print(m.table())
}

// cover records what cred got from row.
func (m *matrix) cover(row, cred, got string) {
	if m.coverage[row] == nil {
		m.coverage[row] = map[string]string{}
	}
	m.coverage[row][cred] = got
	m.calls++
}

// table renders the coverage: one row per route, command or tool, one
// column per credential ("ok 200", "unauth 401", "notfound 3"…; "-" where
// a credential does not apply to the front).
func (m *matrix) table() string {
	cols := []string{credNone, credMalformed, credRevoked, credExpired, "disabled-user", credRead, credOther, credRight}
	rows := make([]string, 0, len(m.coverage))
	for r := range m.coverage {
		rows = append(rows, r)
	}
	sort.Strings(rows)
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "access matrix: %d rows, %d calls\nroute, command or tool\t%s\n", len(rows), m.calls, strings.Join(cols, "\t"))
	for _, r := range rows {
		cells := make([]string, len(cols))
		for i, c := range cols {
			if cells[i] = m.coverage[r][c]; cells[i] == "" {
				cells[i] = "-"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\n", r, strings.Join(cells, "\t"))
	}
	tw.Flush()
	return b.String()
}

// setUp makes the users and every credential.
func (m *matrix) setUp(ctx context.Context) {
	t, svc := m.t, m.g.s.keys
	cli := keys.Actor{User: "test", Role: keys.RoleAdmin, Front: keys.FrontCLI}
	alice := m.g.alice
	m.bob = keys.Actor{User: "bob", Role: keys.RoleOperator, Front: "test"}
	m.ada = keys.Actor{User: "ada", Role: keys.RoleAdmin, Front: "test"}
	newSSHKey := func(string) (file, authorized string) {
		file, signer := testutil.OpenSSHKey(t)
		return file, string(gossh.MarshalAuthorizedKey(signer.PublicKey()))
	}
	// SSH: alice's own key, a removed key of hers, an unknown key, bob's,
	// a disabled user's, ada's.
	var pub string
	m.sshKey[credRight], pub = newSSHKey("alice")
	if _, err := svc.AddKeys(ctx, cli, "alice", pub); err != nil {
		t.Fatal(err)
	}
	m.sshKey[credRevoked], pub = newSSHKey("alice-removed")
	ks, err := svc.AddKeys(ctx, cli, "alice", pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.RemoveKey(ctx, cli, "alice", ks[0].Fingerprint); err != nil {
		t.Fatal(err)
	}
	m.sshKey[credNone], _ = newSSHKey("unknown")
	m.sshKey[credOther], pub = newSSHKey("bob")
	if _, _, err := svc.AddUser(ctx, cli, "bob", keys.RoleOperator, pub); err != nil {
		t.Fatal(err)
	}
	m.sshKey["disabled-user"], pub = newSSHKey("dave")
	if _, _, err := svc.AddUser(ctx, cli, "dave", keys.RoleOperator, pub); err != nil {
		t.Fatal(err)
	}
	if err := svc.SetDisabled(ctx, cli, "dave", true); err != nil {
		t.Fatal(err)
	}
	m.adminSSH, pub = newSSHKey("ada")
	if _, _, err := svc.AddUser(ctx, cli, "ada", keys.RoleAdmin, pub); err != nil {
		t.Fatal(err)
	}

	// API keys.
	mk := func(actor keys.Actor, user string, scopes []string, ttl time.Duration) (string, keys.APIKey) {
		tok, k, err := svc.CreateAPIKey(ctx, actor, user, "matrix", scopes, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok, k
	}
	m.apiKey[credNone] = ""
	m.apiKey[credMalformed] = "sbx_notakey"
	tok, k := mk(alice, "alice", nil, time.Hour)
	if err := svc.RevokeAPIKey(ctx, alice, "alice", k.ID); err != nil {
		t.Fatal(err)
	}
	m.apiKey[credRevoked] = tok
	m.apiKey[credExpired], _ = mk(alice, "alice", nil, time.Nanosecond)
	m.apiKey[credRead], _ = mk(alice, "alice", []string{"read"}, time.Hour)
	m.apiKey[credOther], _ = mk(m.bob, "bob", []string{"write", "tokens"}, time.Hour)
	m.apiKey[credRight], _ = mk(alice, "alice", []string{"write", "tokens"}, time.Hour)
	m.adminKey, _ = mk(m.ada, "ada", []string{"write", "tokens"}, time.Hour)
	_, m.victimKey = mk(alice, "alice", []string{"read"}, time.Minute)

	// Console sessions, through the real login link.
	m.session[credNone] = nil
	m.session[credMalformed] = &http.Cookie{Name: web.SessionCookie, Value: "not-a-session"}
	m.session[credRevoked] = m.login(ctx, alice)
	sess, err := svc.WebSessions(ctx, alice, "alice")
	if err != nil || len(sess) != 1 {
		t.Fatalf("sessions %v %v", sess, err)
	}
	if err := svc.RevokeWebSession(ctx, alice, "alice", sess[0].ID); err != nil {
		t.Fatal(err)
	}
	// A bearer key on a console route is no console credential.
	m.session[credRead] = nil
	m.session[credOther] = m.login(ctx, m.bob)
	m.session[credRight] = m.login(ctx, alice)
	m.adminSession = m.login(ctx, m.ada)
}

// prepare gives alice a fresh box (done with its script) and a key and a
// session for the right credential to revoke.
func (m *matrix) prepare(ctx context.Context) {
	t, svc, alice := m.t, m.g.s.keys, m.g.alice
	b, err := m.g.f.Delegate(ctx, alice, fleet.DelegateRequest{Agent: "script", Task: "!say ready",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget"}}})
	if err != nil {
		t.Fatal(err)
	}
	m.box = b.Name
	m.g.waitState(m.box, fleet.Done)
	if _, m.victimKey, err = svc.CreateAPIKey(ctx, alice, "alice", "victim", []string{"read"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	before, _ := svc.WebSessions(ctx, alice, "alice")
	m.login(ctx, alice)
	after, _ := svc.WebSessions(ctx, alice, "alice")
	for _, s := range after {
		if !slices.ContainsFunc(before, func(o keys.WebSession) bool { return o.ID == s.ID }) {
			m.victimSession = s.ID
		}
	}
}

// login signs actor in through a one-time link and returns the cookie.
func (m *matrix) login(ctx context.Context, actor keys.Actor) *http.Cookie {
	token, _, err := m.g.s.keys.CreateLoginLink(ctx, actor, actor.User)
	if err != nil {
		m.t.Fatal(err)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(m.httpURL+"/login/"+token, url.Values{})
	if err != nil {
		m.t.Fatal(err)
	}
	resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == web.SessionCookie {
			return &http.Cookie{Name: ck.Name, Value: ck.Value}
		}
	}
	m.t.Fatalf("login of %s: %d, no session cookie", actor.User, resp.StatusCode)
	return nil
}

// snapshot is what a refused call must leave as it was: alice's boxes,
// keys, sessions, accounts, MCP servers and inbox.
func (m *matrix) snapshot() string {
	ctx := context.Background()
	alice := m.g.alice
	var b strings.Builder
	boxes, _ := m.g.f.List(ctx, alice)
	for _, x := range boxes {
		fmt.Fprintf(&b, "box %s %s keep=%v allow=%v q=%q\n", x.Name, x.State, x.Keep, x.Allow, x.Question.String())
	}
	ks, _ := m.g.s.keys.APIKeys(ctx, alice, "alice")
	for _, k := range ks {
		fmt.Fprintf(&b, "key %s %v revoked=%v\n", k.ID, k.Scopes, !k.Revoked.IsZero())
	}
	ss, _ := m.g.s.keys.WebSessions(ctx, alice, "alice")
	for _, s := range ss {
		fmt.Fprintf(&b, "session %s\n", s.ID)
	}
	as, _ := m.g.f.Accounts(ctx, alice)
	for _, a := range as {
		fmt.Fprintf(&b, "account %+v\n", a)
	}
	ms, _ := m.g.f.MCPServers(ctx, alice)
	fmt.Fprintf(&b, "mcp %+v\n", ms)
	in, _ := m.g.f.Inbox(ctx, alice, m.box)
	fmt.Fprintf(&b, "inbox %d\n", len(in))
	users, _ := m.g.s.keys.Users(ctx)
	fmt.Fprintf(&b, "users %+v\n", users)
	return b.String()
}

// settled waits until alice's box is not mid-turn (a right call before
// may have started one, which ends on its own) and returns the snapshot.
func (m *matrix) settled() string {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		b, err := m.g.f.Get(context.Background(), m.g.alice, m.box)
		if err != nil || (b.State != fleet.Running && b.State != fleet.Creating) {
			return m.snapshot()
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.t.Fatalf("box %s still running after 2 minutes", m.box)
	return ""
}

// ---- HTTP ----

// httpRoute says how to call a route and who may.
type httpRoute struct {
	path, body string // {box}, {victim-key}, {victim-session} are filled in
	auth       string // "open", "key", "key-admin", "key-tokens", "session", "session-admin", "mcp"
	boxed      bool   // names alice's box (or her thing): another user gets notFound
	// right is what the right credential gets (ok unless the input given
	// here is refused on purpose); other what another user's does when it is
	// not simply notFound.
	right, other outcome
	last         bool // changes what later calls need (destroy, logout): run last
}

var httpRoutes = map[string]httpRoute{
	"GET /healthz":                              {path: "/healthz", auth: "open"},
	"GET /metrics":                              {path: "/metrics", auth: "key-admin"},
	"GET /api/v1/whoami":                        {path: "/api/v1/whoami", auth: "key"},
	"GET /api/v1/tokens":                        {path: "/api/v1/tokens", auth: "key-tokens"},
	"POST /api/v1/tokens":                       {path: "/api/v1/tokens", body: `{"name":"m","scopes":["read"],"expires":"1m"}`, auth: "key-tokens"},
	"DELETE /api/v1/tokens/{id}":                {path: "/api/v1/tokens/{victim-key}", auth: "key-tokens", boxed: true},
	"GET /api/v1/test/panic":                    {path: "/api/v1/test/panic", auth: "open"},
	"GET /static/":                              {path: "/static/sbx.css", auth: "open"},
	"POST /csp-report":                          {path: "/csp-report", body: `{"csp-report":{}}`, auth: "open"},
	"/mcp":                                      {path: "/mcp", auth: "mcp"},
	"/mcp/":                                     {path: "/mcp/", auth: "mcp"},
	"GET /login":                                {path: "/login", auth: "open"},
	"GET /login/{token}":                        {path: "/login/sbxnotalink", auth: "open"},
	"POST /login/{token}":                       {path: "/login/sbxnotalink", auth: "open"},
	"POST /logout":                              {path: "/logout", auth: "session", last: true},
	"GET /{$}":                                  {path: "/", auth: "session"},
	"GET /events":                               {path: "/events", auth: "session"},
	"GET /delegate":                             {path: "/delegate", auth: "session"},
	"POST /delegate":                            {path: "/delegate", body: "task=", auth: "session", right: invalid, other: invalid},
	"GET /delegate/{id}":                        {path: "/delegate/nosuch", auth: "session", right: notFound, other: notFound},
	"GET /delegate/{id}/stream":                 {path: "/delegate/nosuch/stream", auth: "session", right: notFound, other: notFound},
	"GET /boxes/{box}":                          {path: "/boxes/{box}", auth: "session", boxed: true},
	"GET /boxes/{box}/stream":                   {path: "/boxes/{box}/stream", auth: "session", boxed: true},
	"GET /boxes/{box}/log.txt":                  {path: "/boxes/{box}/log.txt", auth: "session", boxed: true},
	"GET /boxes/{box}/diff":                     {path: "/boxes/{box}/diff", auth: "session", boxed: true},
	"GET /boxes/{box}/files":                    {path: "/boxes/{box}/files", auth: "session", boxed: true},
	"GET /boxes/{box}/artifact":                 {path: "/boxes/{box}/artifact?path=widget/README.md", auth: "session", boxed: true},
	"POST /boxes/{box}/answer":                  {path: "/boxes/{box}/answer", body: "text=x", auth: "session", boxed: true},
	"POST /boxes/{box}/inbox/{id}/delete":       {path: "/boxes/{box}/inbox/999/delete", auth: "session", boxed: true, right: notFound},
	"POST /boxes/{box}/ask":                     {path: "/boxes/{box}/ask", body: "question=why%3F", auth: "session", boxed: true},
	"POST /boxes/{box}/allow":                   {path: "/boxes/{box}/allow", body: "add=example.com", auth: "session", boxed: true},
	"POST /boxes/{box}/sleep":                   {path: "/boxes/{box}/sleep", auth: "session", boxed: true},
	"POST /boxes/{box}/wake":                    {path: "/boxes/{box}/wake", auth: "session", boxed: true},
	"POST /boxes/{box}/keep":                    {path: "/boxes/{box}/keep", auth: "session", boxed: true},
	"POST /boxes/{box}/unkeep":                  {path: "/boxes/{box}/unkeep", auth: "session", boxed: true},
	"POST /boxes/{box}/extend":                  {path: "/boxes/{box}/extend", body: "by=1h", auth: "session", boxed: true},
	"POST /boxes/{box}/preview":                 {path: "/boxes/{box}/preview", body: "port=8000", auth: "session", boxed: true},
	"GET /boxes/{box}/checkpoints":              {path: "/boxes/{box}/checkpoints", auth: "session", boxed: true},
	"POST /boxes/{box}/checkpoint":              {path: "/boxes/{box}/checkpoint", body: "label=matrix", auth: "session", boxed: true},
	"POST /boxes/{box}/checkpoints/{id}/delete": {path: "/boxes/{box}/checkpoints/cp-abcdefgh/delete", auth: "session", boxed: true, right: notFound},
	"POST /boxes/{box}/rewind":                  {path: "/boxes/{box}/rewind", body: "checkpoint=cp-abcdefgh", auth: "session", boxed: true, right: notFound},
	"POST /boxes/{box}/fork":                    {path: "/boxes/{box}/fork", auth: "session", boxed: true},
	"POST /boxes/{box}/destroy":                 {path: "/boxes/{box}/destroy", auth: "session", boxed: true, last: true},
	"POST /boxes/{box}/title":                   {path: "/boxes/{box}/title", body: "title=matrix", auth: "session", boxed: true},
	"POST /boxes/{box}/repos":                   {path: "/boxes/{box}/repos", body: "repo=acme/widget", auth: "session", boxed: true, right: invalid},
	"GET /settings":                             {path: "/settings", auth: "session"},
	"POST /settings/accounts":                   {path: "/settings/accounts", body: "name=&token=", auth: "session", right: invalid, other: invalid},
	"POST /settings/accounts/{name}/default":    {path: "/settings/accounts/work/default", auth: "session", boxed: true},
	"POST /settings/accounts/{name}/delete":     {path: "/settings/accounts/nosuch/delete", auth: "session", right: notFound, other: notFound},
	"POST /settings/mcp":                        {path: "/settings/mcp", body: "name=&url=", auth: "session", right: invalid, other: invalid},
	"POST /settings/mcp/{name}/delete":          {path: "/settings/mcp/nosuch/delete", auth: "session", right: notFound, other: notFound},
	"POST /settings/notify":                     {path: "/settings/notify", body: "name=&kind=&url=", auth: "session", right: invalid, other: invalid},
	"POST /settings/notify/{name}/delete":       {path: "/settings/notify/nosuch/delete", auth: "session", right: notFound, other: notFound},
	"POST /settings/notify/{name}/test":         {path: "/settings/notify/nosuch/test", auth: "session", right: notFound, other: notFound},
	"POST /settings/notify/{name}/enable":       {path: "/settings/notify/nosuch/enable", auth: "session", right: notFound, other: notFound},
	"POST /settings/notify/{name}/disable":      {path: "/settings/notify/nosuch/disable", auth: "session", right: notFound, other: notFound},
	"POST /settings/keys":                       {path: "/settings/keys", body: "name=m&expires=1h", auth: "session"},
	"POST /settings/presets":                    {path: "/settings/presets", body: "presets=%40npm", auth: "session"},
	"POST /settings/profiles":                   {path: "/settings/profiles", body: "name=mx&env=A%3D1", auth: "session"},
	"POST /settings/profiles/default":           {path: "/settings/profiles/default", body: "repo=acme%2Fwidget&profile=", auth: "session"},
	"POST /settings/profiles/{name}/delete":     {path: "/settings/profiles/nosuch/delete", auth: "session", right: notFound, other: notFound},
	"POST /settings/keys/{id}/revoke":           {path: "/settings/keys/{victim-key}/revoke", auth: "session", boxed: true},
	"POST /settings/sessions/{id}/revoke":       {path: "/settings/sessions/{victim-session}/revoke", auth: "session", boxed: true},
	"GET /audit":                                {path: "/audit", auth: "session-admin"},
	"GET /pool":                                 {path: "/pool", auth: "session-admin"},
	"POST /pool":                                {path: "/pool", body: "size=0", auth: "session-admin"},
	// Nothing committed in the matrix's box: nothing to open, nothing to
	// merge or close.
	"POST /boxes/{box}/pr":       {path: "/boxes/{box}/pr", body: "title=x", auth: "session", boxed: true, right: invalid},
	"POST /boxes/{box}/pr/merge": {path: "/boxes/{box}/pr/merge", body: "method=squash", auth: "session", boxed: true, right: notFound},
	"POST /boxes/{box}/pr/close": {path: "/boxes/{box}/pr/close", auth: "session", boxed: true, right: notFound},
}

// expectHTTP is what cred gets from r.
func expectHTTP(r httpRoute, cred string) outcome {
	switch r.auth {
	case "open":
		return ok
	case "session", "session-admin":
		switch cred {
		case credNone, credMalformed, credRevoked, credExpired, credRead:
			return unauth
		}
	default: // key kinds and MCP
		switch cred {
		case credNone, credMalformed, credRevoked, credExpired:
			return unauth
		}
	}
	switch {
	case (r.auth == "key-admin" || r.auth == "session-admin") && cred != credRight:
		return forbidden
	case r.auth == "key-tokens" && cred == credRead:
		return forbidden
	case cred == credOther && r.other != "":
		return r.other
	case cred == credOther && r.boxed:
		return notFound
	case cred == credRight && r.right != "":
		return r.right
	}
	return ok
}

func classifyHTTP(resp *http.Response) outcome {
	switch st := resp.StatusCode; {
	case st == http.StatusUnauthorized:
		return unauth
	case st == http.StatusSeeOther && resp.Header.Get("Location") == "/login" && resp.Request.Method == http.MethodGet:
		// A page load without a session goes to /login (a POST without
		// one gets 401; logout's redirect there is its success).
		return unauth
	case st == http.StatusForbidden:
		return forbidden
	case st == http.StatusNotFound:
		return notFound
	case st >= 400 && st < 500:
		return invalid
	case st >= 500:
		return outcome(fmt.Sprintf("server error %d", st))
	}
	return ok
}

func (m *matrix) fill(p string) string {
	return strings.NewReplacer("{box}", m.box, "{victim-key}", m.victimKey.ID, "{victim-session}", m.victimSession).Replace(p)
}

func (m *matrix) httpMatrix(t *testing.T) {
	routes := m.g.s.http.Handler.(*web.Server).Routes()
	for _, p := range routes {
		if _, known := httpRoutes[p]; !known {
			t.Errorf("route %q has no entry in the access matrix (httpRoutes): say who may call it", p)
		}
	}
	for p := range httpRoutes {
		if !slices.Contains(routes, p) && p != "GET /api/v1/test/panic" {
			t.Errorf("matrix entry %q is no registered route", p)
		}
	}
	sort.Strings(routes)
	// Refused credentials first, the right one last; for each, the routes
	// that end what later calls need (destroy, logout) come last.
	for _, cred := range httpCreds {
		var last []string
		for _, p := range routes {
			if httpRoutes[p].last {
				last = append(last, p)
				continue
			}
			m.callHTTP(t, p, cred)
		}
		for _, p := range last {
			m.callHTTP(t, p, cred)
		}
	}
}

func (m *matrix) callHTTP(t *testing.T, pattern, cred string) {
	r, known := httpRoutes[pattern]
	if !known {
		return
	}
	method, _, found := strings.Cut(pattern, " ")
	if !found || strings.HasPrefix(method, "/") {
		method = http.MethodGet
	}
	want := expectHTTP(r, cred)
	before := m.settled()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, m.httpURL+m.fill(r.path), body)
	if strings.HasPrefix(r.body, "{") {
		req.Header.Set("Content-Type", "application/json")
	} else if r.body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	admin := r.auth == "key-admin" || r.auth == "session-admin"
	switch r.auth {
	case "session", "session-admin":
		ck := m.session[cred]
		if admin && cred == credRight {
			ck = m.adminSession
		}
		if ck != nil {
			req.AddCookie(ck)
		}
		if cred == credRead {
			req.Header.Set("Authorization", "Bearer "+m.apiKey[credRead])
		}
	default:
		tok := m.apiKey[cred]
		if admin && cred == credRight {
			tok = m.adminKey
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if r.auth == "mcp" {
			req.Header.Set("Accept", "application/json, text/event-stream")
		}
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("%s as %s: %v", pattern, cred, err)
		return
	}
	var data []byte
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		data, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
	}
	resp.Body.Close()
	got := classifyHTTP(resp)
	if r.auth == "mcp" && got == invalid && want == ok {
		got = ok // authenticated: a bare GET is then the transport's business
	}
	if r.auth == "open" {
		// Credentials change nothing on an open route: every credential gets
		// what the first got, and never a server error.
		if first, seen := m.open[pattern]; seen {
			want = first
		} else if !strings.HasPrefix(string(got), "server error") || pattern == "GET /api/v1/test/panic" {
			m.open[pattern], want = got, got
		}
	}
	m.cover("http "+pattern, cred, fmt.Sprintf("%s %d", got, resp.StatusCode))
	if got != want {
		t.Errorf("%s as %s: %s (%d), want %s: %s", pattern, cred, got, resp.StatusCode, want, bytes.TrimSpace(data))
	}
	if got != ok {
		if after := m.snapshot(); after != before {
			t.Errorf("%s as %s was refused (%d) but changed state:\nbefore %s\nafter  %s", pattern, cred, resp.StatusCode, before, after)
		}
	}
}

// ---- MCP ----

func (m *matrix) mcpConnect(token string) (*sdk.ClientSession, error) {
	c := sdk.NewClient(&sdk.Implementation{Name: "sbx-matrix", Version: "v0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: m.httpURL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token: token, base: http.DefaultTransport}}, MaxRetries: -1}, nil)
}

// mcpTool says how to call a tool; write tools need the write scope.
type mcpTool struct {
	args        map[string]any
	write       bool
	admin       bool    // admins only: every key of the matrix is an operator's (forbidden); its right call is ada's
	right       outcome // what the right key gets when not ok
	other       outcome // what another user's key gets when not notFound
	destructive bool    // run last
}

var mcpTools = map[string]mcpTool{
	"delegate":          {args: map[string]any{"task": ""}, write: true, right: invalid, other: invalid},
	"list":              {args: map[string]any{}, other: ok},
	"status":            {args: map[string]any{"box": "{box}"}},
	"watch":             {args: map[string]any{"box": "{box}"}},
	"answer":            {args: map[string]any{"box": "{box}", "text": "x", "wait_seconds": 0}, write: true},
	"inbox":             {args: map[string]any{"box": "{box}"}},
	"diff":              {args: map[string]any{"box": "{box}"}},
	"list_artifacts":    {args: map[string]any{"box": "{box}"}},
	"read_artifact":     {args: map[string]any{"box": "{box}", "path": "widget/README.md"}},
	"keep":              {args: map[string]any{"box": "{box}"}, write: true},
	"extend":            {args: map[string]any{"box": "{box}", "by": "1h"}, write: true},
	"checkpoint":        {args: map[string]any{"box": "{box}", "label": "matrix"}, write: true},
	"checkpoints":       {args: map[string]any{"box": "{box}"}},
	"checkpoint_remove": {args: map[string]any{"box": "{box}", "checkpoint": "cp-abcdefgh"}, write: true, right: notFound},
	"rewind":            {args: map[string]any{"box": "{box}", "checkpoint": "cp-abcdefgh"}, write: true, right: notFound},
	"fork":              {args: map[string]any{"box": "{box}"}, write: true},
	"sleep":             {args: map[string]any{"box": "{box}"}, write: true},
	"wake":              {args: map[string]any{"box": "{box}"}, write: true},
	"teardown":          {args: map[string]any{"box": "{box}"}, write: true, destructive: true},
	"notify_list":       {args: map[string]any{}, other: ok},
	"notify_add":        {args: map[string]any{"name": "n", "kind": "webhook", "url": "http://"}, write: true, right: invalid, other: invalid},
	"notify_remove":     {args: map[string]any{"name": "nosuch"}, write: true, right: notFound, other: notFound, destructive: true},
	"notify_test":       {args: map[string]any{"name": "nosuch"}, write: true, right: notFound, other: notFound},
	"notify_enable":     {args: map[string]any{"name": "nosuch", "enabled": false}, write: true, right: notFound, other: notFound},
	"notify_log":        {args: map[string]any{"name": "nosuch"}, right: notFound, other: notFound},
	// Nothing committed: nothing to open, no pull request to act on.
	"pr_open":      {args: map[string]any{"box": "{box}"}, write: true, right: invalid},
	"pr_get":       {args: map[string]any{"box": "{box}"}, right: notFound},
	"pr_merge":     {args: map[string]any{"box": "{box}"}, write: true, right: notFound},
	"pr_close":     {args: map[string]any{"box": "{box}"}, write: true, right: notFound},
	"repos":        {args: map[string]any{"account": "nosuch"}, right: notFound, other: notFound},
	"title":        {args: map[string]any{"box": "{box}", "title": "matrix"}, write: true},
	"repo_add":     {args: map[string]any{"box": "{box}", "repo": "acme/widget"}, write: true, right: invalid},
	"ask":          {args: map[string]any{"box": "{box}", "question": "why?"}, write: true},
	"inbox_remove": {args: map[string]any{"box": "{box}", "id": 999}, write: true, right: notFound},
	"allow":        {args: map[string]any{"box": "{box}", "domains": []any{"example.com"}}, write: true},
	"pool":         {args: map[string]any{}, admin: true},
	"pool_set":     {args: map[string]any{"size": 0}, write: true, admin: true},
	// Each user's own default set.
	"presets":         {args: map[string]any{}, other: ok},
	"presets_default": {args: map[string]any{"presets": []any{"@npm"}}, write: true, other: ok},
	// Every user lists the mirrors; admins set them.
	"mirrors":    {args: map[string]any{}, other: ok},
	"mirror_set": {args: map[string]any{"name": "matrix-mcp", "host": "10.1.2.4:8080"}, write: true, admin: true},
	// Each user's own profiles.
	"profiles":        {args: map[string]any{}, other: ok},
	"profile_set":     {args: map[string]any{"name": "mx", "env": []any{"A=1"}}, write: true, other: ok},
	"profile_delete":  {args: map[string]any{"name": "nosuch"}, write: true, right: notFound, other: notFound, destructive: true},
	"profile_default": {args: map[string]any{"repo": "acme/widget"}, write: true, other: ok},
}

func (m *matrix) mcpMatrix(t *testing.T) {
	// Who may connect at all.
	for _, cred := range []string{credNone, credMalformed, credRevoked, credExpired} {
		before := m.settled()
		cs, err := m.mcpConnect(m.apiKey[cred])
		if err == nil {
			cs.Close()
			t.Errorf("mcp connect as %s: accepted", cred)
		}
		m.cover("mcp connect", cred, string(unauth))
		if after := m.snapshot(); after != before {
			t.Errorf("mcp connect as %s changed state", cred)
		}
	}
	sessions := map[string]*sdk.ClientSession{}
	for _, cred := range []string{credRead, credOther, credRight} {
		cs, err := m.mcpConnect(m.apiKey[cred])
		if err != nil {
			t.Fatalf("mcp connect as %s: %v", cred, err)
		}
		defer cs.Close()
		sessions[cred] = cs
	}
	admin, err := m.mcpConnect(m.adminKey)
	if err != nil {
		t.Fatalf("mcp connect as ada: %v", err)
	}
	defer admin.Close()
	m.adminMCP = admin
	list, err := sessions[credRight].ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var tools []string
	for _, tl := range list.Tools {
		tools = append(tools, tl.Name)
		e, known := mcpTools[tl.Name]
		if !known {
			t.Errorf("MCP tool %q has no entry in the access matrix (mcpTools)", tl.Name)
			continue
		}
		if ro := tl.Annotations != nil && tl.Annotations.ReadOnlyHint; ro == e.write {
			t.Errorf("MCP tool %q: read-only hint %v disagrees with the matrix (write %v)", tl.Name, ro, e.write)
		}
	}
	for name := range mcpTools {
		if !slices.Contains(tools, name) {
			t.Errorf("matrix entry %q is no registered MCP tool", name)
		}
	}
	sort.Strings(tools)
	var last []string
	for _, cred := range []string{credRead, credOther, credRight} {
		for _, name := range tools {
			if mcpTools[name].destructive && cred == credRight {
				last = append(last, name)
				continue
			}
			m.callTool(t, sessions[cred], name, cred)
		}
		m.readResource(t, sessions[cred], cred)
	}
	for _, name := range last {
		m.callTool(t, sessions[credRight], name, credRight)
	}
	tmpl, err := sessions[credRight].ListResourceTemplates(context.Background(), nil)
	if err != nil || len(tmpl.ResourceTemplates) != 1 {
		t.Errorf("MCP resource templates %+v %v: the matrix covers one (sbx://{box}/{+path})", tmpl, err)
	}
}

func (m *matrix) callTool(t *testing.T, cs *sdk.ClientSession, name, cred string) {
	e := mcpTools[name]
	want := ok
	switch {
	case cred == credRead && e.write:
		want = forbidden
	case e.admin && cred == credRight:
		cs = m.adminMCP
	case e.admin:
		want = forbidden
	case cred == credOther && e.other != "":
		want = e.other
	case cred == credOther:
		want = notFound
	case cred == credRight && e.right != "", cred == credRead && !e.write && e.right != "":
		// A read key of alice's reads what her right key would.
		want = e.right
	}
	args := map[string]any{}
	for k, v := range e.args {
		if str, isStr := v.(string); isStr {
			v = m.fill(str)
		}
		args[k] = v
	}
	before := m.settled()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	got := ok
	var msg string
	if err != nil {
		got, msg = outcome("protocol error"), err.Error()
	} else if res.IsError {
		for _, c := range res.Content {
			if tc, isText := c.(*sdk.TextContent); isText {
				msg += tc.Text
			}
		}
		got = classifyText(msg)
	}
	m.cover("mcp tools/call "+name, cred, string(got))
	if got != want {
		t.Errorf("mcp %s as %s: %s, want %s: %s", name, cred, got, want, msg)
	}
	if got != ok {
		if after := m.snapshot(); after != before {
			t.Errorf("mcp %s as %s was refused but changed state:\nbefore %s\nafter  %s", name, cred, before, after)
		}
	}
}

// classifyText reads the class of a refusal from its message (MCP tool
// errors and SSH stderr carry the core's sentinel at their end).
func classifyText(msg string) outcome {
	switch {
	case strings.Contains(msg, "scope"), strings.Contains(msg, "admins only"), strings.Contains(msg, "permission denied"), strings.Contains(msg, "forbidden"):
		return forbidden
	case strings.Contains(msg, "not found"), strings.Contains(msg, "No box of yours"):
		return notFound
	}
	return invalid
}

func (m *matrix) readResource(t *testing.T, cs *sdk.ClientSession, cred string) {
	want := ok
	if cred == credOther {
		want = notFound
	}
	before := m.settled()
	_, err := cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: "sbx://" + m.box + "/widget/README.md"})
	got := ok
	if err != nil {
		got = classifyText(err.Error())
		if strings.Contains(strings.ToLower(err.Error()), "not found") {
			got = notFound
		}
	}
	m.cover("mcp resources/read sbx://{box}/{+path}", cred, string(got))
	if got != want {
		t.Errorf("mcp resources/read as %s: %s, want %s: %v", cred, got, want, err)
	}
	if got != ok && m.snapshot() != before {
		t.Errorf("mcp resources/read as %s was refused but changed state", cred)
	}
}

// ---- SSH ----

// sshCommand says how to run a command; stdin feeds it.
type sshCommand struct {
	args  string // after the command path; {box} filled in
	stdin string
	boxed bool // names alice's box: another user gets notFound
	// right is what alice gets when not ok; other what bob gets when it is
	// neither notFound (boxed) nor ok.
	right, other outcome
	last         bool
	tty          bool // needs a terminal (ssh -tt)
}

var sshCommands = map[string]sshCommand{
	"whoami":          {},
	"login":           {},
	"audit":           {args: "--since 1h"},
	"user add":        {args: "zed", right: invalid},
	"user rm":         {args: "nosuch", right: notFound},
	"user disable":    {args: "nosuch", right: notFound},
	"user enable":     {args: "nosuch", right: notFound},
	"user ls":         {},
	"key add":         {args: "not-a-key", right: invalid, other: invalid},
	"key ls":          {},
	"key rm":          {args: "SHA256:nosuch", right: notFound, other: notFound},
	"token create":    {args: "--scope read --expires 1m"},
	"token ls":        {},
	"token rm":        {args: "nosuchid", right: notFound, other: notFound},
	"account add":     {args: "work2", stdin: "not-a-token", right: invalid, other: invalid},
	"account ls":      {},
	"account rm":      {args: "nosuch", right: notFound, other: notFound},
	"account default": {args: "work", boxed: true},
	"mcp add":         {args: "m http://", right: invalid, other: invalid},
	"mcp ls":          {},
	"mcp rm":          {args: "nosuch", right: notFound, other: notFound},
	"notify add":      {args: "n --kind webhook --url http://", right: invalid, other: invalid},
	"notify ls":       {},
	"notify rm":       {args: "nosuch", right: notFound, other: notFound},
	"notify enable":   {args: "nosuch", right: notFound, other: notFound},
	"notify disable":  {args: "nosuch", right: notFound, other: notFound},
	"notify test":     {args: "nosuch", right: notFound, other: notFound},
	"notify log":      {args: "nosuch", right: notFound, other: notFound},
	"pool":            {},
	"new":             {args: "", right: invalid, other: invalid},
	"ls":              {},
	"status":          {args: "{box}", boxed: true},
	"logs":            {args: "{box}", boxed: true},
	"diff":            {args: "{box}", boxed: true},
	"inbox":           {args: "{box}", boxed: true},
	"inbox rm":        {args: "{box} 999", boxed: true, right: notFound},
	"answer":          {args: "{box} x", boxed: true, right: invalid},
	"ask":             {args: "{box} why?", boxed: true},
	"allow":           {args: "{box} example.com", boxed: true},
	"keep":            {args: "{box}", boxed: true},
	"unkeep":          {args: "{box}", boxed: true},
	"extend":          {args: "{box} 1h", boxed: true},
	"checkpoint":      {args: "{box} matrix", boxed: true},
	"checkpoints":     {args: "{box}", boxed: true},
	"checkpoints rm":  {args: "{box} cp-abcdefgh", boxed: true, right: notFound},
	"rewind":          {args: "{box} cp-abcdefgh", boxed: true, right: notFound},
	"fork":            {args: "{box}", boxed: true},
	"sleep":           {args: "{box}", boxed: true},
	"wake":            {args: "{box}", boxed: true},
	"exec":            {args: "{box} -- true", boxed: true},
	"attach":          {args: "{box} -- true", boxed: true, tty: true},
	"rm":              {args: "{box}", boxed: true, last: true},
	// The matrix's box committed nothing, so there is nothing to open, and
	// no pull request to merge or close.
	"pr":       {args: "{box}", boxed: true, right: invalid},
	"pr merge": {args: "{box}", boxed: true, right: notFound},
	"pr close": {args: "{box}", boxed: true, right: notFound},
	"repos":    {args: "--account nosuch", right: notFound, other: notFound},
	"title":    {args: "{box} matrix title", boxed: true},
	"repo add": {args: "{box} acme/widget", boxed: true, right: invalid},
	// Each user's own default set: another user sets theirs.
	"presets":         {},
	"presets default": {args: "@npm"},
	// Every user lists the mirrors; admins add and remove them.
	"mirror ls":  {},
	"mirror add": {args: "matrix-m 10.1.2.3:8080"},
	"mirror rm":  {args: "nosuch", right: notFound},
	// Each user's own profiles: another user has theirs.
	"profile ls":      {},
	"profile show":    {args: "nosuch", right: notFound, other: notFound},
	"profile set":     {args: "mx --env A=1 --install true"},
	"profile rm":      {args: "nosuch", right: notFound, other: notFound},
	"profile default": {args: "acme/widget"},
}

var sshCreds = []string{credNone, credRevoked, "disabled-user", credOther, credRight}

func (m *matrix) sshMatrix(t *testing.T) {
	cmds := m.g.s.ssh.Commands()
	var paths []string
	for _, c := range cmds {
		if strings.HasPrefix(c.Path, "test-") {
			continue // a test's own commands (Options.SSHCommands)
		}
		paths = append(paths, c.Path)
		if _, known := sshCommands[c.Path]; !known {
			t.Errorf("ssh command %q has no entry in the access matrix (sshCommands)", c.Path)
		}
	}
	for p := range sshCommands {
		if !slices.Contains(paths, p) {
			t.Errorf("matrix entry %q is no ssh command", p)
		}
	}
	admin := map[string]bool{}
	for _, c := range cmds {
		admin[c.Path] = c.Admin
	}
	// The sftp subsystem: refused keys cannot open it; another user sees
	// none of alice's box.
	for _, cred := range sshCreds {
		m.sftp(t, cred)
	}
	// The right run of every command after the refused ones; rm last.
	for _, cred := range sshCreds {
		var last []string
		for _, p := range paths {
			if sshCommands[p].last && cred == credRight {
				last = append(last, p)
				continue
			}
			m.runSSH(t, p, cred, admin[p])
		}
		for _, p := range last {
			m.runSSH(t, p, cred, admin[p])
		}
	}
}

func (m *matrix) sshArgs(key string) []string {
	return []string{"-F", "/dev/null", "-i", key, "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
		"-o", "LogLevel=ERROR", "-p", m.sshPort}
}

func (m *matrix) runSSH(t *testing.T, path, cred string, adminOnly bool) {
	c := sshCommands[path]
	want := ok
	switch {
	case cred == credNone || cred == credRevoked || cred == "disabled-user":
		want = unauth
	case adminOnly && cred != credRight:
		want = forbidden
	case cred == credOther && c.other != "":
		want = c.other
	case cred == credOther && c.boxed:
		want = notFound
	case cred == credRight && c.right != "":
		want = c.right
	}
	key := m.sshKey[cred]
	if adminOnly && cred == credRight {
		key = m.adminSSH
	}
	args := m.sshArgs(key)
	if c.tty {
		args = append(args, "-tt")
	}
	args = append(args, "127.0.0.1", path)
	if c.args != "" {
		args = append(args, strings.Fields(m.fill(c.args))...)
	}
	before := m.settled()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", args...)
	cmd.Stdin = strings.NewReader(c.stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("ssh %s: %v", path, err)
	}
	got := ok
	switch {
	case code == 255 && strings.Contains(stderr.String(), "Permission denied"):
		got = unauth
	case code != 0:
		got = classifyText(stderr.String())
	}
	m.cover("ssh "+path, cred, fmt.Sprintf("%s %d", got, code))
	if got != want {
		t.Errorf("ssh %s as %s: %s (exit %d), want %s\nstdout %s\nstderr %s", path, cred, got, code, want, out, stderr.String())
	}
	if got != ok {
		if after := m.snapshot(); after != before {
			t.Errorf("ssh %s as %s was refused but changed state:\nbefore %s\nafter  %s", path, cred, before, after)
		}
	}
}

func (m *matrix) sftp(t *testing.T, cred string) {
	want := ok
	switch cred {
	case credNone, credRevoked, "disabled-user":
		want = unauth
	case credOther:
		want = notFound
	}
	args := m.sshArgs(m.sshKey[cred])
	args[len(args)-2] = "-P" // sftp names the port so
	args = append(args, "-b", "-", "127.0.0.1")
	cmd := exec.Command("sftp", args...)
	cmd.Stdin = strings.NewReader("ls " + m.box + "\n")
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	got := ok
	switch {
	case err != nil && strings.Contains(out, "Permission denied"):
		got = unauth
	case err != nil && (strings.Contains(out, "not found") || strings.Contains(out, "No such file")):
		got = notFound
	case err != nil:
		got = invalid
	}
	m.cover("ssh subsystem sftp (ls BOX)", cred, string(got))
	if got != want {
		t.Errorf("sftp as %s: %s, want %s: %s", cred, got, want, out)
	}
}
