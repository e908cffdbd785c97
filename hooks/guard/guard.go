// Package guard is the driver lane's containment hook, `sbx hook guard`:
// no control-plane edits, no credential exfiltration, no runtime
// reconfiguration, no deleting system directories. It walks Bash commands
// on the syntax tree package shell parses, and asks package readonly
// whether a program only reads (its allow-list and its sed and awk rules).
package guard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"sbx.dev/sbx/hooks/toolcall"
)

// Guard is the driver lane's PreToolUse hook (issue 7): it denies editing
// or reading the control plane, credential exfiltration, runtime
// reconfiguration and deleting system directories. Bash commands are
// decided on their mvdan.cc/sh syntax tree (see CheckBash); file tools on
// their normalized path.
type Guard struct {
	// Home is the agent's home directory (HOME, default /root). /root is
	// protected as well when they differ.
	Home string
	// Workspace is the box's workspace, where the controller's files live.
	Workspace string
	// Log is the decision log, protected like the controller's files.
	Log string
	// State is the directory where the guard keeps what it learned about
	// each session across calls (files filled from the environment); ""
	// keeps no state.
	State string
}

// DefaultHome is the agent's home when HOME is not set: it runs as root.
const DefaultHome = "/root"

// hookBinary is where the guest installs sbx (pid1.InstalledPath in vm/guest/pid1);
// overwriting it, or shadowing it earlier in PATH, would disable every hook.
const hookBinary = "/usr/local/bin/sbx"

// guardTools classifies the tools Claude Code offers. Anything else is
// denied: a new tool must be looked at before the guard lets it through.
var guardTools = map[string]string{
	"Bash": "bash", "Write": "write", "Edit": "write", "MultiEdit": "write", "NotebookEdit": "notebook",
	"Read": "read", "NotebookRead": "notebook-read", "Grep": "search", "Glob": "search", "LS": "search",
	"BashOutput": "ok", "KillShell": "ok", "KillBash": "ok", "WebFetch": "ok", "WebSearch": "ok",
	"Task": "ok", "Agent": "ok", "TodoWrite": "ok", "TodoRead": "ok", "ExitPlanMode": "ok",
	"EnterPlanMode": "ok", "AskUserQuestion": "ok", "SlashCommand": "ok", "Skill": "ok", "LSP": "ok",
	"ListMcpResourcesTool": "ok", "ReadMcpResourceTool": "ok",
}

// Decide rules on one tool call.
func (g Guard) Decide(in *toolcall.Input) toolcall.Decision {
	kind, ok := guardTools[in.ToolName]
	if !ok && strings.HasPrefix(in.ToolName, "mcp__") {
		// The operator's MCP servers, reached through the gateway.
		kind, ok = "ok", true
	}
	if !ok {
		return toolcall.Deny("guard: unknown tool %q; it is denied until the guard knows what it does", in.ToolName)
	}
	switch kind {
	case "bash":
		cmd, err := in.ToolString("command")
		if err != nil {
			return toolcall.Deny("guard: %v", err)
		}
		return g.decideBashState(in, cmd)
	case "write", "notebook":
		key := "file_path"
		if kind == "notebook" {
			key = "notebook_path"
		}
		p, err := in.ToolPath(key)
		if err != nil {
			return toolcall.Deny("guard: %v", err)
		}
		for _, q := range g.toolPaths(in, key, p) {
			if why := g.writeProtected(splitPath(q), false); why != "" {
				return toolcall.Deny("guard: %s %s is the control plane (%s); the agent may not change it", in.ToolName, p, why)
			}
		}
		for _, text := range writtenText(in) {
			if isDocument(p) {
				break // read by people, not run
			}
			if what := plantsExfiltration(text); what != "" {
				return toolcall.Deny("guard: %s %s plants code that would send the environment or a secret out when it runs (%s)", in.ToolName, p, what)
			}
			if what := plantsControlWrite(text); what != "" {
				return toolcall.Deny("guard: %s %s plants code that would change the control plane (%s) when it runs", in.ToolName, p, what)
			}
		}
		return toolcall.Allow("path outside the control plane")
	case "read", "notebook-read", "search":
		return g.decideRead(in, kind)
	}
	return toolcall.Allow("tool does not touch the control plane")
}

