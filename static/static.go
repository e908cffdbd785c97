// Package static embeds the browser files the web UI serves from 'self'
// (htmx, css), so the binary is the whole deployment and CSP stays
// script-src 'self'.
package static

import "embed"

// Files is the embedded tree, served under /static/.
//
//go:embed *.css
var Files embed.FS
