package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/gateway/boxnet"
	"sbx.dev/sbx/gateway/config"
	"sbx.dev/sbx/internal/netpolicy"
)

// network serves every machine's one network path: a unix socket per
// machine (vm.Spec.Egress), answered by boxnet with the grant the core
// gives that machine. It implements fleet.Network and boxnet.Policy.
type network struct {
	dir   string
	cfg   config.Model
	audit *audit.Log
	log   *slog.Logger
	fleet func() *fleet.Fleet // set after the fleet exists
	srv   *boxnet.Server

	mu  sync.Mutex
	ctx context.Context
	on  map[string]context.CancelFunc
	// who names each machine's box and owner as its last grant said, so
	// auditing a decision does not look the grant up (and open its
	// secrets) a second time per request.
	who map[string]boxOwner
}

type boxOwner struct{ box, owner string }

func newNetwork(ctx context.Context, dataDir string, cfg config.Model, private []netpolicy.Trust, al *audit.Log, log *slog.Logger, egress Egress) *network {
	// QEMU is handed the socket path and vm.Spec.Egress wants it absolute
	// (the default data dir ./.sbx is relative).
	dir, err := filepath.Abs(filepath.Join(dataDir, "net"))
	if err != nil {
		dir = filepath.Join(dataDir, "net")
	}
	n := &network{dir: dir, cfg: cfg, audit: al, log: log, ctx: ctx, on: map[string]context.CancelFunc{}, who: map[string]boxOwner{}}
	n.srv = boxnet.New(boxnet.Config{Policy: n, Logger: log, Resolver: egress.Resolver, PrivateUpstreams: private, EgressTrust: egress.Trust})
	return n
}

// socketPath keeps under the 108-byte unix socket limit.
func (n *network) socketPath(vmName string) string {
	p := filepath.Join(n.dir, vmName+".sock")
	if len(p) < 100 {
		return p
	}
	h := sha256.Sum256([]byte(p))
	return filepath.Join(os.TempDir(), "sbx-net-"+hex.EncodeToString(h[:8])+".sock")
}

// Attach listens on the machine's socket (again after a restart).
func (n *network) Attach(_ context.Context, vmName string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	sock := n.socketPath(vmName)
	if _, ok := n.on[vmName]; ok {
		return sock, nil
	}
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		return "", err
	}
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", sock, err)
	}
	ctx, cancel := context.WithCancel(n.ctx)
	n.on[vmName] = cancel
	go func() {
		if err := n.srv.Serve(ctx, vmName, ln); err != nil && ctx.Err() == nil {
			n.log.Warn("box network stopped", "vm", vmName, "err", err)
		}
	}()
	return sock, nil
}

// Detach stops serving a destroyed machine.
func (n *network) Detach(vmName string) {
	n.mu.Lock()
	cancel, ok := n.on[vmName]
	delete(n.on, vmName)
	delete(n.who, vmName)
	n.mu.Unlock()
	if ok {
		cancel()
		_ = os.Remove(n.socketPath(vmName))
		n.srv.Forget(vmName)
	}
}

// Box is boxnet's view of the machine's grant.
func (n *network) Box(ctx context.Context, vmName string) (boxnet.BoxPolicy, error) {
	f := n.fleet()
	if f == nil {
		return boxnet.BoxPolicy{}, errors.New("no fleet")
	}
	g, err := f.NetGrant(ctx, vmName)
	if err != nil {
		return boxnet.BoxPolicy{}, err
	}
	p := boxnet.BoxPolicy{AllowDomains: g.Allow, Repos: map[string]boxnet.GitRoute{}, MCP: map[string]boxnet.MCPRoute{}, Mirrors: g.Mirrors}
	if g.Box == "" {
		return p, nil // an unclaimed pool machine reaches nothing
	}
	n.mu.Lock()
	n.who[vmName] = boxOwner{g.Box, g.Owner}
	n.mu.Unlock()
	for _, r := range g.Repos {
		u, err := url.Parse(r.Upstream)
		if err != nil {
			continue
		}
		p.Repos[r.Path] = boxnet.GitRoute{Upstream: u, Token: r.Token, PushBranches: r.PushBranches}
	}
	for _, m := range g.MCP {
		u, err := url.Parse(m.URL)
		if err != nil {
			continue
		}
		p.MCP[m.Name] = boxnet.MCPRoute{URL: u, Headers: m.Headers}
	}
	if n.cfg.APIKey != "" {
		m := &boxnet.ModelRoute{APIKey: n.cfg.APIKey, MaxRequests: int64(n.cfg.MaxRequests), MaxTokens: int64(n.cfg.MaxTokens),
			Used: boxnet.Usage{Requests: g.Model.Requests, InputTokens: g.Model.InputTokens, OutputTokens: g.Model.OutputTokens}}
		if n.cfg.Upstream != "" {
			if u, err := url.Parse(n.cfg.Upstream); err == nil {
				m.Upstream = u
			}
		}
		p.Model = m
	}
	return p, nil
}

// Audit writes each decision as an audit row of the box.
func (n *network) Audit(ctx context.Context, d boxnet.Decision) {
	box, owner := d.Box, ""
	n.mu.Lock()
	if w, ok := n.who[d.Box]; ok {
		box, owner = w.box, w.owner
	}
	n.mu.Unlock()
	result := audit.ResultOK
	if d.Verdict != boxnet.Allow {
		result = audit.ResultDenied
	}
	target := d.Host
	if d.Port != 0 {
		target = net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
	}
	detail := fleet.EgressAuditDetail(box, d.Detail, d.Reason, d.Addr)
	_ = n.audit.Record(ctx, audit.Entry{Actor: owner, Front: "box", Action: "net." + d.Kind, Target: target, Result: result, Detail: detail})
}

// Spend charges the machine's model budget in the core.
func (n *network) Spend(ctx context.Context, vmName string, u boxnet.Usage) error {
	f := n.fleet()
	if f == nil {
		return errors.New("no fleet")
	}
	return f.SpendModel(ctx, vmName, fleet.ModelUsage{Requests: u.Requests, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens},
		int64(n.cfg.MaxRequests), int64(n.cfg.MaxTokens))
}
