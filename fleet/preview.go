package fleet

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

// Web previews of a box's port. The console never serves box-made content:
// a preview runs on its own origin (the gateway's preview listener), and
// what lets a browser in is not the console's session but a token of its
// own. PreviewLink makes a link token (≤ PreviewLinkTTL to open, once);
// OpenPreview spends it for a session token (the preview cookie,
// PreviewSessionTTL); DialPreview connects for a session. Tokens are sealed
// with the gateway's seal key (AES-GCM: authenticated, and their contents
// unreadable), each kind under its own associated data, so a link is no
// session and neither is anything else the key seals. The same key on
// every gateway of a shared database lets any of them open a token.

const (
	// PreviewLinkTTL bounds the time to open a preview link.
	PreviewLinkTTL = 5 * time.Minute
	// PreviewSessionTTL bounds a preview's browser session.
	PreviewSessionTTL = time.Hour
)

const (
	previewLinkAAD    = "sbx preview link v1"
	previewSessionAAD = "sbx preview session v1"
	maxPreviewToken   = 1024
)

// previewClaims is what a preview token carries.
type previewClaims struct {
	Box     string    `json:"b"`
	Port    int       `json:"p"`
	User    string    `json:"u"`
	Role    keys.Role `json:"r"`
	Expires int64     `json:"e"` // unix seconds
	Nonce   string    `json:"n"`
}

// Preview is an opened preview: the box and port it shows, who made it,
// and the session token for the preview's cookie.
type Preview struct {
	Box, User string
	Port      int
	Session   string
	Expires   time.Time
}

// PreviewTicket is a link token and when it stops opening.
type PreviewTicket struct {
	Token   string
	Expires time.Time
}

// previews holds the link tokens already spent (until they expire), so a
// link opens once on this gateway.
type previews struct {
	mu    sync.Mutex
	spent map[string]time.Time
}

// PreviewLink makes a link token that opens port of the box in a preview
// (owner or admin with the write right, as DialPort; the box awake: this
// does not wake it). It is an audit row (box.preview, the port) and opens
// once, within PreviewLinkTTL. ErrUnavailable when the gateway has no seal
// key.
func (f *Fleet) PreviewLink(ctx context.Context, caller keys.Actor, name string, port int) (PreviewTicket, error) {
	if err := need(caller, keys.RightWrite, "preview a port"); err != nil {
		return PreviewTicket{}, err
	}
	if port < 1 || port > 65535 {
		return PreviewTicket{}, fmt.Errorf("port %d: want 1 to 65535: %w", port, ErrInvalid)
	}
	rec, err := f.locks.resolve(ctx, caller, name)
	if err != nil {
		return PreviewTicket{}, f.safeErr(err)
	}
	e := f.entry(caller, "box.preview", name)
	e.Detail = fmt.Sprintf("port %d", port)
	exp := f.now().Add(PreviewLinkTTL)
	tok, err := f.sealPreview(previewLinkAAD, previewClaims{Box: name, Port: port, User: caller.User, Role: caller.Role, Expires: exp.Unix()})
	if err == nil {
		err = forwardable(rec)
	}
	if err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return PreviewTicket{}, f.safeErr(err)
	}
	if err := f.audit.Record(ctx, e); err != nil {
		return PreviewTicket{}, f.safeErr(err)
	}
	return PreviewTicket{Token: tok, Expires: exp}, nil
}

// OpenPreview spends a link token and returns the preview with its
// session token. A token that is forged, expired, already spent or of
// another kind is ErrForbidden, all alike.
func (f *Fleet) OpenPreview(ctx context.Context, token string) (Preview, error) {
	c, err := f.openPreview(previewLinkAAD, token)
	if err != nil {
		return Preview{}, err
	}
	now := f.now()
	f.previews.mu.Lock()
	for n, exp := range f.previews.spent {
		if now.After(exp) {
			delete(f.previews.spent, n)
		}
	}
	_, used := f.previews.spent[c.Nonce]
	if !used {
		f.previews.spent[c.Nonce] = time.Unix(c.Expires, 0)
	}
	f.previews.mu.Unlock()
	if used {
		return Preview{}, fmt.Errorf("this preview link was already opened: make a new one on the box page: %w", ErrForbidden)
	}
	exp := now.Add(PreviewSessionTTL)
	s := c
	s.Expires, s.Nonce = exp.Unix(), ""
	tok, err := f.sealPreview(previewSessionAAD, s)
	if err != nil {
		return Preview{}, err
	}
	return Preview{Box: c.Box, User: c.User, Port: c.Port, Session: tok, Expires: exp}, nil
}

// DialPreview connects to the port a preview session shows, as the user
// who made its link (DialPort: still owner or admin, the box awake,
// audited). addr is the browser's address, for the audit row.
func (f *Fleet) DialPreview(ctx context.Context, session, addr string) (net.Conn, error) {
	c, err := f.openPreview(previewSessionAAD, session)
	if err != nil {
		return nil, err
	}
	return f.DialPort(ctx, keys.Actor{User: c.User, Role: c.Role, Front: "preview", Addr: addr}, c.Box, c.Port)
}

// PreviewOf says which box and port a preview session shows (for the
// preview's pages), checking it as DialPreview does.
func (f *Fleet) PreviewOf(session string) (box string, port int, err error) {
	c, err := f.openPreview(previewSessionAAD, session)
	if err != nil {
		return "", 0, err
	}
	return c.Box, c.Port, nil
}

func (f *Fleet) sealPreview(aad string, c previewClaims) (string, error) {
	if f.settings.sealer == nil {
		return "", fmt.Errorf("previews need the gateway's seal key: %w", ErrUnavailable)
	}
	if c.Nonce == "" && aad == previewLinkAAD {
		var n [12]byte
		rand.Read(n[:])
		c.Nonce = hex.EncodeToString(n[:])
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("preview token: %w", err)
	}
	sealed, err := f.settings.sealer.Seal(b, []byte(aad))
	if err != nil {
		return "", fmt.Errorf("preview token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(sealed), nil
}

// errPreviewToken is every token that does not open, alike.
var errPreviewToken = fmt.Errorf("this preview link or session is not valid (forged, expired or of another kind): make a new one on the box page: %w", ErrForbidden)

func (f *Fleet) openPreview(aad, token string) (previewClaims, error) {
	if f.settings.sealer == nil {
		return previewClaims{}, fmt.Errorf("previews need the gateway's seal key: %w", ErrUnavailable)
	}
	if token == "" || len(token) > maxPreviewToken {
		return previewClaims{}, errPreviewToken
	}
	sealed, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return previewClaims{}, errPreviewToken
	}
	b, err := f.settings.sealer.Open(sealed, []byte(aad))
	if err != nil {
		return previewClaims{}, errPreviewToken
	}
	var c previewClaims
	if err := json.Unmarshal(b, &c); err != nil || c.Box == "" || c.User == "" || c.Port < 1 || c.Port > 65535 {
		return previewClaims{}, errPreviewToken
	}
	if !f.now().Before(time.Unix(c.Expires, 0)) {
		return previewClaims{}, errPreviewToken
	}
	if aad == previewLinkAAD && c.Nonce == "" {
		return previewClaims{}, errPreviewToken
	}
	return c, nil
}
