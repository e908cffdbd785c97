package boxnet

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

const (
	oidA = "1111111111111111111111111111111111111111"
	oidB = "2222222222222222222222222222222222222222"
	zero = "0000000000000000000000000000000000000000"
)

func pkts(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		if l == "" {
			b.WriteString("0000")
			continue
		}
		b.Write(pktLine(l))
	}
	return b.String()
}

func TestParsePush(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		refs []string
		caps []string
		err  string
	}{
		{"one update", pkts(oidA+" "+oidB+" refs/heads/main\x00report-status side-band-64k agent=git/2.39\n", "") + "PACK...",
			[]string{"refs/heads/main"}, []string{"report-status", "side-band-64k", "agent=git/2.39"}, ""},
		{"several", pkts(zero+" "+oidB+" refs/heads/a\x00report-status\n", oidA+" "+zero+" refs/heads/b\n", oidA+" "+oidB+" refs/tags/v1\n", ""),
			[]string{"refs/heads/a", "refs/heads/b", "refs/tags/v1"}, []string{"report-status"}, ""},
		{"probe (flush only)", "0000", nil, nil, ""},
		{"shallow first", pkts("shallow "+oidA, oidA+" "+oidB+" refs/heads/x\x00\n", ""), []string{"refs/heads/x"}, nil, ""},
		{"sha256", pkts(strings.Repeat("a", 64)+" "+strings.Repeat("b", 64)+" refs/heads/m\n", ""), []string{"refs/heads/m"}, nil, ""},
		{"no newline", pkts(oidA+" "+oidB+" refs/heads/m", ""), []string{"refs/heads/m"}, nil, ""},
		{"push-cert", pkts("push-cert\x00report-status\n", "certificate version 0.1\n", ""), nil, nil, "signed pushes"},
		{"NUL in a later command", pkts(oidA+" "+oidB+" refs/heads/a\n", oidA+" "+oidB+" refs/heads/b\x00x\n", ""), nil, nil, "NUL"},
		{"short id", pkts("111 "+oidB+" refs/heads/a\n", ""), nil, nil, "malformed"},
		{"upper-case id", pkts(strings.ToUpper("abcdefabcdefabcdefabcdefabcdefabcdefabcd")+" "+oidB+" refs/heads/a\n", ""), nil, nil, "malformed"},
		{"mixed id lengths", pkts(oidA+" "+strings.Repeat("b", 64)+" refs/heads/a\n", ""), nil, nil, "malformed"},
		{"extra field", pkts(oidA+" "+oidB+" refs/heads/a extra\n", ""), nil, nil, "malformed"},
		{"empty ref", pkts(oidA+" "+oidB+" \n", ""), nil, nil, "malformed"},
		{"no flush", pkts(oidA + " " + oidB + " refs/heads/a\n"), nil, nil, "EOF"},
		{"delimiter packet", "0001", nil, nil, "special packet"},
		{"bad length", "00zz", nil, nil, "not hex"},
		{"truncated payload", "0040" + oidA, nil, nil, "payload"},
		{"oversized packet", "ffff", nil, nil, "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := strings.NewReader(tc.in)
			p, err := parsePush(r)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var refs []string
			for _, c := range p.Commands {
				refs = append(refs, c.Ref)
			}
			if strings.Join(refs, ",") != strings.Join(tc.refs, ",") || strings.Join(p.Caps, ",") != strings.Join(tc.caps, ",") {
				t.Fatalf("refs %v caps %v, want %v %v", refs, p.Caps, tc.refs, tc.caps)
			}
			rest, _ := io.ReadAll(r)
			if string(p.Raw)+string(rest) != tc.in {
				t.Fatalf("Raw + unread = %q, want the input back", string(p.Raw)+string(rest))
			}
		})
	}
}

