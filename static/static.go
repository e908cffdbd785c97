// Package static embeds the browser files the web UI serves from 'self'
// (htmx 2 and its SSE extension, vendored from npm; css), so the binary is
// the whole deployment and CSP stays script-src 'self'. See README.md for
// versions, checksums and licences.
package static

import "embed"

// Files is the embedded tree, served under /static/.
//
//go:embed *.css *.js
var Files embed.FS
