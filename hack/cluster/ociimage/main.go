// Command ociimage packs directories into an OCI image archive (one layer
// per directory, in order) that `ctr images import` and `skopeo copy
// oci-archive:` accept: the test cluster has no registry and no Docker
// engine, so its images are built from local files, and `go tool -modfile=tools/go.mod task
// image-oci` packs the agent image for a cluster's registry the same way
// (`task gateway-image` the gateway's, deploy/image.sh).
// Layers are deterministic (sorted entries, zero times, root owner unless
// -owner names another for a path) and uncompressed, so an unchanged directory makes the same layer digest and a
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

// strs is a repeatable string flag.
type strs []string

func (d *strs) String() string     { return strings.Join(*d, ",") }
func (d *strs) Set(v string) error { *d = append(*d, v); return nil }

// imageConfig is what the image's config says besides its layers.
type imageConfig struct {
	entrypoint []string
	env        []string // KEY=VALUE, after PATH
	user       string   // "" is root
	workdir    string
	volumes    []string
	// owners maps a path inside the root ("data", no leading slash) to the
	// uid and gid its entry gets instead of root's.
	owners map[string][2]int
}

func main() {
	var layers, env, volumes, owners strs
	flag.Var(&layers, "dir", "root filesystem directory to pack as a layer (repeat for more layers, lowest first)")
	name := flag.String("name", "", "image name, e.g. sbx.local/box:dev")
	out := flag.String("o", "", "output archive")
	entry := flag.String("entrypoint", "", "comma-separated entrypoint")
	user := flag.String("user", "", "user the image runs as, UID[:GID] (default root)")
	workdir := flag.String("workdir", "", "working directory")
	flag.Var(&env, "env", "KEY=VALUE in the image's environment (repeatable)")
	flag.Var(&volumes, "volume", "a volume path, e.g. /data (repeatable)")
	flag.Var(&owners, "owner", "PATH=UID:GID: the owner of that entry in the layers (repeatable; others are root's)")
	flag.Parse()
	if len(layers) == 0 || *name == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: ociimage -dir DIR [-dir DIR…] -name NAME -o OUT.tar [-entrypoint a,b] [-user UID:GID] [-env K=V…] [-volume PATH…] [-owner PATH=UID:GID…] [-workdir DIR]")
		os.Exit(2)
	}
	cfg := imageConfig{env: env, user: *user, workdir: *workdir, volumes: volumes, owners: map[string][2]int{}}
	if *entry != "" {
		cfg.entrypoint = strings.Split(*entry, ",")
	}
	for _, o := range owners {
		path, ids, ok := strings.Cut(o, "=")
		var uid, gid int
		if _, err := fmt.Sscanf(ids, "%d:%d", &uid, &gid); !ok || err != nil || uid < 0 || gid < 0 {
			fmt.Fprintf(os.Stderr, "ociimage: -owner %q: want PATH=UID:GID\n", o)
			os.Exit(2)
		}
		cfg.owners[strings.Trim(filepath.Clean(path), "/")] = [2]int{uid, gid}
	}
	if err := build(layers, *name, *out, cfg); err != nil {
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

func build(dirs []string, name, out string, ic imageConfig) error {
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var layers []blob
	var diffIDs []string
	var descs []descriptor
	for i, dir := range dirs {
		l, err := packLayer(dir, filepath.Join(tmp, fmt.Sprintf("layer%d.tar", i)), ic.owners)
		if err != nil {
			return err
		}
		layers = append(layers, l)
		diffIDs = append(diffIDs, l.digest)
		descs = append(descs, descriptor{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: l.digest, Size: l.size})
	}
	runtime := map[string]any{
		"Entrypoint": ic.entrypoint,
		"Env":        append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, ic.env...),
	}
	if ic.user != "" {
		runtime["User"] = ic.user
	}
	if ic.workdir != "" {
		runtime["WorkingDir"] = ic.workdir
	}
	if len(ic.volumes) > 0 {
		vols := map[string]struct{}{}
		for _, v := range ic.volumes {
			vols[v] = struct{}{}
		}
		runtime["Volumes"] = vols
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       runtime,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
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
// into file: every entry root's but those owners names.
func packLayer(dir, file string, owners map[string][2]int) (blob, error) {
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
		if o, ok := owners[filepath.ToSlash(rel)]; ok {
			h.Uid, h.Gid, h.Uname, h.Gname = o[0], o[1], "", ""
		}
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