func TestRefAllowed(t *testing.T) {
	allowed := []string{"sbx/box1", "work/*", "*"}
	for ref, want := range map[string]bool{
		"refs/heads/sbx/box1":      true,
		"refs/heads/sbx/box1/x":    false,
		"refs/heads/sbx/box10":     false,
		"refs/heads/main":          false,
		"refs/heads/work/a":        true,
		"refs/heads/work/a/b":      true,
		"refs/heads/work":          false,
		"refs/heads/work/../main":  false,
		"refs/heads/work/.hidden":  false,
		"refs/heads/work/a.lock":   false,
		"refs/heads/work//a":       false,
		"refs/heads/work/a b":      false,
		"refs/heads/work/a\x01":    false,
		"refs/tags/sbx/box1":       false,
		"refs/heads/":              false,
		"sbx/box1":                 false,
		"refs/remotes/origin/main": false,
		"refs/heads/*":             false, // "*" is no wildcard on its own
	} {
		if got := refAllowed(ref, allowed); got != want {
			t.Errorf("refAllowed(%q) = %v, want %v", ref, got, want)
		}
	}
	if refAllowed("refs/heads/sbx/box1", nil) {
		t.Error("an empty delegation allowed a push")
	}
}

// refusePush output is what git's client parses: side band 2 message lines,
// then on band 1 the report-status packets ending in a flush, then a flush.
func TestRefusePushFormat(t *testing.T) {
	p := pushRequest{
		Commands: []refUpdate{{Old: oidA, New: oidB, Ref: "refs/heads/main"}, {Old: oidA, New: oidB, Ref: "refs/heads/sbx/b"}},
		Caps:     []string{"report-status", "side-band-64k"},
	}
	var out bytes.Buffer
	if err := refusePush(&out, p, map[string]string{"refs/heads/main": "not allowed"}, "sbx: no\n"); err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(out.Bytes())
	var raw bytes.Buffer
	var band1 bytes.Buffer
	var band2 []string
	for {
		pkt, err := readPkt(r, &raw)
		if err == errFlush {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch pkt[0] {
		case 1:
			band1.Write(pkt[1:])
		case 2:
			band2 = append(band2, string(pkt[1:]))
		default:
			t.Fatalf("band %d", pkt[0])
		}
	}
	if r.Len() != 0 || strings.Join(band2, "") != "sbx: no\n" {
		t.Fatalf("band 2 %q, %d bytes left", band2, r.Len())
	}
	var status []string
	for {
		pkt, err := readPkt(&band1, &raw)
		if err == errFlush {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		status = append(status, string(pkt))
	}
	want := []string{"unpack ok\n", "ng refs/heads/main not allowed\n", "ng refs/heads/sbx/b another ref in this push was refused\n"}
	if strings.Join(status, "|") != strings.Join(want, "|") {
		t.Fatalf("status = %q", status)
	}
}

// FuzzParsePush: the parser never panics, never reads past the flush, and
// what it accepts re-encodes to the bytes it consumed.
func FuzzParsePush(f *testing.F) {
	f.Add([]byte(pkts(oidA+" "+oidB+" refs/heads/main\x00report-status\n", "") + "PACK"))
	f.Add([]byte(pkts("shallow "+oidA, zero+" "+oidB+" refs/heads/x\n", oidA+" "+zero+" refs/heads/y\n", "")))
	f.Add([]byte("0000"))
	f.Add([]byte("0004"))
	f.Add([]byte(pkts("push-cert\x00\n", "")))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		p, err := parsePush(r)
		if err != nil {
			return
		}
		consumed := len(in) - r.Len()
		if !bytes.Equal(p.Raw, in[:consumed]) || !bytes.HasSuffix(p.Raw, []byte("0000")) {
			t.Fatalf("Raw %q is not the consumed prefix %q", p.Raw, in[:consumed])
		}
		for _, c := range p.Commands {
			if !isObjectID(c.Old) || !isObjectID(c.New) || c.Ref == "" || strings.ContainsAny(c.Ref, " \x00") {
				t.Fatalf("accepted command %+v", c)
			}
			if refAllowed(c.Ref, []string{"sbx/*"}) && !strings.HasPrefix(c.Ref, "refs/heads/sbx/") {
				t.Fatalf("%q allowed by sbx/*", c.Ref)
			}
		}
	})
}
