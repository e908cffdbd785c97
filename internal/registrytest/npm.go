// Package registrytest runs a small npm registry for tests: the registry
// protocol npm install speaks (a package document per name with its
// versions, dist.tarball, dist.shasum and dist.integrity; the .tgz each
// points to), for packages the test gives as files, packed with
// archive/tar and gzip when the registry starts. It listens on loopback
// (a private address, as a company's internal mirror is).
package registrytest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Package is one package version: its name, version, dependencies (name →
// range) and files (path → content, under package/ in the tarball);
// package.json is written from the rest.
type Package struct {
	Name         string
	Version      string
	Dependencies map[string]string
	Files        map[string]string
}

// NPM is a running registry.
type NPM struct {
	// URL is the registry's base URL on loopback (http://127.0.0.1:PORT).
	URL string

	mu       sync.Mutex
	requests []string
	pkgs     map[string][]packed // by name
}

type packed struct {
	Package
	tgz       []byte
	shasum    string
	integrity string
}

// NewNPM serves pkgs until the test ends.
func NewNPM(t testing.TB, pkgs ...Package) *NPM {
	t.Helper()
	n := &NPM{pkgs: map[string][]packed{}}
	for _, p := range pkgs {
		tgz, err := pack(p)
		if err != nil {
			t.Fatalf("registrytest: pack %s@%s: %v", p.Name, p.Version, err)
		}
		sha := sha1.Sum(tgz)
		sri := sha512.Sum512(tgz)
		n.pkgs[p.Name] = append(n.pkgs[p.Name], packed{Package: p, tgz: tgz,
			shasum: hex.EncodeToString(sha[:]), integrity: "sha512-" + base64.StdEncoding.EncodeToString(sri[:])})
	}
	srv := httptest.NewServer(http.HandlerFunc(n.serve))
	t.Cleanup(srv.Close)
	n.URL = srv.URL
	return n
}

// Requests are the paths asked for so far, in order.
func (n *NPM) Requests() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.requests...)
}

// pack builds the package's tarball: package/package.json and its files.
func pack(p Package) ([]byte, error) {
	manifest, err := json.MarshalIndent(map[string]any{
		"name": p.Name, "version": p.Version, "main": "index.js", "dependencies": p.Dependencies,
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	files := map[string]string{"package.json": string(manifest)}
	for k, v := range p.Files {
		files[k] = v
	}
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	mtime := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range names {
		body := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: "package/" + name, Mode: 0o644, Size: int64(len(body)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// serve answers GET /NAME (the package document) and
// GET /NAME/-/NAME-VERSION.tgz (the tarball); the tarball URLs name the
// host the client asked for (through a proxy, the mirror's name).
func (n *NPM) serve(w http.ResponseWriter, r *http.Request) {
	n.mu.Lock()
	n.requests = append(n.requests, r.URL.Path)
	n.mu.Unlock()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	path, err := url.PathUnescape(strings.TrimPrefix(r.URL.Path, "/"))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	if name, file, ok := strings.Cut(path, "/-/"); ok {
		for _, p := range n.pkgs[name] {
			if file == p.Name+"-"+p.Version+".tgz" {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Write(p.tgz)
				return
			}
		}
		http.NotFound(w, r)
		return
	}
	versions, ok := n.pkgs[path]
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":"Not found"}`)
		return
	}
	base := "http://" + r.Host + "/"
	doc := map[string]any{"name": path}
	vs := map[string]any{}
	latest := ""
	for _, p := range versions {
		vs[p.Version] = map[string]any{
			"name": p.Name, "version": p.Version, "dependencies": p.Dependencies,
			"dist": map[string]any{
				"tarball":   base + p.Name + "/-/" + p.Name + "-" + p.Version + ".tgz",
				"shasum":    p.shasum,
				"integrity": p.integrity,
			},
		}
		latest = p.Version
	}
	doc["versions"] = vs
	doc["dist-tags"] = map[string]string{"latest": latest}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(doc)
}
