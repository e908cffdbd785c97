// Command ociimage packs directories into an OCI image archive (one layer
// per directory, in order) that `ctr images import` and `skopeo copy
// oci-archive:` accept: the test cluster has no registry and no Docker
// engine, so its images are built from local files, and `go tool -modfile=tools/go.mod task
// image-oci` packs the agent image for a cluster's registry the same way.
// Layers are deterministic (sorted entries, zero times, root owner) and
// uncompressed, so an unchanged directory makes the same layer digest and a
// store that has it skips it; they are streamed through temporary files, so
// a gigabyte-sized root costs no memory.
package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// dirs is the repeatable -dir flag.
type dirs []string

func (d *dirs) String() string     { return strings.Join(*d, ",") }
func (d *dirs) Set(v string) error { *d = append(*d, v); return nil }

func main() {
	var layers dirs
	flag.Var(&layers, "dir", "root filesystem directory to pack as a layer (repeat for more layers, lowest first)")
	name := flag.String("name", "", "image name, e.g. sbx.local/box:dev")
	out := flag.String("o", "", "output archive")
	entry := flag.String("entrypoint", "", "comma-separated entrypoint")
	flag.Parse()
	if len(layers) == 0 || *name == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: ociimage -dir DIR [-dir DIR…] -name NAME -o OUT.tar [-entrypoint a,b]")
		os.Exit(2)
	}
	var ep []string
	if *entry != "" {
		ep = strings.Split(*entry, ",")
	}
	if err := build(layers, *name, *out, ep); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// blob is a layer packed into a temporary file.
type blob struct {
	path   string
	digest string
	size   int64
}

func build(dirs []string, name, out string, entrypoint []string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var layers []blob
	var diffIDs []string
	var descs []descriptor
	for i, dir := range dirs {
		l, err := packLayer(dir, filepath.Join(tmp, fmt.Sprintf("layer%d.tar", i)))
		if err != nil {
			return err
		}
		layers = append(layers, l)
		diffIDs = append(diffIDs, l.digest)
		descs = append(descs, descriptor{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: l.digest, Size: l.size})
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": entrypoint,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digest(config), Size: int64(len(config))},
		"layers":        descs,
	})
	if err != nil {
		return err
	}
	tag := name[strings.LastIndex(name, ":")+1:]
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []descriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: digest(manifest), Size: int64(len(manifest)),
			Annotations: map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
			Platform:    map[string]string{"architecture": "amd64", "os": "linux"},
		}},
	})
	if err != nil {
		return err
	}
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	header := func(path string, size int64) error {
		return tw.WriteHeader(&tar.Header{Name: path, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)})
	}
	for _, e := range []struct {
		path string
		b    []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{"blobs/sha256/" + strings.TrimPrefix(digest(config), "sha256:"), config},
		{"blobs/sha256/" + strings.TrimPrefix(digest(manifest), "sha256:"), manifest},
	} {
		if err := header(e.path, int64(len(e.b))); err != nil {
			return fmt.Errorf("write %s: %w", e.path, err)
		}
		if _, err := tw.Write(e.b); err != nil {
			return fmt.Errorf("write %s: %w", e.path, err)
		}
	}
	seen := map[string]bool{}
	for _, l := range layers {
		if seen[l.digest] {
			continue // two equal layers are one blob
		}
		seen[l.digest] = true
		path := "blobs/sha256/" + strings.TrimPrefix(l.digest, "sha256:")
		if err := copyBlob(tw, path, l); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(out+".tmp", out)
}

func copyBlob(tw *tar.Writer, path string, l blob) error {
	f, err := os.Open(l.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(&tar.Header{Name: path, Mode: 0o644, Size: l.size, Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// counter counts and hashes what is written through it.
type counter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// packLayer tars dir (WalkDir visits in lexical order) with fixed metadata
// into file.
func packLayer(dir, file string) (blob, error) {
	f, err := os.Create(file)
	if err != nil {
		return blob{}, err
	}
	defer f.Close()
	c := &counter{w: f, h: sha256.New()}
	tw := tar.NewWriter(c)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if d.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "root", "root"
		h.ModTime, h.AccessTime, h.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			src, err := os.Open(path)
			if err != nil {
				return err
			}
			defer src.Close()
			if _, err := io.Copy(tw, src); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return blob{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return blob{}, err
	}
	if err := f.Close(); err != nil {
		return blob{}, err
	}
	return blob{path: file, digest: "sha256:" + hex.EncodeToString(c.h.Sum(nil)), size: c.n}, nil
}
