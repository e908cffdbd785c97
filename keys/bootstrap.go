package keys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/crypto/ssh"
)

// BootstrapAdmin is the name given to the first admin.
const BootstrapAdmin = "admin"

// SourceEnv names SBX_ADMIN_KEYS as the bootstrap source.
const SourceEnv = "SBX_ADMIN_KEYS"

// BootstrapResult says how the first admin was registered, for the startup
// message.
type BootstrapResult struct {
	// Skipped: an enabled admin already existed; nothing was done.
	Skipped bool
	// Created: User was created as admin with Keys.
	Created bool
	User    User
	Keys    []Key
	// Source names where the keys came from: SourceEnv or the files read,
	// comma separated.
	Source string
	// Ignored lists home-directory .pub files or keys that were skipped
	// (certificates, refused key types), each with the reason.
	Ignored []string
}

// Message is a short startup message describing r.
func (r BootstrapResult) Message() string {
	switch {
	case r.Skipped:
		return "admin: already registered"
	case r.Created:
		return fmt.Sprintf("admin: registered user %q with %d key(s) from %s: %s",
			r.User.Name, len(r.Keys), r.Source, fingerprints(r.Keys))
	}
	return `admin: none registered (SBX_ADMIN_KEYS is empty and no ~/.ssh/*.pub was found); ` +
		`restart with SBX_ADMIN_KEYS="$(cat ~/.ssh/id_ed25519.pub)" sbx serve`
}

// maxPubFile bounds one ~/.ssh/*.pub read.
const maxPubFile = 64 << 10

// Bootstrap creates the first admin when the store has no enabled admin: from
// adminKeysText (SBX_ADMIN_KEYS) when it is not blank, else from every
// homeDir/.ssh/*.pub. A malformed key in either fails; in the home directory,
// certificates and keys of a refused type (dsa, short rsa) are skipped and
// reported in Ignored, since the operator did not pick those files for us.
// Finding no key is not an error: the result says so.
func (s *Service) Bootstrap(ctx context.Context, adminKeysText, homeDir string) (BootstrapResult, error) {
	var r BootstrapResult
	n, err := s.store.CountEnabledAdmins(ctx)
	if err != nil {
		return r, fmt.Errorf("bootstrap: %w", err)
	}
	if n > 0 {
		r.Skipped = true
		return r, nil
	}
	var ks []Key
	if strings.TrimSpace(adminKeysText) != "" {
		if ks, err = ParseAuthorizedKeys(adminKeysText); err != nil {
			return r, fmt.Errorf("bootstrap: %s: %w", SourceEnv, err)
		}
		r.Source = SourceEnv
	} else if homeDir != "" {
		var files []string
		ks, files, r.Ignored, err = homeKeys(filepath.Join(homeDir, ".ssh"))
		if err != nil {
			return r, fmt.Errorf("bootstrap: %w", err)
		}
		r.Source = strings.Join(files, ",")
	}
	if len(ks) == 0 {
		return r, nil
	}
	now := s.now().UTC()
	name, err := s.freeAdminName(ctx)
	if err != nil {
		return r, fmt.Errorf("bootstrap: %w", err)
	}
	for i := range ks {
		ks[i].User, ks[i].Created = name, now
	}
	actor := Actor{User: "sbx", Role: RoleAdmin, Front: FrontCLI}
	e := s.entry(actor, "user.bootstrap", name)
	e.Detail = "source=" + r.Source + " keys=" + fingerprints(ks)
	u, err := s.store.CreateUser(ctx, User{Name: name, Role: RoleAdmin, Created: now}, ks, e)
	s.finish(ctx, e, err)
	if errors.Is(err, ErrExists) {
		// Another process starting on the same data dir may have won.
		if n, cerr := s.store.CountEnabledAdmins(ctx); cerr == nil && n > 0 {
			return BootstrapResult{Skipped: true}, nil
		}
	}
	if err != nil {
		return r, fmt.Errorf("bootstrap: %w", err)
	}
	r.Created, r.User, r.Keys = true, u, ks
	return r, nil
}

// freeAdminName is "admin", or admin1, admin2... if a (disabled or operator)
// user already holds the name.
func (s *Service) freeAdminName(ctx context.Context) (string, error) {
	for i := 0; i < 100; i++ {
		name := BootstrapAdmin
		if i > 0 {
			name = fmt.Sprintf("%s%d", BootstrapAdmin, i)
		}
		_, err := s.store.GetUser(ctx, name)
		if errors.Is(err, ErrNotFound) {
			return name, nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("no free admin name: %w", ErrExists)
}

// homeKeys reads every *.pub in dir.
func homeKeys(dir string) (ks []Key, files, ignored []string, err error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.pub"))
	if err != nil {
		return nil, nil, nil, err
	}
	sort.Strings(paths)
	seen := map[string]bool{}
	for _, p := range paths {
		if strings.HasSuffix(p, "-cert.pub") {
			ignored = append(ignored, p+": certificate")
			continue
		}
		text, err := readSmall(p)
		if err != nil {
			return nil, nil, nil, err
		}
		took := false
		for i, line := range strings.Split(text, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, err := ParseAuthorizedKey(line)
			if err != nil {
				// A well-formed key we refuse (dsa, short rsa, certificate) is
				// skipped; anything unparsable is an error.
				if _, _, _, _, perr := ssh.ParseAuthorizedKey([]byte(line)); perr == nil {
					ignored = append(ignored, fmt.Sprintf("%s line %d: %v", p, i+1, err))
					continue
				}
				return nil, nil, nil, fmt.Errorf("%s line %d: %w", p, i+1, err)
			}
			if seen[k.Fingerprint] {
				continue
			}
			seen[k.Fingerprint] = true
			ks = append(ks, k)
			took = true
		}
		if took {
			files = append(files, p)
		}
	}
	return ks, files, ignored, nil
}

func readSmall(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPubFile+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxPubFile {
		return "", fmt.Errorf("%s is larger than %d bytes: %w", path, maxPubFile, ErrInvalid)
	}
	return string(b), nil
}
