package config

import (
	"strings"
	"testing"
)

// TestPreviewKeys: the preview listener is off by default; its address and
// URL are checked, and the URL may never be the console's origin.
func TestPreviewKeys(t *testing.T) {
	cfg, err := Load(Sources{DataDir: t.TempDir()})
	if err != nil || cfg.Web.PreviewAddr != "" || cfg.Web.PreviewURL != "" {
		t.Fatalf("defaults: %+v %v", cfg.Web, err)
	}
	cfg, err = Load(Sources{DataDir: t.TempDir(), Environ: []string{"SBX_WEB_PREVIEW_ADDR=127.0.0.1:8081", "SBX_WEB_PREVIEW_URL=https://preview.example.com"}})
	if err != nil || cfg.Web.PreviewAddr != "127.0.0.1:8081" || cfg.Web.PreviewURL != "https://preview.example.com" {
		t.Fatalf("from the environment: %+v %v", cfg.Web, err)
	}
	for _, c := range []struct {
		name  string
		flags map[string]string
		want  []string
	}{
		{"bad addr", map[string]string{"web.preview_addr": "nohost"}, []string{"web.preview_addr", "nohost"}},
		{"the console's addr", map[string]string{"web.preview_addr": "127.0.0.1:8080"}, []string{"web.preview_addr", "own origin"}},
		{"the ssh addr", map[string]string{"web.preview_addr": "127.0.0.1:2222"}, []string{"web.preview_addr", "own origin"}},
		{"url without addr", map[string]string{"web.preview_url": "https://p.example.com"}, []string{"web.preview_url", "needs web.preview_addr"}},
		{"bad url", map[string]string{"web.preview_addr": "127.0.0.1:8081", "web.preview_url": "ftp://p"}, []string{"web.preview_url", "ftp://p"}},
		{"the console's origin", map[string]string{"web.preview_addr": "127.0.0.1:8081", "web.public_url": "https://sbx.example.com",
			"web.preview_url": "https://SBX.example.com:443/"}, []string{"web.preview_url", "console's origin"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(Sources{DataDir: t.TempDir(), Flags: c.flags})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
	// Another port of the console's host is another origin.
	if _, err := Load(Sources{DataDir: t.TempDir(), Flags: map[string]string{"web.preview_addr": "127.0.0.1:8081",
		"web.public_url": "https://sbx.example.com", "web.preview_url": "https://sbx.example.com:8443"}}); err != nil {
		t.Fatal(err)
	}
}
