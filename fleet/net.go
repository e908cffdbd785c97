package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/internal/netpolicy"
)

// Network gives each machine its one network path: the gateway's box
// network (egress proxy, git and model endpoints) on a host socket that
// vm.Spec.Egress names. nil: boxes get no network device at all.
type Network interface {
	// Attach serves vmName's network path (idempotent) and returns the host
	// socket for vm.Spec.Egress.
	Attach(ctx context.Context, vmName string) (string, error)
	// Detach stops serving it.
	Detach(vmName string)
}

// GatewayHost is the one address a box reaches (QEMU guestfwd).
const GatewayHost = "10.0.2.100"

// gitRemote is a repo's remote inside a box: the gateway's git endpoint,
// which adds the token on the way out.
func gitRemote(vmName, repo string) string {
	return "http://" + GatewayHost + "/git/" + vmName + "/" + repo + ".git"
}

// NetGrant is what a machine's network path may reach. It is for the box
// network only, keyed by the machine the connection came from (the socket
// names it), never by anything the box says.
type NetGrant struct {
	Box   string // "" for a warm-pool machine nobody has claimed
	Owner string
	Allow []string
	Repos []NetRepo
	MCP   []NetMCP
	Model ModelUsage
	// Mirrors are the internal package mirrors (mirrors.go): a host the
	// allow-list names may resolve into their ranges.
	Mirrors []netpolicy.Mirror
}

// NetMCP is one MCP server on the relay, with the headers the gateway adds.
type NetMCP struct {
	Name    string
	URL     string
	Headers map[string]string
}

// NetRepo is one delegated repository on the git endpoint.
type NetRepo struct {
	Path         string // owner/name, as in the box's remote URL
	Upstream     string // the real https URL (.git)
	Token        string
	PushBranches []string
}

// ModelUsage is a box's use of the model endpoint.
type ModelUsage struct {
	Requests     int64 `json:"requests"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// grants answers the box network (gateway/boxnet), which acts for a
// machine, named by the socket its connection came through: what the
// machine's box may reach, and its model budget.
//
// Every request through a box's network path finds the machine's box, so
// the box last found for the machine is tried first (a hint, checked
// against the record each time); only a miss reads every record.
type grants struct {
	records  *records
	locks    *locks
	settings *settings
	// site are the presets every box's grant holds (net.default_presets).
	site []string
	// mirrors are the internal package mirrors.
	mirrors *mirrors

	mu    sync.Mutex
	boxes map[string]string // machine → the box that last held it
}

// find returns the record of the box that owns vmName.
func (v *grants) find(ctx context.Context, vmName string) (record, bool, error) {
	v.mu.Lock()
	hint, ok := v.boxes[vmName]
	v.mu.Unlock()
	if ok {
		if r, err := v.records.load(ctx, hint); err == nil && r.VM == vmName && r.State != Destroyed {
			return r, true, nil
		}
	}
	recs, err := v.records.loadAll(ctx)
	if err != nil {
		return record{}, false, err
	}
	for _, r := range recs {
		if r.VM == vmName && r.State != Destroyed {
			v.mu.Lock()
			v.boxes[vmName] = r.Name
			v.mu.Unlock()
			return r, true, nil
		}
	}
	v.mu.Lock()
	delete(v.boxes, vmName)
	v.mu.Unlock()
	return record{}, false, nil
}

// grant returns the current grant of a machine's network path.
func (v *grants) grant(ctx context.Context, vmName string) (NetGrant, error) {
	rec, ok, err := v.find(ctx, vmName)
	if err != nil || !ok {
		return NetGrant{}, err
	}
	// The box network matches host names only: the site's presets and the
	// box's own list, every preset reference expanded to its entries.
	g := NetGrant{Box: rec.Name, Owner: rec.Owner, Allow: netpolicy.Expand(append(slices.Clone(v.site), rec.Allow...)), Model: rec.Model}
	for _, r := range rec.Repos {
		_, tok, err := v.settings.accounts.Token(ctx, rec.Owner, r.Account)
		if err != nil {
			continue // the account was removed: the repo is no longer reachable
		}
		repo, err := accounts.ParseRepo(r.Name)
		if err != nil {
			continue
		}
		nr := NetRepo{Path: repo.String(), Upstream: v.settings.accounts.CloneURL(repo), Token: tok}
		if !strings.HasSuffix(nr.Upstream, ".git") {
			nr.Upstream += ".git"
		}
		if r.Push && r.Branch != "" {
			nr.PushBranches = []string{r.Branch}
		}
		g.Repos = append(g.Repos, nr)
	}
	if v.mirrors != nil {
		if g.Mirrors, err = v.mirrors.grantMirrors(ctx); err != nil {
			return g, err
		}
	}
	srvs, err := v.settings.mcpServers(ctx, rec.Owner)
	if err != nil {
		return g, err
	}
	for _, s := range srvs {
		g.MCP = append(g.MCP, NetMCP{Name: s.name, URL: s.url, Headers: s.headers})
	}
	return g, nil
}

// spendModel adds usage to a machine's model budget (see Fleet.SpendModel).
func (v *grants) spendModel(ctx context.Context, vmName string, u ModelUsage, maxRequests, maxTokens int64) error {
	rec, ok, err := v.find(ctx, vmName)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("machine %s belongs to no box: %w", vmName, ErrForbidden)
	}
	lock := v.locks.get(rec.Name)
	lock.Lock()
	defer lock.Unlock()
	rec, err = v.records.load(ctx, rec.Name)
	if err != nil {
		return err
	}
	m := rec.Model
	m.Requests += u.Requests
	m.InputTokens += u.InputTokens
	m.OutputTokens += u.OutputTokens
	if maxRequests > 0 && u.Requests > 0 && m.Requests > maxRequests {
		return fmt.Errorf("box %s used its %d model requests (model.max_requests): %w", rec.Name, maxRequests, ErrLimit)
	}
	if maxTokens > 0 && u.Requests > 0 && rec.Model.InputTokens+rec.Model.OutputTokens >= maxTokens {
		return fmt.Errorf("box %s used its %d model tokens (model.max_tokens): %w", rec.Name, maxTokens, ErrLimit)
	}
	rec.Model = m
	return v.records.save(ctx, rec, audit.Entry{})
}

// netEnv is the agent's environment for the box's network path.
func netEnv() []string {
	proxy := "http://" + GatewayHost + ":80"
	return []string{
		"HTTPS_PROXY=" + proxy, "HTTP_PROXY=" + proxy, "https_proxy=" + proxy, "http_proxy=" + proxy,
		"NO_PROXY=" + GatewayHost, "no_proxy=" + GatewayHost,
		"ANTHROPIC_BASE_URL=http://" + GatewayHost + "/model",
		// The real key is added by the gateway; the CLI wants one set.
		"ANTHROPIC_API_KEY=sbx-gateway-adds-the-key",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}
}
