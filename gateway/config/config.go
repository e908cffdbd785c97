// Package config holds the gateway's settings and loads them in one order:
// defaults, then sbx.yaml in the data dir, then SBX_* environment variables,
// then command-line flags. Validate names the key and the bad value.
//
// Every key lives in one table (keys.go) that drives the environment names,
// the flag overrides, validation and masking, so a later section (vm.*,
// runs.*, web.*, mcp.*) adds a struct field and its table rows, nothing else.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"sbx.dev/sbx/internal/sshalgo"
)

// FileName is the YAML file read from the data dir.
const FileName = "sbx.yaml"

// DefaultDataDir is used when neither --data nor SBX_DATA is given.
const DefaultDataDir = ".sbx"

// Config is the effective configuration of one gateway process.
type Config struct {
	// DataDir holds the store, the host key and sbx.yaml. It is chosen
	// before the file is read, so it is not itself a YAML key.
	DataDir string `yaml:"-"`
	// BuildCache is SBX_CACHE, the machine's cache of built kernels and
	// images that the tasks fill; empty means the user's cache dir. The
	// QEMU backend keeps its KVM verdict there too, for every data dir.
	BuildCache string `yaml:"-"`

	SSH   SSH   `yaml:"ssh"`
	HTTP  HTTP  `yaml:"http"`
	Auth  Auth  `yaml:"auth"`
	Log   Log   `yaml:"log"`
	VM    VM    `yaml:"vm"`
	Fleet Fleet `yaml:"fleet"`
	Box   Box   `yaml:"box"`
	Git   Git   `yaml:"git"`
	Model Model `yaml:"model"`
	MCP   MCP   `yaml:"mcp"`
	Net   Net   `yaml:"net"`
	Web   Web   `yaml:"web"`
	Store Store `yaml:"store"`
	// Notify tunes the users' notifications.
	Notify Notify `yaml:"notify"`

	// AdminKeys is authorized_keys text for the first admin, used only when
	// the store has no user yet.
	AdminKeys string `yaml:"admin_keys"`
}

// SSH configures the SSH front.
type SSH struct {
	Listen             string   `yaml:"listen"`
	HandshakeTimeout   Duration `yaml:"handshake_timeout"`
	IdleTimeout        Duration `yaml:"idle_timeout"`
	MaxSessionsPerUser int      `yaml:"max_sessions_per_user"`
	// KeyExchanges, Ciphers and MACs are the transport algorithms offered,
	// in preference order: sshalgo's modern set unless an operator with
	// old clients lists others (any name golang.org/x/crypto/ssh
	// implements).
	KeyExchanges []string `yaml:"kex"`
	Ciphers      []string `yaml:"ciphers"`
	MACs         []string `yaml:"macs"`
}

// HTTP configures the HTTP front.
type HTTP struct {
	Listen  string `yaml:"listen"`
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// BodyLimit caps JSON request bodies in bytes; routes that take uploads
	// set their own limit.
	BodyLimit int64 `yaml:"body_limit"`
	// TrustedProxies are the peers whose first X-Forwarded-For hop is
	// believed (CIDR prefixes or single addresses).
	TrustedProxies []string `yaml:"trusted_proxies"`
	// RatePerMinute limits authenticated requests per user; 0 disables it.
	RatePerMinute int `yaml:"rate_per_minute"`
	// MetricsAuth puts /metrics behind an admin API key.
	MetricsAuth bool `yaml:"metrics_auth"`
}

// Auth configures the failed-authentication throttle shared by every front.
type Auth struct {
	ThrottleAttempts int      `yaml:"throttle_attempts"`
	ThrottleWindow   Duration `yaml:"throttle_window"`
}

// Log configures slog output.
type Log struct {
	Format string `yaml:"format"` // auto | text | json
	Level  string `yaml:"level"`  // debug | info | warn | error
}

