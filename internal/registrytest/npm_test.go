package registrytest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// TestNPMProtocol: the package document names the tarball, whose bytes
// match its shasum and hold package/package.json and the files.
func TestNPMProtocol(t *testing.T) {
	n := NewNPM(t, Package{Name: "sbx-dep", Version: "1.2.3", Files: map[string]string{"index.js": "module.exports = 42;\n"}})
	var doc struct {
		DistTags map[string]string `json:"dist-tags"`
		Versions map[string]struct {
			Dist struct{ Tarball, Shasum, Integrity string }
		}
	}
	get := func(u string) []byte {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", u, resp.StatusCode, b)
		}
		return b
	}
	if err := json.Unmarshal(get(n.URL+"/sbx-dep"), &doc); err != nil {
		t.Fatal(err)
	}
	v := doc.Versions[doc.DistTags["latest"]]
	if v.Dist.Tarball != n.URL+"/sbx-dep/-/sbx-dep-1.2.3.tgz" || v.Dist.Integrity == "" {
		t.Fatalf("document: %+v", doc)
	}
	tgz := get(v.Dist.Tarball)
	if sum := sha1.Sum(tgz); hex.EncodeToString(sum[:]) != v.Dist.Shasum {
		t.Fatal("shasum does not match the tarball")
	}
	gz, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
	}
	if got["package/index.js"] != "module.exports = 42;\n" || got["package/package.json"] == "" {
		t.Fatalf("tarball holds %v", got)
	}
	if resp, err := http.Get(n.URL + "/nope"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("missing package: %v %v", resp, err)
	}
}
