package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/internal/sshalgo"
)

// EnvPrefix starts every environment variable the gateway reads.
const EnvPrefix = "SBX_"

// EnvData names the data dir; it is read before sbx.yaml, so it is not a key.
const EnvData = "SBX_DATA"

// EnvCache names the build cache (kernels, images, the KVM verdict).
const EnvCache = "SBX_CACHE"

// otherEnv are SBX_ variables read by other packages, not config keys.
// Keep this list short and documented: anything else draws a warning.
var otherEnv = []string{
	EnvData,
	EnvCache,         // vm: cache for built kernels and images
	"SBX_HOOK_LOG",   // hooks (guest side): decision log file
	"SBX_HOOK_STATE", // hooks (guest side): state dir
	"SBX_LANE",       // hooks (guest side): which lane a hook runs for
	"SBX_WORKSPACE",  // hooks (guest side): the workspace root
	"SBX_BOX",        // fleet: a box's own name, in its agent's environment
	"SBX_SETTINGS",   // fleet: managed agent settings handed to a delegate
	"SBX_SEAL_KEY",   // fleet/seal: the key that seals secrets at rest (base64)
	// The test cluster (hack/cluster, hack/with-cluster.sh) and the tests:
	// a gateway started from a test or a shell that set them is no typo.
	"SBX_TEST_CLUSTER", "SBX_CLUSTER_DIR", "SBX_KUBECONFIG", "SBX_POSTGRES_DSN", "SBX_TEST_BINARY",
	"SBX_CLAUDE", "SBX_BENCH_AB", "SBX_HOOKBENCH", "SBX_UPDATE_CSS",
}

func isOtherEnv(name string) bool { return slices.Contains(otherEnv, name) }

// field is one configuration key: how to read it from a string (env, flag)
// and how to print it.
type field struct {
	key    string
	secret bool
	// mask, when set, rewrites the value for printing (a DSN keeps all
	// but its password).
	mask func(string) string
	set  func(c *Config, v string) error
	get  func(c *Config) string
}

// EnvName is the environment variable for a key: ssh.listen → SBX_SSH_LISTEN.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer(".", "_").Replace(key))
}

func str(key string, p func(*Config) *string) field {
	return field{key: key,
		set: func(c *Config, v string) error { *p(c) = v; return nil },
		get: func(c *Config) string { return *p(c) }}
}

func integer(key string, p func(*Config) *int) field {
	return field{key: key,
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return errors.New("not an integer")
			}
			*p(c) = n
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(*p(c)) }}
}

func dur(key string, p func(*Config) *Duration) field {
	return field{key: key,
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return errors.New("not a duration (want e.g. 30s, 10m)")
			}
			*p(c) = Duration(d)
			return nil
		},
		get: func(c *Config) string { return p(c).D().String() }}
}

func boolean(key string, p func(*Config) *bool) field {
	return field{key: key,
		set: func(c *Config, v string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return errors.New("not a boolean (true or false)")
			}
			*p(c) = b
			return nil
		},
		get: func(c *Config) string { return strconv.FormatBool(*p(c)) }}
}

// list is a comma-separated list in env and flags; space around items and
// empty items are dropped.
func list(key string, p func(*Config) *[]string) field {
	return field{key: key,
		set: func(c *Config, v string) error {
			*p(c) = nil
			for item := range strings.SplitSeq(v, ",") {
				if item = strings.TrimSpace(item); item != "" {
					*p(c) = append(*p(c), item)
				}
			}
			return nil
		},
		get: func(c *Config) string { return strings.Join(*p(c), ",") }}
}