// decideRead denies reading credentials and Claude Code's settings; a
// search (Grep, Glob, LS) is denied on a path that holds them.
func (g Guard) decideRead(in *toolcall.Input, kind string) toolcall.Decision {
	key := "file_path"
	switch kind {
	case "notebook-read":
		key = "notebook_path"
	case "search":
		key = "path"
		if _, ok := in.ToolInput[key]; !ok {
			return toolcall.Allow("search in the working directory")
		}
	}
	p, err := in.ToolPath(key)
	if err != nil {
		return toolcall.Deny("guard: %v", err)
	}
	for _, q := range g.toolPaths(in, key, p) {
		segs := splitPath(q)
		if len(segs) >= 2 && segs[0] == "proc" && segs[len(segs)-1] == "environ" {
			return toolcall.Deny("guard: %s %s is a process environment, which may hold credentials", in.ToolName, p)
		}
		if in.ToolName == "Grep" && len(segs) >= 1 && segs[0] == "proc" && !procFile(segs) {
			return toolcall.Deny("guard: Grep in %s would read process environments; name the file", p)
		}
		if why := g.readProtected(segs); why != "" {
			return toolcall.Deny("guard: %s %s holds credentials or the agent's settings (%s)", in.ToolName, p, why)
		}
		if kind == "search" && in.ToolName == "Grep" {
			if why := g.readProtected(append(segs, "**")); why != "" && !anywhereOnly(g, segs) {
				return toolcall.Deny("guard: Grep in %s would read %s; search a narrower directory", p, why)
			}
		}
	}
	return toolcall.Allow("not a protected file")
}

// procFile: a /proc file that is not a directory holding environments.
func procFile(segs []string) bool {
	if len(segs) != 2 {
		return false
	}
	switch segs[1] {
	case "cpuinfo", "meminfo", "version", "mounts", "loadavg", "uptime", "stat", "filesystems", "modules", "partitions", "swaps", "vmstat", "zoneinfo":
		return true
	}
	return false
}

