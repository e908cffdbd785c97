package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/seal"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/kube"
	"sbx.dev/sbx/vm/qemu"
	"sbx.dev/sbx/vm/qemu/host"
)

// core is what the fronts share besides identities: the GitHub accounts,
// the one redactor, the machines and the fleet over them.
type core struct {
	accounts *accounts.Service
	red      *redact.Redactor
	vm       *vm.Manager
	fleet    *fleet.Fleet
	net      *network
	sealer   *seal.Sealer
	// ready is fleet once it exists, for the goroutines that may ask
	// before (the redactor's reloads, the box network).
	ready atomic.Pointer[fleet.Fleet]
	// why is set when the gateway runs without boxes (vm.backend none, or
	// QEMU/kernel missing): the SSH front says it (the web has its own
	// sentence).
	why string
}

// startCore builds the core. A host that cannot run boxes still serves
// identities and the fronts, which then say why boxes are missing.
func (s *Server) startCore(ctx context.Context) error {
	var err error
	if s.shared != nil && os.Getenv(seal.EnvKey) == "" {
		// A key file in this data dir would seal what no other gateway can
		// open (GitHub tokens, MCP headers) without any error until then.
		return fmt.Errorf("store.dsn is a database gateways share: set %s, the same on every gateway, so a secret sealed by one opens on all (a key file in one data dir would not)", seal.EnvKey)
	}
	s.core.sealer, err = seal.Load(s.cfg.DataDir, os.Getenv)
	if err != nil {
		return fmt.Errorf("seal key: %w", err)
	}
	kind, fg, err := newForge(s.cfg.Git.Kind, s.cfg.Git.Host)
	if err != nil {
		return err
	}
	s.core.accounts, err = accounts.New(s.store, s.core.sealer, s.audit, accounts.Config{Host: s.cfg.Git.Host, Kind: kind, Now: s.opts.Now})
	if err != nil {
		return fmt.Errorf("git.host: %w", err)
	}
	s.core.red, err = redact.New(ctx, s.secrets, redact.Options{Logger: s.log})
	if err != nil {
		return fmt.Errorf("redactor: %w", err)
	}
	// Audit rows can quote what came from a box: every view of them (and
	// every row and log line written from now on) passes the redactor.
	s.audit.Redact(func(t string) string { return s.core.red.String(t).String() })
	if s.cfg.VM.Backend == "none" {
		s.core.why = "boxes are not available on this gateway (vm.backend=none)"
		return nil
	}
	// The private addresses the git host, the model upstream and MCP
	// servers may have: the box network dials them, the core registers
	// MCP servers at them.
	private, err := s.cfg.PrivateUpstreams()
	if err != nil {
		return err
	}
	// Each machine's one network path; its policy comes from the fleet.
	// A QEMU box reaches it through its socket; a box Pod through the
	// backend, which dials it per connection (kubeEgress), so it
	// exists before the backend watches its boxes.
	s.core.net = newNetwork(s.bg, s.cfg.DataDir, s.cfg.Model, private, s.audit, s.log.With("part", "boxnet"), s.opts.Egress)
	s.core.net.fleet = s.core.ready.Load
	vc, err := s.backend(ctx)
	if err != nil {
		s.core.why = fmt.Sprintf("boxes are unavailable on this host: %v (run `sbx doctor`)", err)
		if s.cfg.VM.Backend == "kubernetes" {
			s.core.why = fmt.Sprintf("boxes are unavailable on this gateway: %v (check vm.kubernetes.*)", err)
		}
		s.log.Warn("running without boxes", "why", err)
		return nil
	}
	var id string
	if s.shared != nil {
		// What every gateway sharing the records notices (a cluster's boxes)
		// is done by the lease holder.
		id = gatewayID()
		vc.Once = fleet.LeaseOnce(s.shared, id, s.log)
	}
	vc.Logger = s.log.With("part", "vm")
	s.core.vm, err = vm.New(ctx, vc)
	if err != nil {
		_ = vc.Backend.Close()
		return fmt.Errorf("vm manager: %w", err)
	}
	var cluster fleet.Cluster
	if s.shared != nil {
		cluster = s.shared
	}
	fc := s.cfg.Fleet
	boxMem, boxCPUs := s.cfg.HostBoxCaps()
	s.core.fleet, err = fleet.New(ctx, fleet.Config{
		Network: s.core.net,
		MCP:     s.store, Sealer: s.core.sealer, PrivateUpstreams: private,
		Notify: s.store, Notifications: fleet.NotifyConfig{PublicURL: s.cfg.Web.PublicURL,
			DigestHour: s.cfg.Notify.DigestHour, ExpiringLead: s.cfg.Notify.ExpiringLead.D()},
		Store: s.store, VM: s.core.vm, Accounts: s.core.accounts, Audit: s.audit, Redactor: s.core.red,
		DataDir: s.cfg.DataDir, Now: s.opts.Now, Logger: s.log.With("part", "fleet"),
		Cluster: cluster, ID: id, Forge: fg,
		Presets: s.store, SitePresets: s.cfg.Net.DefaultPresets, Profiles: s.store,
		Mirrors: s.store, SiteMirrors: s.cfg.Net.Mirrors,
		Policy: fleet.Policy{
			MaxDuration: fc.MaxDuration.D(), IdleSleep: fc.IdleSleep.D(), SleepTTL: fc.SleepTTL.D(),
			MaxBoxesPerUser: fc.MaxBoxesPerUser, MaxBoxesPerHost: fc.MaxBoxesPerHost, WarmPool: fc.WarmPool,
			Spec:            vm.Spec{Image: s.cfg.VM.Image, MemoryMiB: s.cfg.VM.MemoryMiB, VCPUs: s.cfg.VM.VCPUs, WorkspaceMiB: s.cfg.VM.WorkspaceMiB},
			MaxBoxMemoryMiB: boxMem, MaxBoxVCPUs: boxCPUs,
			MaxUserMemoryMiB: s.cfg.Box.MaxUserMemoryMiB, MaxUserVCPUs: s.cfg.Box.MaxUserCPUs,
			MaxLifetime: s.cfg.Box.MaxLifetime.D(),
		},
	})
	if err != nil {
		s.core.vm.Close()
		return fmt.Errorf("fleet: %w", err)
	}
	s.core.ready.Store(s.core.fleet)
	// Now the MCP servers' secrets can be listed too.
	if err := s.core.red.Refresh(ctx); err != nil {
		s.log.Warn("redactor refresh", "err", err)
	}
	return nil
}

