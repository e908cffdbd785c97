package sshd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/termtext"
	"sbx.dev/sbx/keys"
)

// Legacy scp (`scp -O`): a minimal source (-f) and sink (-t) of the rcp
// protocol over the core, written here rather than taken from wish (whose
// handler had path traversal bugs). Paths are BOX/PATH like sftp's; the
// core confines them to /workspace. Names in the protocol are checked: a
// sink never accepts "/" or ".." in a name the client sends.

// scpMaxSpool caps a file sent by scp: scp announces a size before the
// bytes, and the size of redacted content is known only once it is all
// read, so a file is spooled whole first.
const scpMaxSpool = 1 << 30

// scpOpts is a parsed `scp` command line as OpenSSH's client sends it.
type scpOpts struct {
	source, sink, recursive, times, dirTarget bool
	paths                                     []string
}

func parseSCP(args []string) (scpOpts, error) {
	var o scpOpts
	if len(args) == 0 || args[0] != "scp" {
		return o, fmt.Errorf("not an scp command: %w", fleet.ErrInvalid)
	}
	rest := args[1:]
	for len(rest) > 0 && strings.HasPrefix(rest[0], "-") && rest[0] != "-" {
		a := rest[0]
		rest = rest[1:]
		if a == "--" {
			break
		}
		for _, f := range a[1:] {
			switch f {
			case 'f':
				o.source = true
			case 't':
				o.sink = true
			case 'r':
				o.recursive = true
			case 'p':
				o.times = true
			case 'd':
				o.dirTarget = true
			case 'v', 'q':
			default:
				return o, fmt.Errorf("scp: unknown option -%c: %w", f, fleet.ErrInvalid)
			}
		}
	}
	o.paths = rest
	switch {
	case o.source == o.sink:
		return o, fmt.Errorf("scp: want exactly one of -f and -t: %w", fleet.ErrInvalid)
	case len(o.paths) == 0:
		return o, fmt.Errorf("scp: no path: %w", fleet.ErrInvalid)
	case o.sink && len(o.paths) != 1:
		return o, fmt.Errorf("scp: one target, got %d: %w", len(o.paths), fleet.ErrInvalid)
	}
	return o, nil
}

// scpRun is one scp transfer for the caller.
type scpRun struct {
	c    *call
	f    *fleet.Fleet
	o    scpOpts
	in   *bufio.Reader
	out  io.Writer
	warn int // non-fatal errors sent to the client
}

// scp serves `scp -f|-t …`; it returns the exit status.
func (c *call) scp(args []string) int {
	o, err := parseSCP(args)
	if err != nil {
		fmt.Fprintln(c.sess.Stderr(), "error: "+termtext.String(oneLine(err.Error())))
		return 1
	}
	f, err := c.fleet()
	ch := c.srv.channelOf(c.sess)
	r := &scpRun{c: c, f: f, o: o, in: bufio.NewReader(c.sess)}
	if ch != nil {
		r.out = ch.raw // never through the PTY emulation
	} else {
		r.out = c.sess
	}
	if err != nil {
		r.fatal(err)
		return 1
	}
	if o.source {
		err = r.source()
	} else {
		err = r.sink()
	}
	if err != nil {
		c.srv.Logger.Info("scp failed", "user", c.user.Name, "err", err)
		return 1
	}
	if r.warn > 0 {
		return 1
	}
	return 0
}

// errSCPProtocol ends a transfer whose peer broke the protocol.
var errSCPProtocol = errors.New("scp: protocol error")

// fatal and warning send an error line the client prints on the user's
// terminal: it can quote box text, so it is sanitized like command output.
func (r *scpRun) fatal(err error) {
	fmt.Fprintf(r.out, "\x02scp: %s\n", termtext.String(oneLine(err.Error())))
}

func (r *scpRun) warning(err error) {
	r.warn++
	fmt.Fprintf(r.out, "\x01scp: %s\n", termtext.String(oneLine(err.Error())))
}

func (r *scpRun) ack() { _, _ = r.out.Write([]byte{0}) }

// readAck reads the peer's answer to a record: 0 fine, 1 warning, 2 fatal.
func (r *scpRun) readAck() error {
	b, err := r.in.ReadByte()
	if err != nil {
		return err
	}
	switch b {
	case 0:
		return nil
	case 1, 2:
		msg, _ := r.in.ReadString('\n')
		return fmt.Errorf("scp peer: %s", strings.TrimSpace(msg))
	}
	return errSCPProtocol
}