// VM configures the microVMs of this host.
type VM struct {
	// Backend is "qemu" (default), "kubernetes" (a Pod per box, see
	// Kubernetes) or "none" (no boxes: the fronts say so).
	Backend string `yaml:"backend"`
	// Accel forces "kvm" or "tcg"; "" probes KVM once and caches it.
	Accel string `yaml:"accel"`
	// Image is the root filesystem of new boxes: "agent" (the Debian image
	// built by `go tool -modfile=tools/go.mod task image`) or "" (the tiny initramfs only).
	Image        string `yaml:"image"`
	MemoryMiB    int    `yaml:"memory_mib"`
	VCPUs        int    `yaml:"vcpus"`
	WorkspaceMiB int    `yaml:"workspace_mib"`
	// MaxBoxes and MaxMemoryMiB cap the machines of this host (0: no cap).
	MaxBoxes     int `yaml:"max_boxes"`
	MaxMemoryMiB int `yaml:"max_memory_mib"`
	// Kubernetes configures vm.backend kubernetes.
	Kubernetes Kubernetes `yaml:"kubernetes"`
}

// Kubernetes configures the Kubernetes backend (package vm/kube).
type Kubernetes struct {
	// Kubeconfig is a kubeconfig file; "" means the in-cluster config (the
	// gateway's service account).
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace holds the box Pods and claims.
	Namespace string `yaml:"namespace"`
	// RuntimeClass is the Pods' runtimeClassName ("kata-qemu" on Kata
	// nodes); "" runs them under the node's default runtime (no VM).
	RuntimeClass string `yaml:"runtime_class"`
	// StorageClass of the workspace claims; "" is the cluster's default.
	StorageClass string `yaml:"storage_class"`
	// Image is the box container image (its sbx has the pod-agent command).
	Image string `yaml:"image"`
}

// Store configures the database.
type Store struct {
	// DSN is "" for SQLite in the data dir, or a postgres:// URL: a
	// PostgreSQL database several gateways share.
	DSN string `yaml:"dsn"`
}

// Fleet configures the lifecycle of boxes and the caps per user.
type Fleet struct {
	MaxDuration     Duration `yaml:"max_duration"`
	IdleSleep       Duration `yaml:"idle_sleep"`
	SleepTTL        Duration `yaml:"sleep_ttl"`
	MaxBoxesPerUser int      `yaml:"max_boxes_per_user"`
	MaxBoxesPerHost int      `yaml:"max_boxes_per_host"`
	WarmPool        int      `yaml:"warm_pool"`
}

// Box caps what one box may ask for (new --memory, --cpus) and how long it
// may live, extensions (extend) included.
type Box struct {
	// MaxMemoryMiB and MaxCPUs cap one box's size; 0 derives them from the
	// host (HostBoxCaps): the smaller of vm.max_memory_mib and half the
	// host's RAM, and the host's CPU count.
	MaxMemoryMiB int `yaml:"max_memory_mib"`
	MaxCPUs      int `yaml:"max_cpus"`
	// MaxUserMemoryMiB and MaxUserCPUs cap the sum over one user's live
	// boxes (0: no cap but the host's).
	MaxUserMemoryMiB int `yaml:"max_user_memory_mib"`
	MaxUserCPUs      int `yaml:"max_user_cpus"`
	// MaxLifetime is the most a box may live from its start, extensions
	// included (0: no cap); at least fleet.max_duration.
	MaxLifetime Duration `yaml:"max_lifetime"`
}

// Model configures the model endpoint boxes reach through the gateway
// (their ANTHROPIC_BASE_URL): the gateway adds the key, the box never sees
// it, and each box has a request and token budget.
type Model struct {
	APIKey   string `yaml:"api_key"`
	Upstream string `yaml:"upstream"` // "" means https://api.anthropic.com
	// MaxRequests and MaxTokens bound one box (0: no bound).
	MaxRequests int `yaml:"max_requests"`
	MaxTokens   int `yaml:"max_tokens"`
}

