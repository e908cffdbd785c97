package store

import (
	"context"
	"testing"
	"time"
)

func TestSessionStore(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		st := connect(t)
		now := time.Now()
		clock := func() time.Time { return now }
		ss := st.SessionStore(clock)
		if _, found, err := ss.Find("nope"); found || err != nil {
			t.Fatalf("missing token: %v %v", found, err)
		}
		if err := ss.Commit("tok", []byte("one"), now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := ss.CommitCtx(ctx, "tok", []byte("two"), now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if b, found, err := ss.FindCtx(ctx, "tok"); !found || err != nil || string(b) != "two" {
			t.Fatalf("find: %q %v %v", b, found, err)
		}
		// Stored under its hash: the raw token is no key of the table.
		var n int
		if err := st.read().queryRow(ctx, "SELECT COUNT(*) FROM scs_sessions WHERE token = 'tok'").Scan(&n); err != nil || n != 0 {
			t.Fatalf("raw token stored: %d %v", n, err)
		}
		// An unchanged session pushed by less than commitSlack is not rewritten;
		// new data or a longer push is.
		expiryOf := func(tok string) int64 {
			var e int64
			if err := st.read().queryRow(ctx, "SELECT expiry FROM scs_sessions WHERE token = ?", scsKey(tok)).Scan(&e); err != nil {
				t.Fatal(err)
			}
			return e
		}
		first := expiryOf("tok")
		if err := ss.Commit("tok", []byte("two"), now.Add(time.Hour+time.Second)); err != nil {
			t.Fatal(err)
		}
		if expiryOf("tok") != first {
			t.Error("an unchanged session was rewritten for a 1 s push")
		}
		if err := ss.Commit("tok", []byte("two"), now.Add(time.Hour+commitSlack)); err != nil {
			t.Fatal(err)
		}
		if expiryOf("tok") == first {
			t.Error("a push of commitSlack was not written")
		}
		if err := ss.Commit("tok", []byte("three"), now.Add(time.Hour+commitSlack)); err != nil {
			t.Fatal(err)
		}
		if b, _, _ := ss.Find("tok"); string(b) != "three" {
			t.Errorf("changed data not written: %q", b)
		}
		if err := ss.Commit("old", []byte("x"), now.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		now = now.Add(2 * time.Minute)
		if _, found, _ := ss.Find("old"); found {
			t.Fatal("expired session found")
		}
		if gone, err := ss.DeleteExpired(ctx); err != nil || gone != 1 {
			t.Fatalf("delete expired: %d %v", gone, err)
		}
		if err := ss.Delete("tok"); err != nil {
			t.Fatal(err)
		}
		if err := ss.DeleteCtx(ctx, "tok"); err != nil {
			t.Fatalf("delete of a missing token: %v", err)
		}
		if _, found, _ := ss.Find("tok"); found {
			t.Fatal("deleted session found")
		}
	})
}
