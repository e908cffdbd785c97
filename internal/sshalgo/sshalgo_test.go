package sshalgo

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// handshake runs a real x/crypto client and server over loopback TCP, both
// offering only algos, and returns what they agreed on. x/crypto drops a
// name it does not know without a word, so only a handshake shows that a
// name is really offered.
func handshake(t *testing.T, algos gossh.Algorithms) (gossh.NegotiatedAlgorithms, error) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	host, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := gossh.Config{KeyExchanges: algos.KeyExchanges, Ciphers: algos.Ciphers, MACs: algos.MACs}
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		srv := &gossh.ServerConfig{Config: cfg, NoClientAuth: true}
		srv.AddHostKey(host)
		sc, chans, reqs, err := gossh.NewServerConn(c, srv)
		if err != nil {
			done <- err
			return
		}
		go gossh.DiscardRequests(reqs)
		go func() {
			for ch := range chans {
				_ = ch.Reject(gossh.Prohibited, "test")
			}
		}()
		done <- sc.Wait()
	}()
	client, err := gossh.Dial("tcp", ln.Addr().String(), &gossh.ClientConfig{
		Config: cfg, User: "x", Timeout: 5 * time.Second,
		HostKeyCallback: gossh.FixedHostKey(host.PublicKey()),
	})
	if err != nil {
		<-done
		return gossh.NegotiatedAlgorithms{}, err
	}
	defer client.Close()
	na, ok := client.Conn.(interface {
		Algorithms() gossh.NegotiatedAlgorithms
	})
	if !ok {
		t.Fatal("client connection does not report its algorithms")
	}
	return na.Algorithms(), nil
}

// TestEveryImplementedNameHandshakes: each name Check accepts is one
// x/crypto really negotiates, so a config that passes Check never offers
// less than it lists.
func TestEveryImplementedNameHandshakes(t *testing.T) {
	for _, k := range []Kind{KeyExchange, Cipher, MAC} {
		for _, name := range Implemented(k) {
			t.Run(k.String()+"/"+name, func(t *testing.T) {
				a := gossh.Algorithms{KeyExchanges: Default(KeyExchange), Ciphers: Default(Cipher), MACs: Default(MAC)}
				var got func(gossh.NegotiatedAlgorithms) string
				switch k {
				case KeyExchange:
					a.KeyExchanges = []string{name}
					got = func(n gossh.NegotiatedAlgorithms) string { return n.KeyExchange }
				case Cipher:
					a.Ciphers = []string{name}
					got = func(n gossh.NegotiatedAlgorithms) string { return n.Read.Cipher }
				case MAC:
					// A MAC is used only with a cipher that is not AEAD.
					a.Ciphers, a.MACs = []string{gossh.CipherAES128CTR}, []string{name}
					got = func(n gossh.NegotiatedAlgorithms) string { return n.Read.MAC }
				}
				n, err := handshake(t, a)
				if err != nil {
					t.Fatalf("handshake offering only %s: %v", name, err)
				}
				if g := got(n); g != name {
					t.Fatalf("negotiated %q, want %q", g, name)
				}
			})
		}
	}
}

// TestDefaultsAreModern pins the default lists: nothing ssh-audit flags
// (NIST curves, SHA-1, finite-field DH, CTR mode, encrypt-and-MAC), and
// every default is a name Check accepts.
func TestDefaultsAreModern(t *testing.T) {
	want := map[Kind][]string{
		KeyExchange: {"mlkem768x25519-sha256", "curve25519-sha256", "curve25519-sha256@libssh.org"},
		Cipher:      {"chacha20-poly1305@openssh.com", "aes256-gcm@openssh.com", "aes128-gcm@openssh.com"},
		MAC:         {"hmac-sha2-256-etm@openssh.com", "hmac-sha2-512-etm@openssh.com"},
	}
	for k, w := range want {
		if got := Default(k); !slices.Equal(got, w) {
			t.Errorf("Default(%s) = %v, want %v", k, got, w)
		}
		if err := Check(k, Default(k)); err != nil {
			t.Errorf("Check(Default(%s)): %v", k, err)
		}
	}
	n, err := handshake(t, gossh.Algorithms{KeyExchanges: Default(KeyExchange), Ciphers: Default(Cipher), MACs: Default(MAC)})
	if err != nil {
		t.Fatalf("handshake with the defaults: %v", err)
	}
	if n.KeyExchange != gossh.KeyExchangeMLKEM768X25519 {
		t.Errorf("x/crypto to x/crypto negotiated %s, want the post-quantum %s", n.KeyExchange, gossh.KeyExchangeMLKEM768X25519)
	}
}

// TestCheck: a bad list is refused naming the bad value; weak names x/crypto
// implements are allowed (an operator's choice for old clients).
func TestCheck(t *testing.T) {
	cases := []struct {
		kind  Kind
		names []string
		want  string // "" accepts; else how the error starts
	}{
		{KeyExchange, []string{"curve25519-sha256"}, ""},
		{KeyExchange, []string{"curve25519-sha256@libssh.org"}, ""},
		{KeyExchange, []string{"diffie-hellman-group14-sha1"}, ""},
		{KeyExchange, nil, `"": no key exchange listed`},
		{KeyExchange, []string{"sntrup761x25519-sha512@openssh.com"}, `"sntrup761x25519-sha512@openssh.com": not a key exchange`},
		{KeyExchange, []string{"curve25519-sha256", "curve25519-sha256"}, `"curve25519-sha256": listed twice`},
		{KeyExchange, []string{"Curve25519-sha256"}, `"Curve25519-sha256": not a key exchange`},
		{Cipher, []string{"aes128-ctr", "aes128-cbc"}, ""},
		{Cipher, []string{"aes256-cbc"}, `"aes256-cbc": not a cipher`},
		{Cipher, []string{}, `"": no cipher listed`},
		{Cipher, []string{" aes128-ctr"}, `" aes128-ctr": not a cipher`},
		{MAC, []string{"hmac-sha1", "hmac-sha1-96"}, ""},
		{MAC, []string{"hmac-md5"}, `"hmac-md5": not a MAC`},
		{MAC, []string{"hmac-sha2-256-etm@openssh.com", ""}, `"": not a MAC`},
		{MAC, []string{"curve25519-sha256"}, `"curve25519-sha256": not a MAC`},
	}
	for _, c := range cases {
		err := Check(c.kind, c.names)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Check(%s, %q): %v", c.kind, c.names, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("Check(%s, %q) = %v, want an error starting %q", c.kind, c.names, err, c.want)
		}
	}
}
