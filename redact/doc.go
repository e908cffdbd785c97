// Package redact removes secrets from everything that leaves a box: the
// exact secrets the gateway holds, matched in one Aho–Corasick pass, and
// anything credential-shaped: GitHub, GitLab, npm, Slack, AWS, Stripe,
// Google, OpenAI and Anthropic keys, sbx API keys, JWTs, Bearer and Basic
// credentials,
// user:password@ in URLs, PEM private-key blocks, and values assigned to a
// key named *PASSWORD, *TOKEN, *SECRET, *API_KEY, *ACCESS_KEY (also lower
// and camel case) in shell, env, query, JSON, escaped-JSON, INI and YAML
// form. Each pattern is keyed on a literal trigger found in the same pass,
// then checked by a bounded hand-written scan: no regexps, linear time on
// any input.
//
// A replacement keeps the credential's label and a 4-character tail so an
// operator can tell which one leaked without being able to use it:
// "ghp_…ABCD". Secrets shorter than 16 bytes (after the label) are replaced
// whole: "DB_PASSWORD=…". A private key's body becomes a single "…".
// Redacting redacted text changes nothing.
//
// # One entry point
//
// Redacted text has its own type, Safe, which only this package can make.
// The rule for the rest of sbx:
//
//   - The core (fleet, runs) owns one *Redactor, built at start with New and
//     a Source that lists every secret the store holds in plaintext (GitHub
//     tokens, MCP env and header values, the model API key, anything
//     sealed). After adding or changing a secret it calls Refresh, so the new
//     secret is covered at once; otherwise the list reloads lazily every 60 s.
//   - Every value the core hands a front that came from inside a box, or
//     could contain a secret, is a Safe: a box's task, question, answer, log
//     lines, diff (String or Bytes), MCP tool results (JSON), file names
//     and symlink targets, audit details, and error messages (Error). Fronts take Safe in their signatures and render
//     Safe.String(); they never see the raw text, so a new route cannot
//     forget to redact.
//   - Live streams (SSE, the TUI, logs -f) are redacted once, at the source,
//     by wrapping the box's output in NewReader (pull) or NewWriter (push);
//     the core hands fronts the *Reader, or fans out what the *Writer wrote.
//     A stream is correct at any chunking: it holds back only bytes that
//     could still begin a match, and emits them at the next line end, or at
//     Close/EOF. A private-key body is swallowed as it arrives. Keep one
//     Writer per stream for its whole life (not one per chunk or line): the
//     held bytes and the key state live in it. Never redact a stream line by
//     line with String: a private key spans lines, and a token split across
//     two reads would pass.
//   - Artifacts, text and binary alike, stream through NewReader. A binary
//     that held a secret or a credential-shaped string comes out changed
//     there: that is the point. Known secrets are matched byte-exact, so one
//     embedded in binary data (after a NUL byte, inside an archive stored
//     uncompressed) is found. IsText only decides how content is shown.
//
// # Limits
//
// Known secrets under 6 bytes are not matched exactly (they would shred
// ordinary text); New logs how many. Multi-line secrets are matched line by
// line. A value longer than 64 KiB with no line end is decided at that
// point, and a private-key block with no END line is closed after 64 KiB, so
// a stream never holds more than that. Encoded forms of a known secret
// (base64, percent-encoding) are not matched unless credential-shaped. The
// matcher is a dense table of about 4 bytes × secret bytes × distinct bytes:
// 9 MiB for 1,000 secrets of 40 bytes; a reload that would pass 256 MiB is
// refused and the previous list kept.
package redact
