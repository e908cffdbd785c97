package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"sbx.dev/sbx/gateway/web"
)

// The preview listener (web.preview_addr): web previews of box ports on an
// origin of their own (gateway/web/preview.go), TLS with the console's
// certificate when the console has one.

// newPreview builds the preview server, or nil when previews are off.
func (s *Server) newPreview(trusted []netip.Prefix) {
	if s.cfg.Web.PreviewAddr == "" || s.core.fleet == nil {
		return
	}
	secure := s.tls || strings.HasPrefix(s.cfg.Web.PreviewURL, "https://")
	s.preview = &http.Server{
		Handler: web.Preview(web.PreviewOptions{
			Fleet: s.core.fleet, Logger: s.log.With("front", "preview"), Secure: secure, TrustedProxies: trusted,
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if s.http != nil && s.http.TLSConfig != nil {
		s.preview.TLSConfig = s.http.TLSConfig.Clone()
	}
}

// startPreview listens on web.preview_addr and serves in the background.
func (s *Server) startPreview(ctx context.Context) error {
	if s.preview == nil {
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Web.PreviewAddr)
	if err != nil {
		return fmt.Errorf("web.preview_addr %s: %w", s.cfg.Web.PreviewAddr, err)
	}
	s.previewLn = ln
	go func() {
		var err error
		if s.preview.TLSConfig != nil {
			err = s.preview.ServeTLS(ln, "", "")
		} else {
			err = s.preview.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.errc <- fmt.Errorf("preview: %w", err)
		}
	}()
	return nil
}

// PreviewURL is the previews' base URL: web.preview_url, else the preview
// listener's address; "" when previews are off (or not started yet).
func (s *Server) PreviewURL() string {
	if s.preview == nil || s.previewLn == nil {
		return ""
	}
	if s.cfg.Web.PreviewURL != "" {
		return strings.TrimRight(s.cfg.Web.PreviewURL, "/")
	}
	scheme := "http"
	if s.preview.TLSConfig != nil {
		scheme = "https"
	}
	return scheme + "://" + s.previewLn.Addr().String()
}
