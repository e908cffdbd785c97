package redact

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"testing/iotest"
)

// fuzzSecrets are the known secrets of the fuzz target. They share prefixes,
// nest (one is a prefix of another), hold trigger text, and each has an
// upper-case letter or a '-' in its first 6 bytes, so the safe alphabet
// below can never spell one.
var fuzzSecrets = []string{
	"Zq9-known-1",
	"Zq9-known-1-longer-variant",
	"ghp_Known0123456789abcdefghijABCDEFGHIJ",
	"x-sk-ant-Inside-Secret",
	"AAAAAAAA",
	"ab-ab-ab-ab",
	"p@ss:W0rd/with spaces",
	"Tok3n=value",
}

// safeAlphabet spells no trigger and no known secret.
const safeAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789.,\n\t"

// FuzzStream: random text with known secrets embedded, cut into random
// chunks. No known secret survives; streaming (Writer and Reader, any
// chunking) gives exactly the one-shot result; text that cannot hold a
// credential passes unchanged.
func FuzzStream(f *testing.F) {
	r, err := New(context.Background(), func(context.Context) ([]string, error) { return fuzzSecrets, nil },
		Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range redactCases {
		f.Add([]byte(c.in), []byte{3, 0, 7, 1, 2, 5, 11})
	}
	f.Add([]byte("-----BEGIN RSA PRIVATE KEY-----\nabc\n"), []byte{40, 3, 1, 1, 1, 9})
	f.Add([]byte("TOKEN=\"abc\\\" def\" https://u:p@h Bearer abcdefghijklmnop0"), []byte{0, 1, 200, 2, 5, 1, 1, 1})
	f.Fuzz(func(t *testing.T, text, plan []byte) {
		if len(text) > 1024 || len(plan) > 64 {
			return
		}
		// Embed secrets: plan bytes in pairs (where, which) until a 0xff.
		in := append([]byte(nil), text...)
		i := 0
		for ; i+1 < len(plan) && plan[i] != 0xff; i += 2 {
			at := int(plan[i]) * (len(in) + 1) / 256
			s := fuzzSecrets[int(plan[i+1])%len(fuzzSecrets)]
			in = append(in[:at], append([]byte(s), in[at:]...)...)
		}
		cuts := chunking(len(in), plan[min(i, len(plan)):])

		want := r.Bytes(in).String()
		for _, s := range fuzzSecrets {
			if bytes.Contains([]byte(want), []byte(s)) {
				t.Fatalf("known secret %q survived:\n in %q\nout %q", s, in, want)
			}
		}
		if got := writeChunks(t, r, string(in), cuts...); got != want {
			t.Fatalf("stream differs from one-shot\n  in %q\ncuts %v\n got %q\nwant %q", in, cuts, got, want)
		}
		got, err := io.ReadAll(r.NewReader(iotest.HalfReader(bytes.NewReader(in))))
		if err != nil || string(got) != want {
			t.Fatalf("Reader differs from one-shot\n in %q\n got %q\nwant %q", in, got, want)
		}

		// The same text in the safe alphabet passes unchanged, any chunking.
		plain := make([]byte, len(text))
		for i, c := range text {
			plain[i] = safeAlphabet[int(c)%len(safeAlphabet)]
		}
		if got := r.Bytes(plain).String(); got != string(plain) {
			t.Fatalf("plain text changed:\n in %q\nout %q", plain, got)
		}
		if got := writeChunks(t, r, string(plain), chunking(len(plain), plan)...); got != string(plain) {
			t.Fatalf("plain text changed by streaming:\n in %q\nout %q", plain, got)
		}
	})
}

// chunking turns plan bytes into increasing cut offsets within n.
func chunking(n int, plan []byte) []int {
	var cuts []int
	at := 0
	for _, b := range plan {
		at += 1 + int(b)%23
		if at >= n {
			break
		}
		cuts = append(cuts, at)
	}
	return cuts
}

// FuzzLanes: the two-lane walk finds exactly what the one-lane walk finds,
// wherever the middle falls (inside a secret, a trigger or a key header).
func FuzzLanes(f *testing.F) {
	r, err := New(context.Background(), func(context.Context) ([]string, error) { return fuzzSecrets, nil },
		Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	one, two := *r.current(), *r.current()
	one.twoLanes, two.twoLanes = 1<<62, 2
	for _, c := range redactCases {
		f.Add([]byte(c.in), false)
	}
	for _, s := range fuzzSecrets {
		f.Add([]byte("..."+s+"..."+s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, final bool) {
		for _, force := range []bool{false, true} {
			s1, h1, k1 := one.scan(in, nil, final, force, &scratch{})
			s2, h2, k2 := two.scan(in, nil, final, force, &scratch{})
			s1, s2 = merge(s1), merge(s2)
			if h1 != h2 || k1 != k2 || !slices.Equal(s1, s2) {
				t.Fatalf("lanes disagree on %q (final %v force %v):\none: %v %d %d\ntwo: %v %d %d", in, final, force, s1, h1, k1, s2, h2, k2)
			}
		}
		o1, _ := one.redact(in)
		o2, _ := two.redact(in)
		if !bytes.Equal(o1, o2) {
			t.Fatalf("lanes disagree on %q:\none %q\ntwo %q", in, o1, o2)
		}
	})
}
