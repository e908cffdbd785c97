package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/gateway/config"
	"sbx.dev/sbx/gateway/web"
)

// configFlags are the flags `sbx serve` and `sbx config` share: the data dir,
// the two listen addresses and a generic --set for any other key.
type configFlags struct {
	data       string
	sshListen  string
	httpListen string
	set        []string
}

func (f *configFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.data, "data", "", "data dir (default $SBX_DATA or ./"+config.DefaultDataDir+")")
	cmd.Flags().StringVar(&f.sshListen, "ssh-listen", "", "SSH listen address (ssh.listen); port 0 picks a free port")
	cmd.Flags().StringVar(&f.httpListen, "http-listen", "", "HTTP listen address (http.listen); port 0 picks a free port")
	cmd.Flags().StringArrayVar(&f.set, "set", nil, "override any config key: --set key=value (repeatable)")
}

func (f *configFlags) load() (config.Config, error) {
	flags := map[string]string{}
	for _, kv := range f.set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return config.Config{}, fmt.Errorf("--set %q: want key=value", kv)
		}
		flags[strings.TrimSpace(k)] = v
	}
	if f.sshListen != "" {
		flags["ssh.listen"] = f.sshListen
	}
	if f.httpListen != "" {
		flags["http.listen"] = f.httpListen
	}
	return config.Load(config.Sources{DataDir: f.data, Environ: os.Environ(), Flags: flags})
}

// NewConfigCommand returns `sbx config`: the effective configuration as YAML,
// secrets masked.
func NewConfigCommand() *cobra.Command {
	var f configFlags
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration (defaults < sbx.yaml < SBX_* env < flags), secrets masked",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load()
			if err != nil {
				return err
			}
			warnUnknownEnv(newLogger(cfg.Log, cmd.ErrOrStderr()), os.Environ())
			out, err := cfg.YAML()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "# data dir: %s\n%s", cfg.DataDir, out)
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

// NewServeCommand returns `sbx serve`. ext are process-level choices only
// tests make (a clock, extra SSH commands and HTTP routes, egress); the
// shipped binary passes none. The command sets the logger and the home
// directory.
func NewServeCommand(ext Options) *cobra.Command {
	var f configFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: SSH and HTTP fronts over the store in the data dir",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load()
			if err != nil {
				return err
			}
			opts := ext
			opts.Logger = newLogger(cfg.Log, cmd.ErrOrStderr())
			warnUnknownEnv(opts.Logger, os.Environ())
			opts.HomeDir, _ = os.UserHomeDir()
			return serve(cmd.Context(), cmd.OutOrStdout(), cfg, opts)
		},
	}
	f.register(cmd)
	return cmd
}

func serve(ctx context.Context, out io.Writer, cfg config.Config, opts Options) error {
	ctx, stop := signalContext(ctx)
	defer stop()
	srv, err := NewServer(ctx, cfg, opts)
	if err != nil {
		return startError(ctx, err)
	}
	if err := srv.Start(ctx); err != nil {
		_ = srv.Shutdown(context.Background())
		return startError(ctx, err)
	}
	// One write: whoever reads the output once the address file exists
	// sees the whole banner or none of it.
	var banner strings.Builder
	fmt.Fprintf(&banner, "sbx is serving (data dir %s)\n", cfg.DataDir)
	fmt.Fprintf(&banner, "  ssh   %s   (%s)\n", srv.SSHAddr(), srv.SSHCommand())
	fmt.Fprintf(&banner, "  http  %s\n", srv.HTTPURL())
	fmt.Fprintf(&banner, "  host key %s\n", srv.HostKeyFingerprint())
	if msg := srv.Bootstrap().Message(); msg != "" {
		fmt.Fprintf(&banner, "%s\n", strings.TrimRight(msg, "\n"))
	}
	io.WriteString(out, banner.String())
	opts.Logger.Info("serving", "ssh", srv.SSHAddr().String(), "http", srv.HTTPURL(),
		"host_key", srv.HostKeyFingerprint(), "data", cfg.DataDir)

	var runErr error
	select {
	case <-ctx.Done():
		opts.Logger.Info("shutting down", "drain", DrainTimeout)
	case runErr = <-srv.Wait():
		opts.Logger.Error("front stopped", "err", runErr)
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), DrainTimeout)
	defer cancel()
	start := time.Now()
	err = srv.Shutdown(sctx)
	opts.Logger.Info("stopped", "took", time.Since(start), "err", err)
	if runErr != nil {
		return runErr
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// Sessions cut at the drain deadline are expected, not a failure.
		return nil
	}
	return err
}

// interrupted is why a start ended early: SIGINT or SIGTERM arrived before
// the gateway served. Its exit status is the shell's for a signal.
type interrupted struct{ Signal syscall.Signal }

func (e interrupted) Error() string { return "interrupted" }

// ExitStatus is 128 plus the signal's number (130 for SIGINT).
func (e interrupted) ExitStatus() int { return 128 + int(e.Signal) }

// Is makes an interrupt a cancellation, as signal.NotifyContext's cause is.
func (e interrupted) Is(target error) bool { return target == context.Canceled }

// signalContext is cancelled by SIGINT or SIGTERM, with interrupted as its
// cause; stop restores the signals' default (a second one kills).
func signalContext(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-sigs:
			cancel(interrupted{Signal: sig.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(sigs); cancel(nil) }
}

// startError is err, or interrupted when a signal cut the start short:
// the user pressed Ctrl-C, and whichever step noticed ("list boxes:
// context canceled") is no news to them.
func startError(ctx context.Context, err error) error {
	var in interrupted
	if errors.As(context.Cause(ctx), &in) {
		return in
	}
	return err
}

// warnUnknownEnv logs one warning per SBX_ variable nothing reads, with
// the known name it may mean: a typo is said, never fatal.
func warnUnknownEnv(log *slog.Logger, environ []string) {
	for _, u := range config.UnknownEnvs(environ) {
		attrs := []any{"name", u.Name}
		if u.Suggestion != "" {
			attrs = append(attrs, "hint", "did you mean "+u.Suggestion+"?")
		}
		log.Warn("unknown environment variable, ignored", attrs...)
	}
}

// newLogger writes text on a terminal and JSON otherwise (auto).
// Durations are text in both ("1.5s"; JSON would print nanoseconds).
func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}
	format := c.Format
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if format == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	// Lines logged with a request's context ([audit] included) carry its id.
	return slog.New(web.LogHandler(h))
}

// durationText prints a duration attribute as text, the way it is written
// in configuration and flags.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
