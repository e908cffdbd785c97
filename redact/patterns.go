package redact

import "bytes"

// The credential-shaped patterns. Each is keyed on a cheap literal trigger
// that the automaton finds in the same pass as the known secrets; only when a
// trigger occurs does its check look at the bytes around it. No regexps: a
// check is a bounded scan over a byte-class table.

// verdict is what a check decides about a trigger occurrence.
type verdict uint8

const (
	none    verdict = iota // not a credential: leave the text alone
	found                  // redact buf[s:e]
	pending                // cannot decide before more input arrives
)

// trigger is one literal that starts a pattern.
type trigger struct {
	text string
	// check decides the occurrence of text at buf[ts:te]. pre holds the
	// input just before buf[0] (up to maxPre bytes; empty at the start of a
	// stream). With final set no more
	// input follows buf, so the check must not answer pending.
	check checkFunc
	// key marks the private-key header: a match switches the scanner into
	// key mode, which swallows everything up to the END line.
	key bool
}

// checkFunc decides a trigger occurrence; see trigger.check.
type checkFunc func(buf []byte, ts, te int, pre []byte, final bool) (s, e int, v verdict)

// Byte classes.
var (
	alnum   = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
	word    = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
	letter  = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
	upperD  = set("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
	tokenCh = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
	slackCh = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
	// RFC 6750 b64token plus padding.
	bearerCh = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")
	// Ends an unquoted assignment value or a URL authority: whitespace,
	// quotes, backslash (a JSON or shell escape) and control bytes.
	valueEnd = func() *[256]bool {
		t := set(" \t\n\r\v\f\"'`\\")
		for c := range 0x20 {
			t[c] = true
		}
		t[0x7f] = true
		return t
	}()
	authorityEnd = func() *[256]bool {
		t := *valueEnd
		for _, c := range []byte("/?#<>") {
			t[c] = true
		}
		return &t
	}()
)

func set(chars string) *[256]bool {
	var t [256]bool
	for i := 0; i < len(chars); i++ {
		t[chars[i]] = true
	}
	return &t
}

// maxPre is how much input before a scan the checks may look back at.
const maxPre = 32

// before returns the byte preceding buf[i] (0 at the start of the text),
// looking through a terminal escape sequence: in "\x1b[1mghp_…" the token
// follows a colour code, not the letter m.
func before(buf []byte, i int, pre []byte) byte {
	at := func(k int) (byte, bool) { // the byte k places before buf[i]
		switch {
		case k <= i:
			return buf[i-k], true
		case k-i <= len(pre):
			return pre[len(pre)-(k-i)], true
		}
		return 0, false
	}
	c, ok := at(1)
	if !ok || c < 0x40 || c > 0x7e {
		return c
	}
	// CSI: ESC '[' parameter bytes (0x30–0x3f) final byte (0x40–0x7e).
	for k := 2; k < maxPre; k++ {
		p, ok := at(k)
		switch {
		case !ok:
			return c
		case p >= 0x30 && p <= 0x3f:
			continue
		case p == '[':
			if esc, _ := at(k + 1); esc == 0x1b {
				b, _ := at(k + 2)
				return b
			}
		}
		return c
	}
	return c
}

// run returns the end of the run of cls bytes starting at i, and whether
// the run reaches the end of buf (so it might continue).
func run(buf []byte, i int, cls *[256]bool) (int, bool) {
	for i < len(buf) && cls[buf[i]] {
		i++
	}
	return i, i == len(buf)
}

// tokenCheck builds the check for "prefix + run of cls of at least min bytes",
// where the prefix must not be glued to a preceding word.
func tokenCheck(cls *[256]bool, min int) checkFunc {
	return func(buf []byte, ts, te int, pre []byte, final bool) (int, int, verdict) {
		if word[before(buf, ts, pre)] {
			return 0, 0, none
		}
		e, open := run(buf, te, cls)
		if open && !final {
			return 0, 0, pending
		}
		if e-te < min {
			return 0, 0, none
		}
		return ts, e, found
	}
}

// skCheck: sk-… and sk-ant-… keys. "risk-free" and "task-list" fail the
// boundary test; "sk-learn" fails the length; "sk-spinner-pulse-container"
// has no digit (real keys are random and have them).
func skCheck(buf []byte, ts, te int, pre []byte, final bool) (int, int, verdict) {
	if c := before(buf, ts, pre); word[c] || c == '-' {
		return 0, 0, none
	}
	e, open := run(buf, te, tokenCh)
	if open && !final {
		return 0, 0, pending
	}
	if e-te < 20 || !bytes.ContainsAny(buf[te:e], "0123456789") {
		return 0, 0, none
	}
	return ts, e, found
}

// bearerCheck: "Bearer <token>" and "Basic <base64>". The token must look
// like one (12+ bytes with a digit, a symbol or two capitals), so "Bearer
// authentication" in prose stays. Only the token is redacted.
func bearerCheck(buf []byte, ts, te int, pre []byte, final bool) (int, int, verdict) {
	if letter[before(buf, ts, pre)] {
		return 0, 0, none
	}
	s := te
	for s < len(buf) && buf[s] == ' ' {
		s++
	}
	e, open := run(buf, s, bearerCh)
	if open && !final {
		return 0, 0, pending
	}
	for e > s && (buf[e-1] == '.' || buf[e-1] == ',') {
		e-- // sentence punctuation, not token ("HTTP Basic Authentication.")
	}
	if e-s < 12 || !tokenLike(buf[s:e]) {
		return 0, 0, none
	}
	return s, e, found
}

func tokenLike(t []byte) bool {
	upper := 0
	for _, c := range t {
		switch {
		case c >= '0' && c <= '9':
			return true
		case c >= 'A' && c <= 'Z':
			upper++
		case !letter[c]:
			return true
		}
	}
	return upper >= 2
}

// jwtCheck: a JSON Web Token, header.payload.signature in base64url, both
// JSON parts starting "eyJ" ({"). A JWT is a bearer credential wherever it
// appears (a session cookie, an id_token in a URL, a log line).
func jwtCheck(buf []byte, ts, te int, pre []byte, final bool) (int, int, verdict) {
	if word[before(buf, ts, pre)] {
		return 0, 0, none
	}
	e := te
	for part := range 3 {
		start := e
		end, open := run(buf, e, tokenCh)
		if open && !final {
			return 0, 0, pending
		}
		if part == 2 {
			return ts, end, found // the signature may be empty (alg "none")
		}
		if end-start < 8 || end == len(buf) || buf[end] != '.' {
			return 0, 0, none
		}
		e = end + 1
		if part == 0 {
			// The payload is JSON too.
			if n := min(len(buf)-e, 3); !final && n < 3 && string(buf[e:e+n]) == "eyJ"[:n] {
				return 0, 0, pending
			}
			if !bytes.HasPrefix(buf[e:], []byte("eyJ")) {
				return 0, 0, none
			}
		}
	}
	return 0, 0, none
}

// notIn returns the complement of a byte class.
func notIn(t *[256]bool) *[256]bool {
	var n [256]bool
	for i := range n {
		n[i] = !t[i]
	}
	return &n
}

var authorityCh = notIn(authorityEnd)

// urlCheck: scheme://user:secret@host. Only the password is redacted; the
// user name stays so the operator sees which account it was.
func urlCheck(buf []byte, ts, te int, pre []byte, final bool) (int, int, verdict) {
	e, open := run(buf, te, authorityCh)
	if open && !final {
		return 0, 0, pending
	}
	auth := buf[te:e]
	at := bytes.LastIndexByte(auth, '@')
	if at < 0 {
		return 0, 0, none
	}
	colon := bytes.IndexByte(auth[:at], ':')
	if colon < 0 || colon+1 == at || isRedacted(auth[colon+1:at]) {
		return 0, 0, none
	}
	return te + colon + 1, te + at, found
}

// assignCheck: NAME_PASSWORD=value, TOKEN=value, ?token=value, the JSON
// form "password": "value" and its escaped twin \"password\": \"value\"
// (JSON inside a JSON string). The trigger is the key's last word; the
// value alone is redacted. Empty values and $VAR references stay.
func assignCheck(buf []byte, ts, te int, pre []byte, final bool) (int, int, verdict) {
	return assign(buf, ts, te, pre, final, false)
}

// camelCheck is assignCheck for a capitalised key word, which may also
// follow a lower-case letter: accessToken, clientSecret, dbPassword.
func camelCheck(buf []byte, ts, te int, pre []byte, final bool) (int, int, verdict) {
	return assign(buf, ts, te, pre, final, true)
}

func assign(buf []byte, ts, te int, pre []byte, final, camel bool) (int, int, verdict) {
	if c := before(buf, ts, pre); alnum[c] && !(camel && c >= 'a' && c <= 'z') {
		return 0, 0, none
	}
	if te == len(buf) {
		return 0, 0, pendingUnless(final)
	}
	switch buf[te] {
	case '=':
		return assignValue(buf, te+1, final)
	case ' ', '\t', ':':
		return spacedValue(buf, te, final)
	case '"':
		i, vd := expect(buf, te+1, `:`, final)
		if vd != found {
			return 0, 0, vd
		}
		if i, vd = expect(buf, i, `"`, final); vd != found {
			return 0, 0, vd
		}
		return quoted(buf, i, '"', final)
	case '\\':
		i, vd := expect(buf, te, `\"`, final)
		if vd != found {
			return 0, 0, vd
		}
		if i, vd = expect(buf, i, `:`, final); vd != found {
			return 0, 0, vd
		}
		if i, vd = expect(buf, i, `\"`, final); vd != found {
			return 0, 0, vd
		}
		// The value ends at the next \" (or the line end).
		e := i
		for e < len(buf) && buf[e] != '\n' && buf[e] != '\r' {
			if buf[e] == '\\' {
				if e+1 == len(buf) {
					e = len(buf) // the next byte decides
					break
				}
				if buf[e+1] == '"' {
					return value(buf, i, e)
				}
				e++
			}
			e++
		}
		if e >= len(buf) && !final {
			return 0, 0, pending
		}
		return value(buf, i, min(e, len(buf)))
	}
	return 0, 0, none
}

// spacedValue reads "key = value" (INI, TOML) and "key: value" (YAML,
// headers; the blank after the colon is required). In prose and code these
// forms are common ("password: then press enter", "token = getToken()"), so
// an unquoted value must look like a credential (credLike).
func spacedValue(buf []byte, i int, final bool) (int, int, verdict) {
	for i < len(buf) && (buf[i] == ' ' || buf[i] == '\t') {
		i++
	}
	if i == len(buf) {
		return 0, 0, pendingUnless(final)
	}
	sep := buf[i]
	if sep != '=' && sep != ':' {
		return 0, 0, none
	}
	i++
	start := i
	for i < len(buf) && (buf[i] == ' ' || buf[i] == '\t') {
		i++
	}
	if i == len(buf) {
		return 0, 0, pendingUnless(final)
	}
	if sep == ':' && i == start {
		// "key:value" is a URL's user:password or a scheme, not YAML.
		return 0, 0, none
	}
	if q := buf[i]; q == '"' || q == '\'' {
		return quoted(buf, i+1, q, final)
	}
	e, open := run(buf, i, valueCh)
	if open && !final {
		return 0, 0, pending
	}
	if !credLike(buf[i:e]) {
		return 0, 0, none
	}
	return value(buf, i, e)
}

// credLike: 8+ bytes of base64/URL-safe characters with a digit, or with
// mixed case and two capitals. "getToken()", "config.secret" and "true"
// are code, not credentials.
func credLike(v []byte) bool {
	if len(v) < 8 {
		return false
	}
	upper, lower, digit := 0, false, false
	for _, c := range v {
		switch {
		case !credCh[c]:
			return false
		case c >= '0' && c <= '9':
			digit = true
		case c >= 'A' && c <= 'Z':
			upper++
		case c >= 'a' && c <= 'z':
			lower = true
		}
	}
	return digit || (upper >= 2 && lower)
}

var credCh = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_.~-")

// expect skips blanks from i and then expects lit.
func expect(buf []byte, i int, lit string, final bool) (int, verdict) {
	for i < len(buf) && (buf[i] == ' ' || buf[i] == '\t') {
		i++
	}
	for k := 0; k < len(lit); k++ {
		if i+k == len(buf) {
			return 0, pendingUnless(final)
		}
		if buf[i+k] != lit[k] {
			return 0, none
		}
	}
	return i + len(lit), found
}

// assignValue reads the value after '=': quoted, or up to a blank, quote,
// backtick or backslash.
func assignValue(buf []byte, i int, final bool) (int, int, verdict) {
	if i == len(buf) {
		return 0, 0, pendingUnless(final)
	}
	if q := buf[i]; q == '"' || q == '\'' {
		return quoted(buf, i+1, q, final)
	}
	e, open := run(buf, i, valueCh)
	if open && !final {
		return 0, 0, pending
	}
	return value(buf, i, e)
}

// quoted reads a value from s up to the closing quote q (or the line end).
func quoted(buf []byte, s int, q byte, final bool) (int, int, verdict) {
	e := s
	for e < len(buf) && buf[e] != q && buf[e] != '\n' && buf[e] != '\r' {
		if q == '"' && buf[e] == '\\' && e+1 < len(buf) && buf[e+1] != '\n' && buf[e+1] != '\r' {
			e++
		}
		e++
	}
	if e >= len(buf) {
		if !final {
			return 0, 0, pending
		}
		e = len(buf)
	}
	return value(buf, s, e)
}

// value decides buf[s:e] as a value: empty, a reference or already redacted
// is left alone.
func value(buf []byte, s, e int) (int, int, verdict) {
	v := buf[s:e]
	if len(v) == 0 || isReference(v) || isRedacted(v) {
		return 0, 0, none
	}
	return s, e, found
}

var valueCh = notIn(valueEnd)

func pendingUnless(final bool) verdict {
	if final {
		return none
	}
	return pending
}

// isReference reports a shell or template variable ($X, ${X}, $(cmd)) rather
// than a literal value.
func isReference(v []byte) bool {
	// A long value is not a reference (and "${TOKEN=${TOKEN=…" must not
	// make every trigger scan to the line end).
	if len(v) < 2 || len(v) > 256 || v[0] != '$' {
		return false
	}
	switch v[1] {
	case '{', '(':
		return true
	}
	_, open := run(v, 1, word)
	return open
}

// keyHeader recognises "-----BEGIN … PRIVATE KEY-----" (and "… PRIVATE KEY
// BLOCK-----") and returns the end of the header.
func keyHeader(buf []byte, ts, te int, final bool) (int, verdict) {
	const maxHeader = 64
	i := te
	for i < len(buf) && i-te < maxHeader && (upperD[buf[i]] || buf[i] == ' ') {
		i++
	}
	if i == len(buf) && i-te < maxHeader {
		return 0, pendingUnless(final)
	}
	label := buf[te:i]
	if !bytes.HasSuffix(label, []byte("PRIVATE KEY")) && !bytes.HasSuffix(label, []byte("PRIVATE KEY BLOCK")) {
		return 0, none
	}
	const dashes = "-----"
	n := 0
	for i+n < len(buf) && n < len(dashes) && buf[i+n] == '-' {
		n++
	}
	if n == len(dashes) {
		return i + n, found
	}
	if i+n == len(buf) {
		return 0, pendingUnless(final)
	}
	return 0, none
}

// triggers lists every pattern. Order matters only for the bit positions.
var triggers = func() []trigger {
	var t []trigger
	add := func(check checkFunc, texts ...string) {
		for _, s := range texts {
			t = append(t, trigger{text: s, check: check})
		}
	}
	add(tokenCheck(alnum, 30), "ghp_", "gho_", "ghu_", "ghs_", "ghr_")
	add(tokenCheck(word, 20), "github_pat_")
	add(tokenCheck(tokenCh, 20), "glpat-")
	add(tokenCheck(alnum, 30), "npm_")
	add(tokenCheck(slackCh, 10), "xoxa-", "xoxb-", "xoxp-", "xoxr-")
	add(tokenCheck(upperD, 16), "AKIA", "ASIA")
	// sbx's own API keys (keys.TokenPrefix): sbx_<8 base62 id>_<32+ base62>.
	add(tokenCheck(word, 41), "sbx_")
	add(skCheck, "sk-")
	add(tokenCheck(tokenCh, 16), "sk_live_", "sk_test_", "rk_live_") // Stripe
	add(tokenCheck(tokenCh, 30), "AIza")                             // Google API keys
	add(jwtCheck, "eyJ")
	add(bearerCheck, "Bearer ", "bearer ", "BEARER ", "Basic ", "basic ")
	add(urlCheck, "://")
	for _, k := range []string{"PASSWORD", "PASSWD", "TOKEN", "SECRET", "API_KEY", "APIKEY", "ACCESS_KEY", "SECRET_KEY", "PRIVATE_KEY"} {
		add(assignCheck, k, string(bytes.ToLower([]byte(k))))
	}
	add(assignCheck, "apiKey")
	add(camelCheck, "Password", "Passwd", "Token", "Secret", "ApiKey")
	t = append(t, trigger{text: "-----BEGIN ", key: true})
	if len(t) > 64 {
		panic("redact: more than 64 triggers")
	}
	return t
}()

// triggerTexts lists the literals for the automaton.
func triggerTexts() []string {
	out := make([]string, len(triggers))
	for i, t := range triggers {
		out[i] = t.text
	}
	return out
}

// labels are the credential prefixes kept in a replacement, longest first,
// so an operator sees what kind of credential leaked.
var labels = []string{"github_pat_", "sk_live_", "sk_test_", "rk_live_", "sk-ant-", "glpat-", "xoxa-", "xoxb-", "xoxp-", "xoxr-", "AIza", "eyJ",
	"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "npm_", "sbx_", "AKIA", "ASIA", "sk-"}

// isRedacted reports whether v is already a replacement ("…", "ghp_…ABCD"),
// so that redacting redacted text changes nothing.
func isRedacted(v []byte) bool {
	v = v[len(labelOf(v)):]
	return bytes.HasPrefix(v, []byte(ellipsis)) && len(v) <= len(ellipsis)+4
}

func labelOf(secret []byte) string {
	for _, l := range labels {
		if bytes.HasPrefix(secret, []byte(l)) {
			return l
		}
	}
	return ""
}
