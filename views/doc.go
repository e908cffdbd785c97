// Package views holds the web UI's templ components. They render what they
// are given and nothing else: no store, no core, no box access. The web
// issue fills it; the package exists now so the layout is the one the design
// card fixes.
package views