// backend is the machines' backend vm.backend names, with the caps the
// manager keeps: a QEMU host's own; a cluster's namespace quota holds them
// for every gateway, so its manager keeps none.
func (s *Server) backend(ctx context.Context) (vm.Config, error) {
	log := s.log.With("part", "vm")
	if s.cfg.VM.Backend != "kubernetes" {
		be, err := qemu.New(ctx, qemu.Config{DataDir: s.cfg.DataDir, Accel: s.cfg.VM.Accel, Init: s.guestBinary(),
			BuildCache: host.BuildCache(s.cfg.BuildCache), Logger: log})
		if err != nil {
			return vm.Config{}, err
		}
		return vm.Config{Backend: be, MaxBoxes: s.cfg.VM.MaxBoxes, MaxMemoryMiB: s.cfg.VM.MaxMemoryMiB}, nil
	}
	k := s.cfg.VM.Kubernetes
	be, err := kube.New(ctx, kube.Config{
		Kubeconfig: k.Kubeconfig, Namespace: k.Namespace, RuntimeClass: k.RuntimeClass,
		StorageClass: k.StorageClass, Image: k.Image, Logger: log,
		MaxBoxes: s.cfg.VM.MaxBoxes, MaxMemoryMiB: s.cfg.VM.MaxMemoryMiB,
		Egress: s.kubeEgress,
	})
	if err != nil {
		return vm.Config{}, err
	}
	return vm.Config{Backend: be}, nil
}

// kubeEgress joins a box Pod's connection to this gateway's network path
// for its machine: every gateway of a cluster serves every box, whichever
// gateway made it (the socket in its record is that gateway's).
func (s *Server) kubeEgress(ctx context.Context, vmName string, _ vm.Spec) (net.Conn, error) {
	sock, err := s.core.net.Attach(ctx, vmName)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", sock)
}

// gatewayID names this process among the gateways sharing a database
// (lease holder, origin of notifications).
func gatewayID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// GuestBinaryName is the guest binary `go tool -modfile=tools/go.mod task build` puts next to sbx
// (sbx built with the tag "guest").
const GuestBinaryName = "sbx-guest"

// guestBinary is what boxes boot: Options.GuestBinary, else sbx-guest next
// to this executable, else this executable itself (it serves as a guest
// too, with a slower boot and hook calls: it holds the whole gateway).
func (s *Server) guestBinary() string {
	if s.opts.GuestBinary != "" {
		return s.opts.GuestBinary
	}
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(self), GuestBinaryName)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
		return p
	}
	s.log.Warn("no guest binary next to sbx; boxes boot sbx itself (slower): run `go tool -modfile=tools/go.mod task build`", "looked_for", p)
	return ""
}

// stopCore stops following runs and watching machines; boxes keep running
// and the next start resumes them.
func (s *Server) stopCore() error {
	var err error
	if s.core.fleet != nil {
		err = s.core.fleet.Close()
	}
	if s.core.vm != nil {
		if cerr := s.core.vm.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// secrets lists every secret the gateway holds in plaintext, for the
// redactor: each user's GitHub tokens.
func (s *Server) secrets(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	users, err := s.keys.Users(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	if s.cfg.Model.APIKey != "" {
		out = append(out, s.cfg.Model.APIKey)
	}
	for _, u := range users {
		toks, err := s.core.accounts.Secrets(ctx, u.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, toks...)
		if f := s.core.ready.Load(); f != nil {
			mcp, err := f.MCPSecrets(ctx, u.Name)
			if err != nil {
				return nil, err
			}
			out = append(out, mcp...)
		}
	}
	return out, nil
}