// table lists every key. Lists are comma-separated in env and flags.
var table = []field{
	str("ssh.listen", func(c *Config) *string { return &c.SSH.Listen }),
	dur("ssh.handshake_timeout", func(c *Config) *Duration { return &c.SSH.HandshakeTimeout }),
	dur("ssh.idle_timeout", func(c *Config) *Duration { return &c.SSH.IdleTimeout }),
	integer("ssh.max_sessions_per_user", func(c *Config) *int { return &c.SSH.MaxSessionsPerUser }),
	list("ssh.kex", func(c *Config) *[]string { return &c.SSH.KeyExchanges }),
	list("ssh.ciphers", func(c *Config) *[]string { return &c.SSH.Ciphers }),
	list("ssh.macs", func(c *Config) *[]string { return &c.SSH.MACs }),
	str("http.listen", func(c *Config) *string { return &c.HTTP.Listen }),
	str("http.tls_cert", func(c *Config) *string { return &c.HTTP.TLSCert }),
	str("http.tls_key", func(c *Config) *string { return &c.HTTP.TLSKey }),
	{key: "http.body_limit",
		set: func(c *Config, v string) error {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return errors.New("not a byte count")
			}
			c.HTTP.BodyLimit = n
			return nil
		},
		get: func(c *Config) string { return strconv.FormatInt(c.HTTP.BodyLimit, 10) }},
	list("http.trusted_proxies", func(c *Config) *[]string { return &c.HTTP.TrustedProxies }),
	integer("http.rate_per_minute", func(c *Config) *int { return &c.HTTP.RatePerMinute }),
	boolean("http.metrics_auth", func(c *Config) *bool { return &c.HTTP.MetricsAuth }),
	integer("auth.throttle_attempts", func(c *Config) *int { return &c.Auth.ThrottleAttempts }),
	dur("auth.throttle_window", func(c *Config) *Duration { return &c.Auth.ThrottleWindow }),
	str("log.format", func(c *Config) *string { return &c.Log.Format }),
	str("log.level", func(c *Config) *string { return &c.Log.Level }),
	str("admin_keys", func(c *Config) *string { return &c.AdminKeys }),
	str("vm.backend", func(c *Config) *string { return &c.VM.Backend }),
	str("vm.accel", func(c *Config) *string { return &c.VM.Accel }),
	str("vm.image", func(c *Config) *string { return &c.VM.Image }),
	integer("vm.memory_mib", func(c *Config) *int { return &c.VM.MemoryMiB }),
	integer("vm.vcpus", func(c *Config) *int { return &c.VM.VCPUs }),
	integer("vm.workspace_mib", func(c *Config) *int { return &c.VM.WorkspaceMiB }),
	integer("vm.max_boxes", func(c *Config) *int { return &c.VM.MaxBoxes }),
	integer("vm.max_memory_mib", func(c *Config) *int { return &c.VM.MaxMemoryMiB }),
	str("vm.kubernetes.kubeconfig", func(c *Config) *string { return &c.VM.Kubernetes.Kubeconfig }),
	str("vm.kubernetes.namespace", func(c *Config) *string { return &c.VM.Kubernetes.Namespace }),
	str("vm.kubernetes.runtime_class", func(c *Config) *string { return &c.VM.Kubernetes.RuntimeClass }),
	str("vm.kubernetes.storage_class", func(c *Config) *string { return &c.VM.Kubernetes.StorageClass }),
	str("vm.kubernetes.image", func(c *Config) *string { return &c.VM.Kubernetes.Image }),
	dsnField("store.dsn", func(c *Config) *string { return &c.Store.DSN }),
	dur("fleet.max_duration", func(c *Config) *Duration { return &c.Fleet.MaxDuration }),
	dur("fleet.idle_sleep", func(c *Config) *Duration { return &c.Fleet.IdleSleep }),
	dur("fleet.sleep_ttl", func(c *Config) *Duration { return &c.Fleet.SleepTTL }),
	integer("fleet.max_boxes_per_user", func(c *Config) *int { return &c.Fleet.MaxBoxesPerUser }),
	integer("fleet.max_boxes_per_host", func(c *Config) *int { return &c.Fleet.MaxBoxesPerHost }),
	integer("fleet.warm_pool", func(c *Config) *int { return &c.Fleet.WarmPool }),
	integer("box.max_memory_mib", func(c *Config) *int { return &c.Box.MaxMemoryMiB }),
	integer("box.max_cpus", func(c *Config) *int { return &c.Box.MaxCPUs }),
	integer("box.max_user_memory_mib", func(c *Config) *int { return &c.Box.MaxUserMemoryMiB }),
	integer("box.max_user_cpus", func(c *Config) *int { return &c.Box.MaxUserCPUs }),
	dur("box.max_lifetime", func(c *Config) *Duration { return &c.Box.MaxLifetime }),
	urlStr("git.host", func(c *Config) *string { return &c.Git.Host }),
	str("git.kind", func(c *Config) *string { return &c.Git.Kind }),
	secretStr("model.api_key", func(c *Config) *string { return &c.Model.APIKey }),
	urlStr("model.upstream", func(c *Config) *string { return &c.Model.Upstream }),
	integer("model.max_requests", func(c *Config) *int { return &c.Model.MaxRequests }),
	integer("model.max_tokens", func(c *Config) *int { return &c.Model.MaxTokens }),
	dur("mcp.wait_max", func(c *Config) *Duration { return &c.MCP.WaitMax }),
	list("net.private_upstreams", func(c *Config) *[]string { return &c.Net.PrivateUpstreams }),
	list("net.default_presets", func(c *Config) *[]string { return &c.Net.DefaultPresets }),
	list("net.mirrors", func(c *Config) *[]string { return &c.Net.Mirrors }),
	dur("web.session_idle", func(c *Config) *Duration { return &c.Web.SessionIdle }),
	dur("web.session_lifetime", func(c *Config) *Duration { return &c.Web.SessionLifetime }),
	boolean("web.secure_cookies", func(c *Config) *bool { return &c.Web.SecureCookies }),
	urlStr("web.public_url", func(c *Config) *string { return &c.Web.PublicURL }),
	str("web.preview_addr", func(c *Config) *string { return &c.Web.PreviewAddr }),
	urlStr("web.preview_url", func(c *Config) *string { return &c.Web.PreviewURL }),
	integer("notify.digest_hour", func(c *Config) *int { return &c.Notify.DigestHour }),
	dur("notify.expiring_lead", func(c *Config) *Duration { return &c.Notify.ExpiringLead }),
}

