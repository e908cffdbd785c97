// Package pgtest gives tests a fresh PostgreSQL database (the store's, and
// the core's cluster leases over it).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"sbx.dev/sbx/internal/testutil"
)

// AdminDSN is the throwaway PostgreSQL of `go tool -modfile=tools/go.mod task cluster-up`
// (SBX_POSTGRES_DSN overrides) and where it came from; "" when there is none.
func AdminDSN() (string, string) {
	if d := os.Getenv("SBX_POSTGRES_DSN"); d != "" {
		return d, "SBX_POSTGRES_DSN"
	}
	dir := os.Getenv("SBX_CLUSTER_DIR")
	if dir == "" {
		dir = "/tmp/sbx-cluster"
	}
	f := filepath.Join(dir, "postgres.dsn")
	b, err := os.ReadFile(f)
	if err != nil {
		return "", f
	}
	return strings.TrimSpace(string(b)), f
}

// FreshDB creates an empty database for one test and returns its DSN; it
// is dropped when the test ends. Skips (saying why) with no PostgreSQL.
func FreshDB(t testing.TB) string {
	t.Helper()
	testutil.SkipShort(t, "needs the test cluster's PostgreSQL")
	dsn, from := AdminDSN()
	if dsn == "" {
		t.Skipf("no test PostgreSQL: %s missing (run `go tool -modfile=tools/go.mod task cluster-up`)", from)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Skipf("no test PostgreSQL at %s (from %s): %v", dsn, from, err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "sbx_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
		admin.Close(ctx)
	})
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
}