// Web configures the browser console.
type Web struct {
	// SessionIdle ends a session unused this long; SessionLifetime one
	// this long after login.
	SessionIdle     Duration `yaml:"session_idle"`
	SessionLifetime Duration `yaml:"session_lifetime"`
	// SecureCookies marks the session cookie Secure even without
	// http.tls_cert (behind a TLS-terminating proxy).
	SecureCookies bool `yaml:"secure_cookies"`
	// PublicURL is the base of the login links `ssh … login` prints;
	// "" means the HTTP listen address.
	PublicURL string `yaml:"public_url"`
	// PreviewAddr is the listen address of the web previews of box ports
	// (a separate origin from the console's); "" turns previews off.
	PreviewAddr string `yaml:"preview_addr"`
	// PreviewURL is the previews' public base URL; "" means the preview
	// listen address. It must not be the console's origin.
	PreviewURL string `yaml:"preview_url"`
}

// MCP configures the MCP endpoint.
type MCP struct {
	// WaitMax caps how long delegate and answer wait for a run to finish or
	// ask before they return "running".
	WaitMax Duration `yaml:"wait_max"`
}

// Notify tunes the users' notification channels (fleet/notify*.go).
type Notify struct {
	// DigestHour is the UTC hour (0-23) the daily digest goes out.
	DigestHour int `yaml:"digest_hour"`
	// ExpiringLead is how long before the sleep TTL destroys a box its
	// owner is told.
	ExpiringLead Duration `yaml:"expiring_lead"`
}

// Git configures the git host of the GitHub accounts.
type Git struct {
	// Host is the base URL repos are cloned from and tokens probed against.
	Host string `yaml:"host"`
	// Kind is the API the host speaks, for tokens' identity and pull
	// requests: "github" (github.com and GitHub Enterprise) or "gitea"
	// (Gitea and Forgejo).
	Kind string `yaml:"kind"`
}

// Net configures the box network: what the gateway may dial on a box's
// behalf.
type Net struct {
	// PrivateUpstreams are the private addresses (loopback, RFC 1918, ...)
	// the git host, the model upstream and MCP servers may have all the
	// same: CIDR prefixes ("10.20.0.0/16"), addresses ("10.1.2.3") or
	// address:port ("127.0.0.1:8080", "[::1]:8080"). Empty: none; every
	// forbidden address is refused, as for the egress proxy, which this
	// never opens.
	PrivateUpstreams []string `yaml:"private_upstreams"`
	// DefaultPresets are the egress presets every box may reach, on top
	// of its own allow-list ("@npm", or "npm"; `ssh … presets` lists
	// them). Empty: none.
	DefaultPresets []string `yaml:"default_presets"`
	// Mirrors are the site's internal package mirrors, each "NAME
	// HOST[:PORT] [RANGE …]" (ranges: CIDR prefixes or addresses its
	// addresses may fall in; a host that is an address may omit them): an
	// exception to the address policy for that host, which a box reaches
	// only when its allow-list names it. Empty: none (admins add more with
	// `ssh … mirror add`).
	Mirrors []string `yaml:"mirrors"`
}

// Default returns the configuration used when nothing overrides it.
func Default() Config {
	return Config{
		DataDir: DefaultDataDir,
		SSH: SSH{
			Listen:             "127.0.0.1:2222",
			HandshakeTimeout:   Duration(10 * time.Second),
			IdleTimeout:        Duration(15 * time.Minute),
			MaxSessionsPerUser: 16,
			KeyExchanges:       sshalgo.Default(sshalgo.KeyExchange),
			Ciphers:            sshalgo.Default(sshalgo.Cipher),
			MACs:               sshalgo.Default(sshalgo.MAC),
		},
		HTTP: HTTP{
			Listen:        "127.0.0.1:8080",
			BodyLimit:     1 << 20,
			RatePerMinute: 600,
		},
		Auth: Auth{
			ThrottleAttempts: 20,
			ThrottleWindow:   Duration(10 * time.Minute),
		},
		Log: Log{Format: "auto", Level: "info"},
		VM: VM{
			Backend: "qemu", Image: "agent", MemoryMiB: 1024, VCPUs: 1, WorkspaceMiB: 4096,
			MaxBoxes: 20, MaxMemoryMiB: 16 << 10,
			Kubernetes: Kubernetes{Namespace: "sbx-boxes"},
		},
		Fleet: Fleet{
			MaxDuration:     Duration(4 * time.Hour),
			IdleSleep:       Duration(15 * time.Minute),
			SleepTTL:        Duration(24 * time.Hour),
			MaxBoxesPerUser: 5,
			MaxBoxesPerHost: 20,
		},
		Box:    Box{MaxLifetime: Duration(24 * time.Hour)},
		Git:    Git{Host: "https://github.com", Kind: "github"},
		MCP:    MCP{WaitMax: Duration(50 * time.Second)},
		Notify: Notify{DigestHour: 8, ExpiringLead: Duration(time.Hour)},
		Web:    Web{SessionIdle: Duration(12 * time.Hour), SessionLifetime: Duration(7 * 24 * time.Hour)},
	}
}