// dsnField is a database URL whose password is the secret: printed with
// only the password masked, so the host and database stay readable.
func dsnField(key string, p func(*Config) *string) field {
	f := str(key, p)
	f.mask = MaskDSN
	return f
}

// MaskDSN replaces the password of a postgres:// URL (or a key=value DSN's
// password=) with Mask; anything else is returned unchanged.
func MaskDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Mask)
			return strings.Replace(u.String(), url.QueryEscape(Mask), Mask, 1)
		}
		return dsn
	}
	fields := strings.Fields(dsn)
	for i, kv := range fields {
		if k, _, ok := strings.Cut(kv, "="); ok && strings.EqualFold(k, "password") {
			fields[i] = k + "=" + Mask
		}
	}
	return strings.Join(fields, " ")
}

// urlStr is a base URL: printed with its userinfo (https://TOKEN@host,
// https://user:password@host) masked whole, the host and path readable.
func urlStr(key string, p func(*Config) *string) field {
	f := str(key, p)
	f.mask = maskUserinfo
	return f
}

// maskUserinfo replaces a URL's userinfo with Mask; anything else is
// returned unchanged.
func maskUserinfo(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	scheme, rest, ok := strings.Cut(u.String(), "://")
	if !ok {
		return Mask
	}
	return scheme + "://" + Mask + "@" + rest
}

func secretStr(key string, p func(*Config) *string) field {
	f := str(key, p)
	f.secret = true
	return f
}

// Keys lists every configuration key in table order.
func Keys() []string {
	out := make([]string, len(table))
	for i, f := range table {
		out[i] = f.key
	}
	return out
}

func lookup(key string) (field, bool) {
	for _, f := range table {
		if f.key == key {
			return f, true
		}
	}
	return field{}, false
}

func lookupEnv(name string) (field, bool) {
	for _, f := range table {
		if EnvName(f.key) == name {
			return f, true
		}
	}
	return field{}, false
}

func envNames() []string {
	var out []string
	for _, f := range table {
		out = append(out, EnvName(f.key))
	}
	return append(out, otherEnv...)
}