func (r *scpRun) actor() keys.Actor { return r.c.actor }

// --- source: files out of a box ---

func (r *scpRun) source() error {
	if err := r.readAck(); err != nil { // the sink says it is ready
		return err
	}
	for _, p := range r.o.paths {
		box, rel, err := splitBoxPath(p)
		if err == nil && box == "" {
			err = fmt.Errorf("%s: name a box: BOX/PATH: %w", p, fleet.ErrInvalid)
		}
		if err != nil {
			r.warning(err)
			continue
		}
		matches, err := r.glob(box, rel)
		if err != nil {
			r.warning(err)
			continue
		}
		for _, m := range matches {
			if err := r.sendPath(box, m); err != nil {
				return err
			}
		}
	}
	return nil
}

// glob expands shell patterns in rel, component by component, through the
// core's directory listings.
func (r *scpRun) glob(box, rel string) ([]string, error) {
	if !strings.ContainsAny(rel, "*?[") {
		return []string{rel}, nil
	}
	dirs := []string{"."}
	for seg := range strings.SplitSeq(rel, "/") {
		var next []string
		for _, d := range dirs {
			if !strings.ContainsAny(seg, "*?[") {
				next = append(next, path.Join(d, seg))
				continue
			}
			list, err := r.f.ReadDir(r.c.sess.Context(), r.actor(), box, d)
			if err != nil {
				continue
			}
			for _, fi := range list {
				name := fi.Name.String()
				if ok, err := path.Match(seg, name); err != nil {
					return nil, fmt.Errorf("%s: bad pattern: %w", rel, fleet.ErrInvalid)
				} else if ok && (name[0] != '.' || seg[0] == '.') {
					if fi.Redacted {
						r.warning(redactedName(box, path.Join(d, name)))
						continue
					}
					next = append(next, path.Join(d, name))
				}
			}
		}
		dirs = next
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%s/%s: no match: %w", box, rel, fleet.ErrNotFound)
	}
	return dirs, nil
}

func (r *scpRun) sendPath(box, rel string) error {
	ctx := r.c.sess.Context()
	fi, err := r.f.Stat(ctx, r.actor(), box, rel)
	if err != nil {
		r.warning(err)
		return nil
	}
	if fi.IsDir() {
		if !r.o.recursive {
			r.warning(fmt.Errorf("%s/%s: is a directory (use -r)", box, rel))
			return nil
		}
		return r.sendDir(box, rel, fi)
	}
	if !fi.Mode.IsRegular() {
		r.warning(fmt.Errorf("%s/%s: not a regular file", box, rel))
		return nil
	}
	return r.sendFile(box, rel, fi)
}

// redactedName is the warning for a listed file whose name held a secret:
// the name shown opens nothing, so it is not sent.
func redactedName(box, rel string) error {
	return fmt.Errorf("%s/%s: name redacted (it held a secret): not sent", box, rel)
}

func (r *scpRun) sendTimes(fi fleet.FileInfo) error {
	if !r.o.times {
		return nil
	}
	t := fi.ModTime.Unix()
	fmt.Fprintf(r.out, "T%d 0 %d 0\n", t, t)
	return r.readAck()
}

func (r *scpRun) sendDir(box, rel string, fi fleet.FileInfo) error {
	ctx := r.c.sess.Context()
	list, err := r.f.ReadDir(ctx, r.actor(), box, rel)
	if err != nil {
		r.warning(err)
		return nil
	}
	if err := r.sendTimes(fi); err != nil {
		return err
	}
	name := path.Base(rel)
	if rel == "." {
		name = box
	}
	fmt.Fprintf(r.out, "D%04o 0 %s\n", fi.Mode.Perm(), name)
	if err := r.readAck(); err != nil {
		return err
	}
	for _, e := range list {
		if e.Redacted {
			r.warning(redactedName(box, path.Join(rel, e.Name.String())))
			continue
		}
		if err := r.sendPath(box, path.Join(rel, e.Name.String())); err != nil {
			return err
		}
	}
	fmt.Fprintf(r.out, "E\n")
	return r.readAck()
}

