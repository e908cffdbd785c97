package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// qmp is a minimal QEMU Machine Protocol client: one command at a time,
// events are skipped.
type qmp struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
	id   int
}

// dialQMP connects to a QMP socket and leaves capabilities negotiation done.
func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("dial qmp %s: %w", path, err)
	}
	q := &qmp{conn: conn, r: bufio.NewReader(conn)}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	// Greeting: {"QMP": {...}}
	var greet struct {
		QMP json.RawMessage `json:"QMP"`
	}
	line, err := q.r.ReadBytes('\n')
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp %s greeting: %w", path, err)
	}
	if err := json.Unmarshal(line, &greet); err != nil || greet.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("qmp %s: unexpected greeting %q", path, line)
	}
	conn.SetDeadline(time.Time{})
	if _, err := q.run(ctx, "qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

type qmpError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *qmpError) Error() string { return e.Class + ": " + e.Desc }

// run executes one command and returns its "return" value.
func (q *qmp) run(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	return q.runFD(ctx, cmd, args, -1)
}

// passFD hands QEMU an open file under name (QMP getfd), for "fd:name"
// migration URIs. QEMU keeps its own copy; the caller closes f.
func (q *qmp) passFD(ctx context.Context, name string, f *os.File) error {
	_, err := q.runFD(ctx, "getfd", map[string]any{"fdname": name}, int(f.Fd()))
	return err
}

// runFD is run, with fd (unless -1) sent alongside the command.
func (q *qmp) runFD(ctx context.Context, cmd string, args any, fd int) (json.RawMessage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.id++
	id := q.id
	req := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		q.conn.SetDeadline(dl)
	} else {
		q.conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	defer q.conn.SetDeadline(time.Time{})
	if fd >= 0 {
		uc, ok := q.conn.(*net.UnixConn)
		if !ok {
			return nil, fmt.Errorf("qmp %s: cannot pass a file over %T", cmd, q.conn)
		}
		if _, _, err := uc.WriteMsgUnix(append(b, '\n'), unix.UnixRights(fd), nil); err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
	} else if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		var resp struct {
			Event  string          `json:"event"`
			ID     *int            `json:"id"`
			Return json.RawMessage `json:"return"`
			Error  *qmpError       `json:"error"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			return nil, fmt.Errorf("qmp %s: bad reply %q: %w", cmd, line, err)
		}
		if resp.Event != "" || resp.ID == nil || *resp.ID != id {
			continue
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, resp.Error)
		}
		return resp.Return, nil
	}
}

// status returns the VM run state ("running", "paused", "inmigrate", ...).
func (q *qmp) status(ctx context.Context) (string, error) {
	raw, err := q.run(ctx, "query-status", nil)
	if err != nil {
		return "", err
	}
	var s struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("query-status: %w", err)
	}
	return s.Status, nil
}

// ignoreShared turns on x-ignore-shared: RAM in a shared file is left out
// of the migration stream (both sides must agree).
func (q *qmp) ignoreShared(ctx context.Context) error {
	_, err := q.run(ctx, "migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}}})
	return err
}

// migrateTo saves the stopped VM's state through uri and waits until done.
func (q *qmp) migrateTo(ctx context.Context, uri string) error {
	// QEMU 7.2 caps migration at 32 MiB/s by default; the VM is stopped,
	// so go as fast as the disk allows.
	if _, err := q.run(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}); err != nil {
		return err
	}
	if _, err := q.run(ctx, "migrate", map[string]any{"uri": uri}); err != nil {
		return err
	}
	for {
		raw, err := q.run(ctx, "query-migrate", nil)
		if err != nil {
			return err
		}
		var m struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("query-migrate: %w", err)
		}
		switch m.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("migrate to %s: %s %s", uri, m.Status, m.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// waitIncoming waits until an -incoming restore has finished loading.
func (q *qmp) waitIncoming(ctx context.Context) error {
	for {
		s, err := q.status(ctx)
		if err != nil {
			return err
		}
		switch s {
		case "inmigrate", "prelaunch", "restore-vm":
		case "paused", "running", "postmigrate":
			return nil
		default:
			return fmt.Errorf("restore: vm status %q", s)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (q *qmp) Close() error {
	if q == nil {
		return nil
	}
	return q.conn.Close()
}