// Validate checks every key; the error names the key and the bad value.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, value any, why string) {
		errs = append(errs, fmt.Errorf("config: %s: %q: %s", key, fmt.Sprint(value), why))
	}
	if c.DataDir == "" {
		bad("data", c.DataDir, "must not be empty")
	}
	if err := checkListen(c.SSH.Listen); err != nil {
		bad("ssh.listen", c.SSH.Listen, err.Error())
	}
	if err := checkListen(c.HTTP.Listen); err != nil {
		bad("http.listen", c.HTTP.Listen, err.Error())
	}
	if c.SSH.HandshakeTimeout.D() <= 0 {
		bad("ssh.handshake_timeout", c.SSH.HandshakeTimeout.D(), "must be positive")
	}
	if c.SSH.IdleTimeout.D() <= 0 {
		bad("ssh.idle_timeout", c.SSH.IdleTimeout.D(), "must be positive")
	}
	if c.SSH.MaxSessionsPerUser < 1 {
		bad("ssh.max_sessions_per_user", c.SSH.MaxSessionsPerUser, "must be at least 1")
	}
	for _, l := range []struct {
		key   string
		kind  sshalgo.Kind
		names []string
	}{{"ssh.kex", sshalgo.KeyExchange, c.SSH.KeyExchanges}, {"ssh.ciphers", sshalgo.Cipher, c.SSH.Ciphers}, {"ssh.macs", sshalgo.MAC, c.SSH.MACs}} {
		if err := sshalgo.Check(l.kind, l.names); err != nil {
			// The error starts with the bad name, quoted.
			errs = append(errs, fmt.Errorf("config: %s: %w", l.key, err))
		}
	}
	switch c.VM.Backend {
	case "qemu", "none":
	case "kubernetes":
		k := c.VM.Kubernetes
		if k.Image == "" {
			bad("vm.kubernetes.image", k.Image, "must name the box container image when vm.backend is kubernetes")
		}
		if msgs := validation.IsDNS1123Label(k.Namespace); len(msgs) > 0 {
			bad("vm.kubernetes.namespace", k.Namespace, "not a namespace name: "+strings.Join(msgs, "; "))
		}
		for key, v := range map[string]string{"vm.kubernetes.runtime_class": k.RuntimeClass, "vm.kubernetes.storage_class": k.StorageClass} {
			if v == "" {
				continue
			}
			if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
				bad(key, v, "not a class name: "+strings.Join(msgs, "; "))
			}
		}
		if k.Kubeconfig != "" {
			if _, err := os.Stat(k.Kubeconfig); err != nil {
				bad("vm.kubernetes.kubeconfig", k.Kubeconfig, "cannot read: "+err.Error())
			}
		}
	default:
		bad("vm.backend", c.VM.Backend, "want qemu, kubernetes or none")
	}
	if c.Store.DSN != "" {
		if u, err := url.Parse(c.Store.DSN); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
			// The value may hold a password: name it masked.
			bad("store.dsn", MaskDSN(c.Store.DSN), "want empty (SQLite in the data dir) or a postgres:// URL")
		}
	}
	switch c.VM.Accel {
	case "", "kvm", "tcg":
	default:
		bad("vm.accel", c.VM.Accel, "want kvm, tcg or empty (probe)")
	}
	if c.VM.MemoryMiB < 128 {
		bad("vm.memory_mib", c.VM.MemoryMiB, "must be at least 128")
	}
	if c.VM.VCPUs < 1 || c.VM.VCPUs > 64 {
		bad("vm.vcpus", c.VM.VCPUs, "must be 1 to 64")
	}
	if c.VM.WorkspaceMiB < 64 {
		bad("vm.workspace_mib", c.VM.WorkspaceMiB, "must be at least 64")
	}
	for k, v := range map[string]int{"vm.max_boxes": c.VM.MaxBoxes, "vm.max_memory_mib": c.VM.MaxMemoryMiB,
		"fleet.max_boxes_per_user": c.Fleet.MaxBoxesPerUser, "fleet.max_boxes_per_host": c.Fleet.MaxBoxesPerHost,
		"box.max_memory_mib": c.Box.MaxMemoryMiB, "box.max_cpus": c.Box.MaxCPUs,
		"box.max_user_memory_mib": c.Box.MaxUserMemoryMiB, "box.max_user_cpus": c.Box.MaxUserCPUs} {
		if v < 0 {
			bad(k, v, "must be 0 (no cap) or more")
		}
	}
	if c.Fleet.WarmPool < 0 || c.Fleet.WarmPool > 64 {
		bad("fleet.warm_pool", c.Fleet.WarmPool, "must be 0 to 64")
	}
	for k, v := range map[string]Duration{"fleet.max_duration": c.Fleet.MaxDuration, "fleet.idle_sleep": c.Fleet.IdleSleep, "fleet.sleep_ttl": c.Fleet.SleepTTL} {
		if v.D() < 0 {
			bad(k, v.D(), "must be 0 (off) or more")
		}
	}
	switch lt, md := c.Box.MaxLifetime.D(), c.Fleet.MaxDuration.D(); {
	case lt < 0:
		bad("box.max_lifetime", lt, "must be 0 (no cap) or more")
	case lt > 0 && md > lt:
		bad("box.max_lifetime", lt, fmt.Sprintf("must be at least fleet.max_duration (%v), or 0 (no cap)", md))
	}
	if u, err := url.Parse(c.Git.Host); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		bad("git.host", c.Git.Host, "want a base URL like https://github.com")
	}
	if _, err := forge.ParseKind(c.Git.Kind); err != nil {
		bad("git.kind", c.Git.Kind, "want github (github.com, GitHub Enterprise) or gitea (Gitea, Forgejo)")
	}
	if c.Model.Upstream != "" {
		if u, err := url.Parse(c.Model.Upstream); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("model.upstream", c.Model.Upstream, "want a base URL like https://api.anthropic.com")
		}
	}
	private, err := c.PrivateUpstreams()
	if err != nil {
		errs = append(errs, err)
	}
	if _, err := netpolicy.ParsePresetRefs(c.Net.DefaultPresets, true); err != nil {
		errs = append(errs, fmt.Errorf("config: net.default_presets: %w", err))
	}
	for _, m := range c.Net.Mirrors {
		if _, err := netpolicy.ParseMirrorSpec(m); err != nil {
			errs = append(errs, fmt.Errorf("config: net.mirrors: %w", err))
		}
	}
	// An upstream the box network would refuse: said at start, not at a
	// box's first request. (A name is judged by its addresses at dial.)
	for _, kv := range [][2]string{{"git.host", c.Git.Host}, {"model.upstream", c.Model.Upstream}} {
		if u, err := url.Parse(kv[1]); err == nil && u.Host != "" {
			if err := netpolicy.CheckUpstream(u, private); err != nil {
				bad(kv[0], maskUserinfo(kv[1]), err.Error()+": boxes may not reach it unless net.private_upstreams lists it")
			}
		}
	}
	if c.Web.SessionIdle.D() < time.Minute || c.Web.SessionLifetime.D() < c.Web.SessionIdle.D() {
		bad("web.session_idle", c.Web.SessionIdle.D(), "must be at least 1m and at most web.session_lifetime")
	}
	if c.Web.PublicURL != "" {
		if u, err := url.Parse(c.Web.PublicURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("web.public_url", c.Web.PublicURL, "want a base URL like https://sbx.example.com")
		}
	}
	if c.Web.PreviewAddr != "" {
		if err := checkListen(c.Web.PreviewAddr); err != nil {
			bad("web.preview_addr", c.Web.PreviewAddr, err.Error())
		} else if _, port, _ := net.SplitHostPort(c.Web.PreviewAddr); port != "0" && (c.Web.PreviewAddr == c.HTTP.Listen || c.Web.PreviewAddr == c.SSH.Listen) {
			bad("web.preview_addr", c.Web.PreviewAddr, "must differ from http.listen and ssh.listen: previews need their own origin")
		}
	}
	if c.Web.PreviewURL != "" {
		u, err := url.Parse(c.Web.PreviewURL)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			bad("web.preview_url", c.Web.PreviewURL, "want a base URL like https://preview.sbx.example.com")
		case c.Web.PreviewAddr == "":
			bad("web.preview_url", c.Web.PreviewURL, "needs web.preview_addr (the listener it fronts)")
		case sameOrigin(u, c.Web.PublicURL):
			bad("web.preview_url", c.Web.PreviewURL, "must not be the console's origin (web.public_url): box pages there would own the session")
		}
	}
	if c.Notify.DigestHour < 0 || c.Notify.DigestHour > 23 {
		bad("notify.digest_hour", c.Notify.DigestHour, "want a UTC hour from 0 to 23")
	}
	if c.Notify.ExpiringLead.D() <= 0 {
		bad("notify.expiring_lead", c.Notify.ExpiringLead.D(), "must be positive")
	}
	if c.MCP.WaitMax.D() <= 0 || c.MCP.WaitMax.D() > 10*time.Minute {
		bad("mcp.wait_max", c.MCP.WaitMax.D(), "must be positive and at most 10m")
	}
	if c.Model.MaxRequests < 0 || c.Model.MaxTokens < 0 {
		bad("model.max_requests", c.Model.MaxRequests, "budgets must be 0 (no bound) or more")
	}
	if (c.HTTP.TLSCert == "") != (c.HTTP.TLSKey == "") {
		bad("http.tls_cert", c.HTTP.TLSCert, "http.tls_cert and http.tls_key must be set together")
	}
	for _, kv := range [][2]string{{"http.tls_cert", c.HTTP.TLSCert}, {"http.tls_key", c.HTTP.TLSKey}} {
		if kv[1] == "" {
			continue
		}
		if _, err := os.Stat(kv[1]); err != nil {
			bad(kv[0], kv[1], "cannot read: "+err.Error())
		}
	}
	if c.HTTP.BodyLimit < 1024 {
		bad("http.body_limit", c.HTTP.BodyLimit, "must be at least 1024 bytes")
	}
	if _, err := c.TrustedProxyPrefixes(); err != nil {
		errs = append(errs, err)
	}
	if c.HTTP.RatePerMinute < 0 {
		bad("http.rate_per_minute", c.HTTP.RatePerMinute, "must be 0 (off) or positive")
	}
	if c.Auth.ThrottleAttempts < 1 {
		bad("auth.throttle_attempts", c.Auth.ThrottleAttempts, "must be at least 1")
	}
	if c.Auth.ThrottleWindow.D() <= 0 {
		bad("auth.throttle_window", c.Auth.ThrottleWindow.D(), "must be positive")
	}
	if !slices.Contains([]string{"auto", "text", "json"}, c.Log.Format) {
		bad("log.format", c.Log.Format, "want auto, text or json")
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		bad("log.level", c.Log.Level, "want debug, info, warn or error")
	}
	if len(errs) == 0 {
		return nil
	}
	// One line, however many keys are wrong.
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// PrivateUpstreams parses net.private_upstreams.
func (c Config) PrivateUpstreams() ([]netpolicy.Trust, error) {
	t, err := netpolicy.ParseTrusts(c.Net.PrivateUpstreams)
	if err != nil {
		return nil, fmt.Errorf("config: net.private_upstreams: %w", err)
	}
	return t, nil
}

// TrustedProxyPrefixes parses http.trusted_proxies; a bare address is a
// single-host prefix.
func (c Config) TrustedProxyPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.HTTP.TrustedProxies {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("config: http.trusted_proxies: %q: not an address or CIDR prefix", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port")
	}
	if host != "" && host != "localhost" {
		if _, err := netip.ParseAddr(host); err != nil {
			return errors.New("host must be an IP address or localhost")
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return errors.New("port must be 0-65535")
	}
	return nil
}

// sameOrigin reports whether u and the URL other have one origin (scheme,
// host and port, the default port filled in).
func sameOrigin(u *url.URL, other string) bool {
	o, err := url.Parse(other)
	if err != nil || other == "" {
		return false
	}
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if u.Scheme == "https" {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(u.Scheme, o.Scheme) && strings.EqualFold(u.Hostname(), o.Hostname()) && port(u) == port(o)
}