// writtenText is the text a Write, Edit, MultiEdit or NotebookEdit puts
// into the file.
func writtenText(in *toolcall.Input) []string {
	var out []string
	for _, k := range []string{"content", "new_string", "new_source"} {
		if s, ok, err := toolcall.StringField(in.ToolInput, k); ok && err == nil {
			out = append(out, s)
		}
	}
	if raw, ok := in.ToolInput["edits"]; ok {
		var edits []map[string]json.RawMessage
		if json.Unmarshal(raw, &edits) == nil {
			for _, e := range edits {
				if s, ok, err := toolcall.StringField(e, "new_string"); ok && err == nil {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// toolPaths are the files a tool's path argument may reach: the clean path,
// its symlinks resolved, and for a path written as ~/..., the same under
// the home directory (in case the tool expands it).
func (g Guard) toolPaths(in *toolcall.Input, key, p string) []string {
	out := normalized(p)
	if raw, err := in.ToolString(key); err == nil && (raw == "~" || strings.HasPrefix(raw, "~/")) {
		out = append(out, normalized(filepath.Join(g.homes()[0], raw[1:]))...)
	}
	return out
}

// anywhereOnly reports whether the only read-protected files under dir are
// the ones protected by name anywhere (.git-credentials): a Grep of a
// project directory is not a Grep of the home directory.
func anywhereOnly(g Guard, dir []string) bool {
	for _, r := range g.rules() {
		if r.read && !r.anywhere && segsMatch(append(dir, "**"), r.segs, false) {
			return false
		}
	}
	return true
}

// pathRule is one protected path pattern. segs are absolute path
// segments; "*" is one segment and "**" any number.
type pathRule struct {
	segs     []string
	why      string
	read     bool     // reading is denied too
	anywhere bool     // protected by name in every directory
	except   []string // a subtree inside the pattern that stays writable
	// system: a system path, which only an actual write (a redirection,
	// the target of cp, tar -C, ...) may not reach; naming it as a source
	// or to a program that only reads it is fine. Never the workspace or
	// a temporary directory.
	system bool
}

func (g Guard) homes() []string {
	h := filepath.Clean(g.Home)
	if h == "" || !filepath.IsAbs(h) {
		h = DefaultHome
	}
	if h == DefaultHome {
		return []string{h}
	}
	return []string{h, DefaultHome}
}

// rules lists the protected paths for this box.
func (g Guard) rules() []pathRule {
	var rs []pathRule
	add := func(p, why string, read bool) {
		rs = append(rs, pathRule{segs: splitPath(p), why: why, read: read})
	}
	for _, h := range g.homes() {
		rs = append(rs, pathRule{segs: splitPath(h + "/.claude/**"), why: "Claude Code's settings and hooks",
			except: splitPath(h + "/.claude/projects/*/memory/**")})
		for _, f := range []string{"settings.json", "settings.local.json", ".credentials.json"} {
			add(h+"/.claude/"+f, "Claude Code's settings and credentials", true)
		}
		add(h+"/.claude.json", "Claude Code's configuration and MCP servers", true)
		add(h+"/.agent-mcp.json", "the MCP configuration", true)
		add(h+"/.config/gh/**", "the GitHub CLI's configuration", false)
		add(h+"/.config/gh/hosts.yml", "the GitHub CLI's token", true)
		add(h+"/.config/git/credentials", "git credentials", true)
		for _, f := range []string{".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
			".bash_aliases", ".bash_completion", ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".config/systemd/**",
			".config/fish/**", ".gitconfig", ".config/git/config", ".ssh/config", ".ssh/rc", ".ssh/authorized_keys",
			".ssh/authorized_keys2", ".ssh/environment"} {
			add(h+"/"+f, "a file that persists commands across sessions", false)
		}
	}
	rs = append(rs, pathRule{segs: []string{"**", ".git-credentials"}, why: "git credentials", read: true, anywhere: true})
	ws := filepath.Clean(g.Workspace)
	for _, f := range []string{".agent.log", ".agent.task", ".agent.run", ".agent.running", ".agent.done", toolcall.LogFile} {
		add(ws+"/"+f, "the controller's run files", false)
	}
	if g.Log != "" {
		add(filepath.Clean(g.Log), "the hook decision log", false)
	}
	for _, p := range []string{"/etc/profile", "/etc/profile.d/**", "/etc/bash.bashrc", "/etc/environment",
		"/etc/crontab", "/etc/cron.d/**", "/etc/cron.hourly/**", "/etc/cron.daily/**", "/etc/cron.weekly/**",
		"/etc/cron.monthly/**", "/var/spool/cron/**", "/etc/systemd/**", "/lib/systemd/**", "/usr/lib/systemd/**",
		"/etc/init.d/**", "/etc/rc.local", "/etc/ld.so.preload", "/etc/bash_completion.d/**", "/etc/gitconfig"} {
		add(p, "a file that persists commands or services", false)
	}
	for _, p := range []string{hookBinary, "/init", "/usr/local/sbin/sbx", "/usr/sbin/sbx", "/usr/bin/sbx", "/sbin/sbx", "/bin/sbx"} {
		add(p, "the sbx binary that runs the hooks", false)
	}
	add("/etc/claude-code/**", "Claude Code's managed (policy) settings, which no other setting overrides", false)
	add(filepath.Clean(g.stateDir())+"/**", "the guard's session state", false)
	for _, p := range []string{"/etc/ld.so.conf", "/etc/ld.so.conf.d/**", "/etc/ld.so.cache"} {
		add(p, "the dynamic loader's configuration", false)
	}
	// Code every process of a language runs at start, and Claude Code's
	// own install, wherever they are (outside the workspace).
	sys := func(p, why string) { rs = append(rs, pathRule{segs: splitPath(p), why: why, system: true}) }
	for _, p := range []string{"/**/sitecustomize.py", "/**/usercustomize.py", "/**/site-packages/*.pth", "/**/dist-packages/*.pth"} {
		sys(p, "Python start-up code that every python process runs")
	}
	for _, p := range []string{"/**/node_modules/@anthropic-ai/claude-code/**", "/**/.local/share/claude/**", "/**/.local/bin/claude"} {
		sys(p, "Claude Code's own install")
	}
	for _, d := range systemRoots {
		sys(d+"/**", "a system directory ("+d+")")
	}
	return rs
}

// systemRoots are the directories that belong to the system, not the
// agent: nothing the agent does may write below them. /dev's harmless
// sinks are let through by scratchPath.
var systemRoots = []string{"/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/dev",
	"/proc", "/sys", "/var/lib", "/var/spool", "/var/log", "/var/cache/debconf", "/run", "/snap"}

// scratchPath reports whether p (segments) is a place any write may go:
// the workspace, a temporary directory, or a harmless device.
func (g Guard) scratchPath(segs []string) bool {
	if len(segs) > 0 && segs[0] == "**" {
		// An unknown directory: judged by the other rules, by name.
		return true
	}
	ws := splitPath(filepath.Clean(g.Workspace))
	for _, root := range [][]string{ws, {"tmp"}, {"var", "tmp"}, {"dev", "shm"}} {
		if len(root) > 0 && len(segs) > len(root) && slices.Equal(segs[:len(root)], root) && !slices.Contains(segs, "..") {
			return true
		}
	}
	if len(segs) >= 2 && segs[0] == "dev" {
		switch segs[1] {
		case "null", "zero", "full", "random", "urandom", "tty", "stdout", "stderr", "stdin", "fd", "pts", "ptmx":
			return true
		}
	}
	return false
}

// stateDir is where the guard keeps per-session state.
func (g Guard) stateDir() string {
	if g.State != "" {
		return g.State
	}
	return filepath.Join(filepath.Clean(g.Workspace), StateDir)
}

// writeProtected names why the path (segments, possibly with glob
// segments, possibly starting with "**" for an unknown directory) may be a
// control-plane file, or "". With subtree set, the path counts when
// anything below it is protected too (rm -r, mv of a directory), except the
// files protected by name anywhere.
func (g Guard) writeProtected(segs []string, subtree bool) string {
	return g.match(segs, subtree, false, false)
}

// planeProtected is writeProtected without the system directories: what
// naming a path to a program that may write it must not reach.
func (g Guard) planeProtected(segs []string) string {
	return g.matchRules(withoutSystem(g.rules()), segs, false, false, false, false)
}

// withoutSystem drops the system directories' rules.
func withoutSystem(rules []pathRule) []pathRule {
	var out []pathRule
	for _, r := range rules {
		if !r.system {
			out = append(out, r)
		}
	}
	return out
}

// readProtected is writeProtected for the files that may not be read.
func (g Guard) readProtected(segs []string) string {
	return g.match(segs, false, true, false)
}

func (g Guard) match(segs []string, subtree, read, dotglob bool) string {
	return g.matchRules(g.rules(), segs, subtree, read, dotglob, false)
}

// matchRules is match over precomputed rules. byName judges a path in an
// unknown directory ("**" first) by its own names only: a protected
// directory's "**" tail does not match every relative path then.
func (g Guard) matchRules(rules []pathRule, segs []string, subtree, read, dotglob, byName bool) string {
	c := segs
	if subtree {
		c = append(append([]string(nil), segs...), "**")
	}
	for _, r := range rules {
		if read && !r.read || subtree && r.anywhere {
			continue
		}
		if r.system && (read || byName || g.scratchPath(segs) || subtree && r.segs[0] == "**" || len(segs) > 0 && hasGlob(segs[0])) {
			continue
		}
		rs := r.segs
		if byName && len(rs) > 1 && rs[len(rs)-1] == "**" {
			rs = rs[:len(rs)-1]
		}
		if !segsMatch(c, rs, dotglob) {
			continue
		}
		if r.except != nil && !subtree && segsWithin(c, r.except) {
			continue
		}
		return r.why
	}
	return ""
}

// splitPath turns a clean absolute path into segments ("/" is none).
func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// segsMatch reports whether some path matched by the candidate c can be
// matched by the rule r. Both may hold "**"; c may hold glob segments.
func segsMatch(c, r []string, dotglob bool) bool {
	switch {
	case len(r) == 0:
		return allStars(c)
	case len(c) == 0:
		return allStars(r)
	case r[0] == "**":
		return segsMatch(c, r[1:], dotglob) || segsMatch(c[1:], r, dotglob)
	case c[0] == "**":
		return segsMatch(c[1:], r, dotglob) || segsMatch(c, r[1:], dotglob)
	case !segCanMatch(c[0], r[0], dotglob):
		return false
	}
	return segsMatch(c[1:], r[1:], dotglob)
}

func allStars(s []string) bool {
	for _, x := range s {
		if x != "**" {
			return false
		}
	}
	return true
}

// segCanMatch: can the candidate segment c (literal or glob) name the same
// file as the rule segment r (literal or "*")?
func segCanMatch(c, r string, dotglob bool) bool {
	if r == "*" {
		return true
	}
	if hasGlob(r) {
		// A rule's pattern segment (*.pth): a literal is matched
		// against it; two patterns may overlap.
		if hasGlob(c) {
			return true
		}
		ok, err := path.Match(r, c)
		return ok && err == nil
	}
	if !hasGlob(c) {
		return c == r
	}
	// bash's globs match a leading dot only literally (dotglob off).
	// mvdan.cc/sh's globbing lets a leading ? or a run of stars match it
	// too; the guard takes the stricter reading and relies on the rule
	// only for a pattern that starts with a literal or a single *.
	if strings.HasPrefix(r, ".") && !strings.HasPrefix(c, ".") && !dotglob && skipsDotFiles(c) {
		return false
	}
	// POSIX classes ([[:alpha:]]) are beyond path.Match: they could match.
	if strings.Contains(c, "[:") || strings.Contains(c, "[=") || strings.Contains(c, "[.") {
		return true
	}
	// bash negates a bracket with ! as well as ^; Go only with ^.
	ok, err := path.Match(strings.ReplaceAll(c, "[!", "[^"), r)
	if err != nil {
		// bash takes a malformed pattern ("keys[]") literally.
		return c == r
	}
	return ok
}

func hasGlob(s string) bool { return strings.ContainsAny(s, "*?[") || strings.Contains(s, "(") }

// segsWithin reports whether every path matched by c lies inside the
// subtree e (which ends in "**").
func segsWithin(c, e []string) bool {
	for i, es := range e {
		if es == "**" {
			return true
		}
		if i >= len(c) || c[i] == "**" {
			return false
		}
		if es != "*" && c[i] != es {
			return false
		}
		if es == "*" && (c[i] == ".." || c[i] == ".") {
			return false
		}
	}
	return len(c) == len(e)
}

// normalized returns the clean path and, when it differs, the path with
// every symlink resolved: the file a write actually reaches. A dangling
// final symlink is followed too (writing it creates its target).
func normalized(p string) []string {
	p = filepath.Clean(p)
	out := []string{p}
	if r, err := resolveLinks(p); err == nil && r != p {
		out = append(out, r)
	} else if err != nil {
		// Too many links or an unreadable link: judge the worst case,
		// an unknown directory, by name.
		out = append(out, "/**/"+filepath.Base(p))
	}
	return out
}

// maxLinks is the kernel's symlink limit (ELOOP).
const maxLinks = 40

// resolveLinks resolves symlinks component by component, as far as the
// path exists; the rest is appended as written.
func resolveLinks(p string) (string, error) {
	rest := splitPath(p)
	cur := "/"
	links := 0
	for len(rest) > 0 {
		next := rest[0]
		rest = rest[1:]
		if next == "." {
			continue
		}
		if next == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		cand := filepath.Join(cur, next)
		st, err := os.Lstat(cand)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return filepath.Join(append([]string{cand}, rest...)...), nil
		}
		if err != nil {
			// ENOTDIR and friends: the write fails the same way.
			return filepath.Join(append([]string{cand}, rest...)...), nil
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			cur = cand
			continue
		}
		links++
		if links > maxLinks {
			return "", fmt.Errorf("%s: too many symlinks", p)
		}
		target, err := os.Readlink(cand)
		if err != nil {
			return "", fmt.Errorf("read link %s: %w", cand, err)
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		// A relative target resolves from the link's directory, cur.
		rest = append(splitPath(target), rest...)
	}
	return cur, nil
}

// skipsDotFiles: the pattern starts with a literal character or with a
// single * (as in *.go), so no reading of it matches a dot file.
func skipsDotFiles(c string) bool {
	switch {
	case c == "":
		return true
	case c[0] == '*':
		return !strings.HasPrefix(c, "**")
	case c[0] == '?' || c[0] == '[' || c[0] == '\\':
		return false
	}
	return true
}
