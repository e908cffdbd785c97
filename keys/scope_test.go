package keys_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/keys"
)

func TestParseScopes(t *testing.T) {
	tests := []struct {
		in   []string
		want []keys.Scope
		err  bool
	}{
		{nil, keys.DefaultScopes, false},
		{[]string{}, keys.DefaultScopes, false},
		{[]string{"read"}, []keys.Scope{keys.ScopeRead}, false},
		{[]string{"tokens", "read"}, []keys.Scope{keys.ScopeRead, keys.ScopeTokens}, false},
		{[]string{"read,tokens"}, []keys.Scope{keys.ScopeRead, keys.ScopeTokens}, false},
		{[]string{" write ", "write"}, []keys.Scope{keys.ScopeWrite}, false},
		{[]string{"bad"}, nil, true},
		{[]string{"read", "bad"}, nil, true},
		{[]string{""}, nil, true},
		{[]string{"read,"}, nil, true},
		{[]string{"READ"}, nil, true},
		{[]string{"mcp"}, nil, true},
		{[]string{"*"}, nil, true},
		{slices.Repeat([]string{"read"}, 17), nil, true},
	}
	for _, tt := range tests {
		got, err := keys.ParseScopes(tt.in)
		if tt.err {
			if !errors.Is(err, keys.ErrInvalid) {
				t.Errorf("ParseScopes(%q) = %v, %v; want ErrInvalid", tt.in, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseScopes(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestRightsOf(t *testing.T) {
	tests := []struct {
		in                  []string
		read, write, tokens bool
	}{
		{nil, true, true, false}, // a key stored before scopes were checked
		{[]string{"read"}, true, false, false},
		{[]string{"write"}, true, true, false},
		{[]string{"tokens"}, false, false, true},
		{[]string{"read", "tokens"}, true, false, true},
		{[]string{"mcp", "boxes:read"}, false, false, false}, // unknown stored scopes grant nothing
	}
	for _, tt := range tests {
		r := keys.RightsOf(tt.in)
		if r.Has(keys.RightRead) != tt.read || r.Has(keys.RightWrite) != tt.write || r.Has(keys.RightTokens) != tt.tokens {
			t.Errorf("RightsOf(%q) = %s; want read %v write %v tokens %v", tt.in, r, tt.read, tt.write, tt.tokens)
		}
	}
}

// keyActor is bob acting through the API key k (as the HTTP front does).
func keyActor(k keys.APIKey) keys.Actor {
	a := actor("bob")
	a.Front = "http"
	a.Key = &k
	return a
}

// TestRegressionAPIKeyMintsStrongerKey: a key made with --scope read
// --expires 1h minted a key with no scope limit and no expiry, and revoked
// the user's other keys. Managing keys through a key now needs the tokens
// scope, and never yields or touches a key stronger or longer-lived than it.
func TestRegressionAPIKeyMintsStrongerKey(t *testing.T) {
	e := newEnv(t)
	mustAdd(t, e, "bob", keys.RoleOperator, 1)
	mustAdd(t, e, "carol", keys.RoleOperator, 1)
	mk := func(scopes []string, ttl time.Duration) keys.APIKey {
		t.Helper()
		_, k, err := e.svc.CreateAPIKey(ctx, actor("bob"), "bob", "k", scopes, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	read1h := mk([]string{"read"}, time.Hour)
	forever := mk(nil, 0)
	tok1h := mk([]string{"read", "tokens"}, time.Hour)
	tokWrite := mk([]string{"write", "tokens"}, 0)
	weak := mk([]string{"read"}, 30*time.Minute)
	_, carols, err := e.svc.CreateAPIKey(ctx, actor("carol"), "carol", "c", []string{"read"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	refused := []struct {
		name string
		do   func() error
	}{
		{"read key creates a key", func() error {
			_, _, err := e.svc.CreateAPIKey(ctx, keyActor(read1h), "bob", "x", nil, 0)
			return err
		}},
		{"read key creates a read key", func() error {
			_, _, err := e.svc.CreateAPIKey(ctx, keyActor(read1h), "bob", "x", []string{"read"}, time.Minute)
			return err
		}},
		{"read key revokes another key", func() error { return e.svc.RevokeAPIKey(ctx, keyActor(read1h), "bob", forever.ID) }},
		{"read key lists keys", func() error { _, err := e.svc.APIKeys(ctx, keyActor(read1h), "bob"); return err }},
		{"unscoped key creates a key", func() error {
			_, _, err := e.svc.CreateAPIKey(ctx, keyActor(forever), "bob", "x", []string{"read"}, time.Minute)
			return err
		}},
		{"tokens key asks for write", func() error {
			_, _, err := e.svc.CreateAPIKey(ctx, keyActor(tok1h), "bob", "x", []string{"write"}, time.Minute)
			return err
		}},
		{"tokens key asks to outlive it", func() error {
			_, _, err := e.svc.CreateAPIKey(ctx, keyActor(tok1h), "bob", "x", []string{"read"}, 2*time.Hour)
			return err
		}},
		{"tokens key revokes a stronger key", func() error { return e.svc.RevokeAPIKey(ctx, keyActor(tok1h), "bob", tokWrite.ID) }},
		{"tokens key revokes a longer-lived key", func() error { return e.svc.RevokeAPIKey(ctx, keyActor(tok1h), "bob", forever.ID) }},
	}
	for _, tt := range refused {
		if err := tt.do(); !errors.Is(err, keys.ErrForbidden) {
			t.Errorf("%s: got %v, want ErrForbidden", tt.name, err)
		}
	}
	// Another user's key answers as missing, whatever the acting key holds.
	if err := e.svc.RevokeAPIKey(ctx, keyActor(tokWrite), "bob", carols.ID); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("revoke another user's key: %v, want ErrNotFound", err)
	}
	if _, _, err := e.svc.CreateAPIKey(ctx, actor("bob"), "bob", "x", []string{"bad"}, 0); !errors.Is(err, keys.ErrInvalid) {
		t.Errorf("unknown scope over SSH: %v, want ErrInvalid", err)
	}
	list, err := e.svc.APIKeys(ctx, actor("bob"), "bob")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range list {
		if !k.Revoked.IsZero() {
			t.Errorf("key %s revoked by a refused call", k.ID)
		}
	}
	if len(list) != 5 {
		t.Errorf("%d keys after refused creations, want 5", len(list))
	}

	// What a tokens key may do: a key within its rights and its life.
	_, child, err := e.svc.CreateAPIKey(ctx, keyActor(tok1h), "bob", "child", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(child.Scopes, ",") != "read" || !child.Expires.Equal(tok1h.Expires) {
		t.Errorf("key-made key: scopes %v expires %v; want read, %v", child.Scopes, child.Expires, tok1h.Expires)
	}
	if err := e.svc.RevokeAPIKey(ctx, keyActor(tok1h), "bob", weak.ID); err != nil {
		t.Errorf("tokens key revokes a weaker key: %v", err)
	}
	if _, err := e.svc.APIKeys(ctx, keyActor(tok1h), "bob"); err != nil {
		t.Errorf("tokens key lists keys: %v", err)
	}
	// SSH (no key) keeps full control of the user's own keys.
	if err := e.svc.RevokeAPIKey(ctx, actor("bob"), "bob", tokWrite.ID); err != nil {
		t.Errorf("revoke over SSH: %v", err)
	}
}

// FuzzParseScopes: whatever a request names, the result is either an
// ErrInvalid or a set of known scopes without duplicates whose rights are
// exactly theirs.
func FuzzParseScopes(f *testing.F) {
	for _, s := range []string{"", "read", "read,write", "tokens", "bad", "read,,", " write ", "r\x00ead", "ｒead"} {
		f.Add(s, "write")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		got, err := keys.ParseScopes([]string{a, b})
		if err != nil {
			if !errors.Is(err, keys.ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		if len(got) == 0 {
			t.Fatal("no scopes without an error")
		}
		var names []string
		for _, s := range got {
			if !slices.Contains(keys.AllScopes, s) {
				t.Fatalf("unknown scope %q accepted", s)
			}
			names = append(names, string(s))
		}
		if len(slices.Compact(slices.Clone(names))) != len(names) {
			t.Fatalf("duplicates in %v", names)
		}
		r := keys.RightsOf(names)
		if r.Has(keys.RightTokens) != slices.Contains(got, keys.ScopeTokens) {
			t.Fatalf("tokens right of %v: %v", names, r)
		}
	})
}