func (r *scpRun) sendFile(box, rel string, fi fleet.FileInfo) error {
	ctx := r.c.sess.Context()
	rc, _, err := r.f.Artifact(ctx, r.actor(), box, rel)
	if err != nil {
		r.warning(err)
		return nil
	}
	// The record announces the length of the redacted bytes, which only
	// the whole spool knows.
	sp, err := newSpool(rc, scpMaxSpool)
	if err != nil {
		return fmt.Errorf("scp: %w", err)
	}
	defer sp.Close()
	n, err := sp.Size()
	if err != nil {
		r.warning(fmt.Errorf("%s/%s: %w", box, rel, err))
		return nil
	}
	if err := r.sendTimes(fi); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "C%04o %d %s\n", fi.Mode.Perm(), n, path.Base(rel))
	if err := r.readAck(); err != nil {
		return err
	}
	if _, err := io.Copy(r.out, io.NewSectionReader(sp, 0, n)); err != nil {
		return err
	}
	r.ack()
	return r.readAck()
}

// --- sink: files into a box ---

func (r *scpRun) sink() error {
	ctx := r.c.sess.Context()
	box, rel, err := splitBoxPath(r.o.paths[0])
	if err == nil && box == "" {
		err = fmt.Errorf("%s: name a box: BOX/PATH: %w", r.o.paths[0], fleet.ErrInvalid)
	}
	if err != nil {
		r.fatal(err)
		return err
	}
	// Into a directory when the target is one (or must be, -d).
	targetIsDir := rel == "."
	if !targetIsDir {
		if fi, err := r.f.Stat(ctx, r.actor(), box, rel); err == nil {
			targetIsDir = fi.IsDir()
		} else if !errors.Is(err, fleet.ErrNotFound) {
			r.fatal(err)
			return err
		}
	}
	if r.o.dirTarget && !targetIsDir {
		err := fmt.Errorf("%s: not a directory", r.o.paths[0])
		r.fatal(err)
		return err
	}
	dirs := []string{rel} // the directory stack of D/E records
	r.ack()
	for {
		line, err := r.in.ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" {
			return nil
		}
		if err != nil {
			return err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			return errSCPProtocol
		}
		switch line[0] {
		case 1, 2: // the source's own error
			if line[0] == 2 {
				return fmt.Errorf("scp source: %s", line[1:])
			}
			continue
		case 'T':
			r.ack() // times are the core's to keep
		case 'E':
			if len(dirs) <= 1 {
				return errSCPProtocol
			}
			dirs = dirs[:len(dirs)-1]
			r.ack()
		case 'C', 'D':
			mode, size, name, err := parseSCPRecord(line)
			if err != nil {
				r.fatal(err)
				return err
			}
			cur := dirs[len(dirs)-1]
			target := cur
			if targetIsDir || len(dirs) > 1 {
				target = path.Join(cur, name)
			}
			if line[0] == 'D' {
				if !r.o.recursive {
					err := fmt.Errorf("%s: a directory without -r", name)
					r.fatal(err)
					return err
				}
				if err := r.f.MkdirAll(ctx, r.actor(), box, target, mode|0o700); err != nil {
					r.fatal(err)
					return err
				}
				dirs = append(dirs, target)
				r.ack()
				continue
			}
			r.ack()
			body := io.LimitReader(r.in, size)
			werr := r.f.WriteFile(ctx, r.actor(), box, target, mode, body)
			if _, err := io.Copy(io.Discard, body); err != nil { // stay in step after a failed write
				return err
			}
			if err := r.readAck(); err != nil {
				return err
			}
			if werr != nil {
				r.warning(werr)
				continue
			}
			r.ack()
		default:
			err := fmt.Errorf("scp: unexpected record %q", clip(line, 40))
			r.fatal(err)
			return errSCPProtocol
		}
	}
}

// parseSCPRecord reads "C0644 123 name" or "D0755 0 name". The name is one
// path element: no "/", no "..", not empty.
func parseSCPRecord(line string) (fs.FileMode, int64, string, error) {
	fields := strings.SplitN(line[1:], " ", 3)
	if len(fields) != 3 {
		return 0, 0, "", fmt.Errorf("scp: bad record %q: %w", clip(line, 40), fleet.ErrInvalid)
	}
	mode, err := strconv.ParseUint(fields[0], 8, 32)
	if err != nil || mode > 0o7777 {
		return 0, 0, "", fmt.Errorf("scp: bad mode %q: %w", fields[0], fleet.ErrInvalid)
	}
	size, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil || size < 0 {
		return 0, 0, "", fmt.Errorf("scp: bad size %q: %w", fields[1], fleet.ErrInvalid)
	}
	name := fields[2]
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return 0, 0, "", fmt.Errorf("scp: bad file name %q: %w", name, fleet.ErrInvalid)
	}
	return fs.FileMode(mode).Perm(), size, name, nil
}
