package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOwnerUserVolume: an image the gateway's build asks for (deploy/image.sh)
// runs as its user with /data its own, a volume; everything else in its
// layers stays root's, and two builds of the same files are the same bytes.
func TestOwnerUserVolume(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"data", "usr/local/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/local/bin/sbx"), []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	ic := imageConfig{entrypoint: []string{"/usr/local/bin/sbx", "serve"}, user: "65532:65532", workdir: "/data",
		volumes: []string{"/data"}, env: []string{"SBX_DATA=/data"}, owners: map[string][2]int{"data": {65532, 65532}}}
	out := filepath.Join(t.TempDir(), "img.tar")
	if err := build([]string{root}, "sbx.local/gateway:dev", out, ic); err != nil {
		t.Fatal(err)
	}
	blobs := readArchive(t, out)
	var index struct{ Manifests []struct{ Digest string } }
	mustJSON(t, blobs["index.json"], &index)
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	mustJSON(t, blobs[blobPath(index.Manifests[0].Digest)], &manifest)
	var config struct {
		Config struct {
			User, WorkingDir string
			Env, Entrypoint  []string
			Volumes          map[string]struct{}
		}
	}
	mustJSON(t, blobs[blobPath(manifest.Config.Digest)], &config)
	c := config.Config
	if _, ok := c.Volumes["/data"]; c.User != "65532:65532" || c.WorkingDir != "/data" || !ok ||
		strings.Join(c.Entrypoint, " ") != "/usr/local/bin/sbx serve" || c.Env[len(c.Env)-1] != "SBX_DATA=/data" {
		t.Fatalf("image config %+v", c)
	}
	owners := map[string]int{}
	tr := tar.NewReader(strings.NewReader(string(blobs[blobPath(manifest.Layers[0].Digest)])))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		owners[h.Name] = h.Uid<<16 | h.Gid
	}
	want := map[string]int{"data/": 65532<<16 | 65532, "usr/": 0, "usr/local/": 0, "usr/local/bin/": 0, "usr/local/bin/sbx": 0}
	for name, o := range want {
		if got, ok := owners[name]; !ok || got != o {
			t.Errorf("%s: owner %#x (in layer: %v), want %#x", name, got, ok, o)
		}
	}
	again := filepath.Join(t.TempDir(), "img.tar")
	if err := build([]string{root}, "sbx.local/gateway:dev", again, ic); err != nil {
		t.Fatal(err)
	}
	if a, b := readArchive(t, again), blobs; a["index.json"] == nil || string(a["index.json"]) != string(b["index.json"]) {
		t.Error("two builds of the same files differ")
	}
}

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}
