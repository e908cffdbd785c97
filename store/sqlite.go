package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// SQLite is the store in an embedded SQLite file. Writes go through a
// single connection whose transactions begin IMMEDIATE, so two writers never
// deadlock upgrading a read lock; reads use a separate pool and, under WAL,
// never wait for writers.
type SQLite struct {
	*Store
	path string
}

// FileName is the database's name inside the data dir.
const FileName = "sbx.db"

// busyTimeout is how long a writer waits for another process's write lock.
const busyTimeout = 5 * time.Second

// dsn builds the modernc DSN. synchronous=FULL: in WAL mode NORMAL may lose
// the last commits on power loss; our writes are few (users, keys, audit rows)
// and each one is an operator action we must not forget, so an fsync per
// commit is the right price.
func dsn(path string, readOnly bool) string {
	q := []string{
		"_pragma=" + fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
		"_pragma=journal_mode(WAL)",
		"_pragma=foreign_keys(1)",
		"_pragma=synchronous(FULL)",
		"_txlock=immediate",
	}
	if readOnly {
		q = append(q, "_pragma=query_only(1)")
	}
	return "file:" + path + "?" + strings.Join(q, "&")
}

// Open opens (creating if needed) the database at path and applies pending
// migrations, each in its own transaction. It refuses a database written by a
// newer sbx.
func Open(ctx context.Context, path string) (*SQLite, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open store %q: path must be non-empty and contain no ? or #", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// Create the file owner-only before SQLite does (it would use 0644); it
	// holds key hashes and the audit log.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	} else {
		f.Close()
	}
	writer, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	s := &SQLite{Store: &Store{d: sqliteDialect(), writer: writer}, path: path}
	if err := s.migrate(ctx); err != nil {
		writer.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// SQLite creates the -wal and -shm files with the default mode.
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			writer.Close()
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
	}
	reader, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	reader.SetMaxOpenConns(4)
	s.reader = reader
	return s, nil
}

// Path is the database file.
func (s *SQLite) Path() string { return s.path }

// IntegrityCheck runs PRAGMA integrity_check and returns its verdict ("ok"
// when healthy).
func (s *SQLite) IntegrityCheck(ctx context.Context) (string, error) {
	var res []string
	rows, err := s.writer.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return "", fmt.Errorf("integrity check: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", fmt.Errorf("integrity check: %w", err)
		}
		res = append(res, line)
	}
	return strings.Join(res, "\n"), rows.Err()
}