// Sources is everything Load reads besides the YAML file.
type Sources struct {
	// DataDir from --data; empty means SBX_DATA, then DefaultDataDir.
	DataDir string
	// Environ is os.Environ() in production.
	Environ []string
	// Flags maps config keys ("ssh.listen") to values given on the command
	// line; they win over everything else.
	Flags map[string]string
}

// Load builds the effective configuration and validates it.
func Load(src Sources) (Config, error) {
	cfg := Default()
	env := map[string]string{}
	for _, kv := range src.Environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, EnvPrefix) {
			env[k] = v
		}
	}
	switch {
	case src.DataDir != "":
		cfg.DataDir = src.DataDir
	case env[EnvData] != "":
		cfg.DataDir = env[EnvData]
	}
	cfg.BuildCache = env[EnvCache]

	path := filepath.Join(cfg.DataDir, FileName)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return Config{}, fmt.Errorf("read config %s: %w", path, err)
	default:
		if err := decodeYAML(data, &cfg); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
	}

	if err := applyEnv(&cfg, env); err != nil {
		return Config{}, err
	}
	for _, k := range slices.Sorted(maps.Keys(src.Flags)) {
		f, ok := lookup(k)
		if !ok {
			return Config{}, fmt.Errorf("config: unknown key %q", k)
		}
		if err := f.set(&cfg, src.Flags[k]); err != nil {
			return Config{}, fmt.Errorf("config: flag for %s: %q: %w", k, src.Flags[k], err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func decodeYAML(data []byte, cfg *Config) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	// An unknown key is a typo that would otherwise be silently ignored.
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		return err
	}
	return nil
}

func applyEnv(cfg *Config, env map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(env)) {
		// An empty variable counts as unset, as SBX_DATA does.
		if isOtherEnv(name) || env[name] == "" {
			continue
		}
		f, ok := lookupEnv(name)
		if !ok {
			// A typo or another tool's variable: the caller warns about it
			// (UnknownEnvs) once it has a logger; it must not stop a start.
			continue
		}
		if err := f.set(cfg, env[name]); err != nil {
			return fmt.Errorf("config: %s (%s): %q: %w", name, f.key, env[name], err)
		}
	}
	return nil
}

// YAML renders the configuration with secrets masked, for `sbx config`.
func (c Config) YAML() ([]byte, error) { return c.yamlWith(table) }

func (c Config) yamlWith(fields []field) ([]byte, error) {
	masked := c
	for _, f := range fields {
		if f.mask != nil {
			if err := f.set(&masked, f.mask(f.get(&masked))); err != nil {
				return nil, fmt.Errorf("mask %s: %w", f.key, err)
			}
			continue
		}
		if f.secret && f.get(&masked) != "" {
			if err := f.set(&masked, Mask); err != nil {
				return nil, fmt.Errorf("mask %s: %w", f.key, err)
			}
		}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(masked); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Mask replaces a secret's value in printed configuration.
const Mask = "********"

// Duration is a time.Duration written as "10s" in YAML.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalYAML writes the duration as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// UnmarshalYAML reads a Go duration string ("90s", "10m").
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (want e.g. 30s, 10m): %w", n.Line, n.Value, err)
	}
	*d = Duration(v)
	return nil
}
