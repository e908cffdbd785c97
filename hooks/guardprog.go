package hooks

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// call runs one simple command: its arguments are expanded first, then the
// assignments in front of it take effect.
func (s *gstate) call(x *syntax.CallExpr, in stdin) {
	args := s.fields(x.Args...)
	if s.err != nil {
		return
	}
	for _, a := range x.Assigns {
		s.assign(a, false)
	}
	if len(args) == 0 || s.err != nil {
		return
	}
	s.run(args, in)
}

// run decides one program with its expanded arguments; wrappers (sudo,
// env, xargs, timeout, ...) come back here with the program they run.
func (s *gstate) run(args []string, in stdin) {
	if s.err != nil || len(args) == 0 || !s.enter() {
		return
	}
	defer s.leave()
	name := args[0]
	if hasMark(name) {
		s.fail("the program name %s is computed at run time and cannot be checked", printable(name))
		return
	}
	if body, ok := s.funcs[name]; ok {
		saved, savedIn := s.pos, s.inPos
		s.pos, s.inPos = args[1:], true
		s.stmt(body, in)
		s.pos, s.inPos = saved, savedIn
		return
	}
	if strings.Contains(name, "/") && s.runsWritten(name) || s.shadowsProgram(name) {
		s.fail("%s runs a file this command writes; write it in one command and run it in another, so it can be checked", name)
		return
	}
	if readsProgramFromStdin(args) && in.kind == stdinPipeKind {
		s.fail("%s reads a program (-f -) from a pipe, which cannot be checked", name)
		return
	}
	base := filepath.Base(name)
	rest := args[1:]
	// Files whose content the command itself writes (tee, like a
	// redirection); a copied binary is no more unknown than any other.
	if base == "tee" || base == "sponge" {
		for _, o := range operands(rest) {
			s.wrote(o)
		}
	}
	// The program's own rules first: their reasons are the more precise.
	s.argChecks(base, rest)
	argErr := s.err
	s.err = nil
	defer func() {
		if s.err == nil {
			s.err = argErr
		}
	}()
	if networkTools[base] && !(base == "gh" && len(rest) > 0 && rest[0] == "auth") {
		s.fact(&s.network, base)
	}
	if writers[base] {
		for _, a := range rest {
			if hasTaint(a) {
				s.fail("%s gets an argument computed at run time (%s), which cannot be checked against the control plane", base, printable(a))
				return
			}
		}
	}
	if s.handlers == nil {
		s.handlers = buildHandlers()
	}
	if h, ok := s.handlers[base]; ok {
		h(s, base, rest, in)
		return
	}
	if strings.HasPrefix(base, "python") || strings.HasPrefix(base, "pypy") {
		s.interpreter("python", rest, in)
	}
}

// metaPrograms only look at a path's name or metadata.
var metaPrograms = map[string]bool{
	"ls": true, "stat": true, "test": true, "[": true, "realpath": true, "readlink": true, "basename": true,
	"dirname": true, "echo": true, "printf": true, "file": true, "cd": true, "pushd": true, "which": true, "type": true,
}

// argChecks are the checks every program's arguments get: network files,
// secret names, reading protected files, and naming a control-plane path
// to anything but a read-only program.
func (s *gstate) argChecks(base string, rest []string) {
	reader := isReader(base, rest)
	for _, a := range rest {
		plain := stripEnv(a)
		s.netPath(plain)
		// A secret's name is only text to a network tool (gh pr create
		// --body "uses GITHUB_TOKEN"); elsewhere (printenv NAME, grep NAME
		// .env) it may turn into the value.
		if !networkTools[base] {
			for _, tok := range identTokens(plain) {
				if isSecretName(tok) {
					s.fact(&s.secret, tok)
				}
			}
		}
		for _, n := range secretFiles {
			if strings.Contains(plain, n) {
				s.fact(&s.secret, n)
			}
		}
		if hasTaint(a) {
			continue
		}
		for _, c := range pathCandidates(plain) {
			s.netPath(c)
			if !metaPrograms[base] && !networkTools[base] && s.holdsSecrets(c) {
				if recursiveReader(base, rest) {
					s.fail("%s searches %s, which holds credentials or the agent's settings; search a narrower directory", base, c)
					return
				}
				s.fact(&s.secret, c+" (holds credentials)")
			}
			if !metaPrograms[base] {
				if why := s.readCheck(c); why != "" {
					s.fail("%s %s: reading %s is not allowed (%s)", base, printable(a), c, why)
					return
				}
			}
			if !reader {
				why := s.mentionCheck(c)
				if writers[base] {
					why = s.writeCheck(c, false)
				}
				if why != "" {
					s.fail("%s may change %s, which is %s", base, c, why)
					return
				}
			}
		}
	}
}

// secretFiles are names whose mention, with the network, is exfiltration.
var secretFiles = []string{".git-credentials", ".agent-mcp.json", "gh/hosts.yml", ".credentials.json", ".claude.json", ".ssh/", ".netrc", ".npmrc", ".pypirc", ".docker/config.json"}

// isReader reports whether the read-only lane's allow-list accepts the
// program with these arguments: it then cannot change what it names.
func isReader(base string, rest []string) bool {
	switch base {
	case "source", ".", "less", "more", "view", "bat", "tac":
		return true
	}
	p, ok := programs[base]
	if !ok {
		return false
	}
	if p.check == nil {
		return true
	}
	as := make([]arg, len(rest))
	for i, a := range rest {
		as[i] = arg{text: stripEnv(a), static: !hasMark(a) && !hasGlob(a)}
		if !as[i].static && !p.computed {
			return false
		}
	}
	return p.check(as) == nil
}

// pathCandidates are the paths an argument may name: itself, the value of
// an option (--out=F, of=F, -oF, @F for curl's data files).
func pathCandidates(a string) []string {
	if a == "" {
		return nil
	}
	out := []string{a}
	if _, v, ok := strings.Cut(a, "="); ok && v != "" {
		out = append(out, v)
	}
	if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && len(a) > 2 {
		out = append(out, a[2:])
	}
	for _, c := range out {
		if v, ok := strings.CutPrefix(c, "@"); ok && v != "" {
			out = append(out, v)
		}
	}
	return out
}

// identTokens splits text into shell-variable-like words.
func identTokens(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
}

// isSecretName reports whether an environment variable name holds a
// credential by convention.
func isSecretName(n string) bool {
	if n == "" || strings.ToUpper(n) != n {
		return false
	}
	switch n {
	case "GH_TOKEN", "GITHUB_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_PAT":
		return true
	}
	if strings.HasPrefix(n, "ANTHROPIC_") || strings.HasPrefix(n, "CLAUDE_CODE_OAUTH") {
		return true
	}
	for _, suf := range []string{"_TOKEN", "_SECRET", "_KEY", "_PASSWORD", "_PASSWD", "_CREDENTIALS", "_APIKEY", "_API_KEY"} {
		if strings.HasSuffix(n, suf) {
			return true
		}
	}
	return false
}

// networkTools reach the network whatever their arguments.
var networkTools = map[string]bool{
	"curl": true, "wget": true, "nc": true, "ncat": true, "netcat": true, "nc.openbsd": true,
	"nc.traditional": true, "socat": true, "ssh": true, "scp": true, "sftp": true, "telnet": true,
	"ftp": true, "tftp": true, "lftp": true, "dig": true, "nslookup": true, "host": true, "drill": true,
	"ping": true, "ping6": true, "traceroute": true, "tracepath": true, "mtr": true, "whois": true,
	"nmap": true, "aria2c": true, "axel": true, "http": true, "https": true, "xh": true, "httpie": true,
	"lynx": true, "w3m": true, "links": true, "elinks": true, "websocat": true, "wscat": true,
	"grpcurl": true, "mail": true, "mailx": true, "sendmail": true, "mutt": true, "swaks": true,
	"smbclient": true, "ldapsearch": true, "gh": true, "ssh-keyscan": true, "curlie": true, "arping": true,
	"resolvectl": true, "getent": false,
}

// writers take paths to change: none of their arguments may be computed
// at run time, since any could be a control-plane file.
var writers = map[string]bool{
	"cp": true, "mv": true, "tee": true, "rm": true, "rmdir": true, "unlink": true, "ln": true, "link": true,
	"chmod": true, "chown": true, "chgrp": true, "chattr": true, "setfacl": true, "truncate": true,
	"touch": true, "mkdir": true, "dd": true, "install": true, "rsync": true, "shred": true, "patch": true,
	"sponge": true, "mkfifo": true, "mknod": true, "sudoedit": true,
}

type handler func(s *gstate, base string, args []string, in stdin)

// buildHandlers is built per check: as a package variable it would refer
// to itself through run.
func buildHandlers() map[string]handler {
	h := map[string]handler{}
	for _, n := range []string{"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "rbash", "yash", "posh"} {
		h[n] = (*gstate).shell
	}
	for _, n := range []string{"rm", "rmdir", "unlink", "shred", "srm"} {
		h[n] = (*gstate).remove
	}
	for _, n := range []string{"mv", "ln", "link", "chmod", "chown", "chgrp", "chattr", "setfacl"} {
		h[n] = (*gstate).moveLink
	}
	h["cp"] = (*gstate).copyInto
	h["rsync"] = (*gstate).copyInto
	h["tar"] = (*gstate).extract
	h["unzip"] = (*gstate).extract
	h["find"] = (*gstate).find
	h["xargs"] = (*gstate).xargs
	h["eval"] = func(s *gstate, _ string, args []string, _ stdin) {
		s.shellCode(strings.Join(args, " "), s.positional(), "eval")
	}
	h["trap"] = func(s *gstate, _ string, args []string, _ stdin) {
		if len(args) >= 2 && args[0] != "-" && !strings.HasPrefix(args[0], "-") {
			s.nestedCode(args[0], "trap")
		}
	}
	h["source"] = (*gstate).source
	h["."] = (*gstate).source
	for _, n := range []string{"sudo", "doas", "nohup", "setsid", "unbuffer", "builtin", "exec", "command", "time",
		"nice", "ionice", "stdbuf", "chroot", "flock", "timeout", "env", "watch", "script", "su", "runuser",
		"strace", "ltrace", "taskset", "busybox", "fakeroot", "catchsegv", "chrt", "nsenter", "unshare", "firejail", "proot"} {
		h[n] = (*gstate).wrapper
	}
	for _, n := range []string{"node", "nodejs", "bun", "deno", "perl", "ruby", "php", "lua", "luajit", "Rscript", "tclsh", "pwsh", "irb", "jshell", "osascript"} {
		lang := n
		h[n] = func(s *gstate, _ string, args []string, in stdin) { s.interpreter(lang, args, in) }
	}
	for _, n := range []string{"awk", "gawk", "mawk", "nawk", "busybox-awk"} {
		h[n] = (*gstate).awk
	}
	h["git"] = (*gstate).git
	h["gh"] = func(s *gstate, _ string, args []string, _ stdin) {
		if len(args) >= 2 && args[0] == "auth" && (args[1] == "token" || slices.Contains(args, "--show-token") || slices.Contains(args, "-t")) {
			s.fact(&s.secret, "gh auth token")
		}
		if len(args) >= 2 && args[0] == "auth" && (args[1] == "login" || args[1] == "logout" || args[1] == "refresh" || args[1] == "setup-git" || args[1] == "switch") {
			s.fail("gh auth %s changes the GitHub CLI's credentials", args[1])
		}
		if len(args) >= 2 && (args[0] == "extension" || args[0] == "extensions") && args[1] == "install" {
			s.fail("gh extension install adds programs the GitHub CLI runs later")
		}
		if len(args) >= 2 && args[0] == "alias" && args[1] == "set" {
			s.fail("gh alias set installs a command the GitHub CLI runs later")
		}
	}
	h["openssl"] = func(s *gstate, _ string, args []string, _ stdin) {
		if len(args) > 0 && (args[0] == "s_client" || args[0] == "s_server" || args[0] == "s_time" || args[0] == "ocsp") {
			s.fact(&s.network, "openssl "+args[0])
		}
	}
	h["ssh"] = func(s *gstate, _ string, args []string, _ stdin) {
		for i, a := range args {
			opt := a
			if a == "-o" && i+1 < len(args) {
				opt = args[i+1]
			} else if !strings.HasPrefix(a, "-o") {
				continue
			} else {
				opt = a[2:]
			}
			k, v, ok := strings.Cut(opt, "=")
			if !ok {
				k, v, _ = strings.Cut(opt, " ")
			}
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "proxycommand", "localcommand", "knownhostscommand":
				s.nestedCode(v, "ssh "+k)
			}
		}
	}
	h["printenv"] = func(s *gstate, _ string, args []string, _ stdin) {
		if len(args) == 0 {
			s.fact(&s.envDump, "printenv")
		}
	}
	h["set"] = func(s *gstate, _ string, args []string, _ stdin) {
		if len(args) == 0 {
			s.fact(&s.envDump, "set")
		}
		// set -- a b and set a b replace the positional parameters.
		for i, a := range args {
			if a == "--" || a == "-" || !strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "+") {
				if a == "--" || a == "-" {
					i++
				}
				s.pos, s.inPos = slices.Clone(args[i:]), true
				return
			}
			if a == "-o" || a == "+o" {
				return
			}
		}
	}
	h["shift"] = func(s *gstate, _ string, _ []string, _ stdin) {
		if s.inPos {
			s.pos = []string{taintMark}
		}
	}
	h["compgen"] = func(s *gstate, _ string, args []string, _ stdin) {
		for _, a := range args {
			if a == "-e" || a == "-v" || a == "variable" || a == "export" {
				s.fact(&s.envDump, "compgen "+a)
			}
		}
	}
	h["export"] = func(s *gstate, _ string, args []string, _ stdin) {
		if len(args) == 0 || args[0] == "-p" {
			s.fact(&s.envDump, "export")
		}
	}
	h["alias"] = func(s *gstate, _ string, args []string, _ stdin) {
		for _, a := range args {
			if strings.Contains(a, "=") {
				s.fail("defining an alias (%s) is not allowed: the guard cannot follow aliases", printable(a))
			}
		}
	}
	h["hash"] = func(s *gstate, _ string, args []string, _ stdin) {
		if slices.Contains(args, "-p") {
			s.fail("hash -p maps a command name to another program")
		}
	}
	h["enable"] = func(s *gstate, _ string, args []string, _ stdin) {
		if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-f") }) {
			s.fail("enable -f loads a builtin from a shared object")
		}
	}
	h["shopt"] = func(s *gstate, _ string, args []string, _ stdin) {
		if slices.Contains(args, "-s") && (slices.Contains(args, "dotglob") || slices.Contains(args, "globstar")) {
			s.glob = true
		}
	}
	h["cd"] = (*gstate).cd
	h["pushd"] = (*gstate).cd
	h["popd"] = func(s *gstate, _ string, _ []string, _ stdin) { s.cwds = nil }
	h["read"] = (*gstate).read
	h["mapfile"] = (*gstate).read
	h["readarray"] = (*gstate).read
	h["getopts"] = (*gstate).read
	h["printf"] = func(s *gstate, _ string, args []string, _ stdin) {
		for i, a := range args {
			if a == "-v" && i+1 < len(args) {
				s.arithmText(args[i+1])
				name, _, _ := strings.Cut(args[i+1], "[")
				s.vars[name] = strVar(taintMark)
			}
		}
	}
	h["unset"] = func(s *gstate, _ string, args []string, _ stdin) {
		for _, a := range args {
			if !strings.HasPrefix(a, "-") {
				s.vars[a] = strVar("")
				delete(s.funcs, a)
			}
		}
	}
	h["claude"] = (*gstate).claude
	// npx @anthropic-ai/claude-code ..., node .../claude-code/cli.js ...
	for _, n := range []string{"npx", "bunx", "pnpx", "node", "nodejs", "bun", "deno"} {
		prev := h[n]
		h[n] = func(s *gstate, base string, args []string, in stdin) {
			for i, a := range args {
				if strings.Contains(a, "claude-code") {
					s.claude(base, args[i+1:], in)
					return
				}
			}
			if prev != nil {
				prev(s, base, args, in)
			}
		}
	}
	h["crontab"] = func(s *gstate, _ string, args []string, _ stdin) {
		if !(len(args) == 1 && args[0] == "-l") {
			s.fail("crontab installs commands that run later; only crontab -l is allowed")
		}
	}
	for _, n := range []string{"at", "batch", "systemd-run", "update-rc.d", "chkconfig", "launchctl", "rc-update", "insmod", "modprobe"} {
		h[n] = func(s *gstate, base string, _ []string, _ stdin) {
			s.fail("%s schedules or installs something that outlives the command", base)
		}
	}
	h["systemctl"] = func(s *gstate, _ string, args []string, _ stdin) {
		for _, a := range args {
			if strings.HasPrefix(a, "-") {
				continue
			}
			switch a {
			case "status", "show", "is-active", "is-enabled", "is-failed", "list-units", "list-unit-files", "list-timers", "cat":
				return
			}
			s.fail("systemctl %s changes the box's services", a)
			return
		}
	}
	h["service"] = func(s *gstate, _ string, args []string, _ stdin) {
		if !(len(args) == 2 && args[1] == "status") && !(len(args) == 1 && args[0] == "--status-all") {
			s.fail("service changes the box's services; only `service NAME status` is allowed")
		}
	}
	return h
}

// shell handles bash and its kin: -c CODE, a script file, or a program
// read from standard input.
func (s *gstate) shell(base string, args []string, in stdin) {
	cmode, smode := false, false
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "+") {
			break
		}
		switch a {
		case "--rcfile", "--init-file", "-o", "+o", "-O", "+O":
			i++
			continue
		}
		if strings.HasPrefix(a, "--") {
			continue
		}
		if strings.Contains(a, "c") {
			cmode = true
		}
		if strings.Contains(a, "s") {
			smode = true
		}
		if strings.ContainsAny(a[1:], "oO") {
			i++ // -eo pipefail
		}
	}
	ops := args[min(i, len(args)):]
	switch {
	case cmode:
		if len(ops) == 0 {
			s.fail("%s -c without a command", base)
			return
		}
		// sh -c CODE A0 A1...: A0 is $0 (judged unknown), A1 is $1.
		s.shellCode(ops[0], ops[min(2, len(ops)):], base+" -c")
	case len(ops) > 0 && !smode:
		s.scriptFile(base, ops[0], in)
	default:
		s.programOnStdin(base, in, func(code string) { s.shellCode(code, ops, base+" reading standard input") })
	}
}

// scriptFile allows running a script file (its content is the repository's
// business) but not one produced at run time.
func (s *gstate) scriptFile(base, p string, in stdin) {
	switch {
	case hasTaint(p):
		s.fail("%s runs a script whose path is computed at run time", base)
	case s.runsWritten(p):
		s.fail("%s runs %s, which this command writes; write it in one command and run it in another, so it can be checked", base, p)
	case strings.HasPrefix(p, "/dev/fd/") || strings.HasPrefix(p, "/proc/self/fd/"):
		s.fail("%s runs a program produced at run time (process substitution), which cannot be checked", base)
	case p == "/dev/stdin" || p == "/proc/self/fd/0" || p == "/dev/fd/0":
		s.programOnStdin(base, in, func(code string) { s.shellCode(code, nil, base+" /dev/stdin") })
	}
}

// programOnStdin decides a shell or interpreter that reads its program
// from standard input: from a pipe it is unknowable; a here-document is
// checked as code.
func (s *gstate) programOnStdin(base string, in stdin, code func(string)) {
	switch in.kind {
	case stdinPipeKind:
		s.fail("%s reads its program from a pipe; a program produced at run time (for example decoded base64) cannot be checked", base)
	case stdinCodeKind:
		code(in.code)
	}
}

func (s *gstate) source(base string, args []string, in stdin) {
	if len(args) == 0 {
		return
	}
	s.scriptFile(base, args[0], in)
}

// wrapper handles programs that run another program given in their
// arguments, after their own options.
func (s *gstate) wrapper(base string, args []string, in stdin) {
	valued := map[string]string{
		"sudo": "ugCDhpRrtTU", "doas": "uC", "nice": "n", "ionice": "cnp", "stdbuf": "ioe", "timeout": "sk",
		"exec": "a", "flock": "wEc", "watch": "nd", "strace": "oepsuEIabXP", "ltrace": "oepsuEnaS",
		"taskset": "", "chrt": "", "su": "sgc", "runuser": "ugsc", "script": "cTEIOBm", "time": "fo",
		"env": "uCS", "nsenter": "tSGw", "unshare": "", "firejail": "", "fakeroot": "ilsd", "proot": "rbw",
	}[base]
	i := 0
	var code string
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if base == "env" && strings.Contains(a, "=") && !strings.HasPrefix(a, "-") {
			k, v, _ := strings.Cut(a, "=")
			if cmdVars[k] {
				s.nestedCode(v, k+"=")
			}
			continue
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		if strings.HasPrefix(a, "--") {
			k, v, hasV := strings.Cut(a[2:], "=")
			switch k {
			case "command":
				if !hasV && i+1 < len(args) {
					i++
					v = args[i]
				}
				code = v
			case "split-string":
				if !hasV && i+1 < len(args) {
					i++
					v = args[i]
				}
				code = v
			case "chdir", "user", "group", "unset", "output", "signal", "kill-after", "adjustment", "preserve-env", "shell":
				if !hasV {
					i++
				}
			}
			continue
		}
		for k := 1; k < len(a); k++ {
			c := a[k]
			if strings.IndexByte(valued, c) < 0 {
				continue
			}
			v := a[k+1:]
			if v == "" && i+1 < len(args) {
				i++
				v = args[i]
			}
			if c == 'c' && (base == "su" || base == "runuser" || base == "script" || base == "flock") ||
				c == 'S' && base == "env" {
				code = v
			}
			if c == 'C' && base == "env" {
				s.cdTo(v)
			}
			if c == 'o' && (base == "strace" || base == "ltrace" || base == "time") {
				s.outFileArg(v)
			}
			break
		}
	}
	rest := args[min(i, len(args)):]
	switch base {
	case "timeout":
		if len(rest) > 0 {
			rest = rest[1:] // the duration
		}
	case "chroot":
		if len(rest) > 0 {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			rest = []string{"sh"}
		}
	case "flock":
		if len(rest) > 0 {
			rest = rest[1:] // the lock file or descriptor
		}
	case "taskset", "chrt":
		if len(rest) > 0 {
			rest = rest[1:]
		}
	case "su", "runuser":
		if len(rest) > 0 {
			rest = rest[1:] // the user
		}
		if code == "" {
			if len(rest) > 0 {
				s.fail("%s with extra arguments is not understood by the guard", base)
			}
			s.programOnStdin(base, in, func(c string) { s.shellCode(c, nil, base) })
			return
		}
		rest = nil
	case "script":
		rest = nil
	case "watch":
		if len(rest) > 0 && !slices.Contains(args, "-x") && !slices.Contains(args, "--exec") {
			code, rest = strings.Join(rest, " "), nil
		}
	case "command":
		if slices.Contains(args[:min(i, len(args))], "-v") || slices.Contains(args[:min(i, len(args))], "-V") {
			return
		}
	case "sudo", "doas":
		for _, a := range args[:min(i, len(args))] {
			if !strings.HasPrefix(a, "--") && (strings.Contains(a, "s") || strings.Contains(a, "i")) {
				if len(rest) > 0 {
					code, rest = strings.Join(rest, " "), nil
				} else {
					s.programOnStdin(base, in, func(c string) { s.shellCode(c, nil, base) })
					return
				}
				break
			}
		}
	case "env":
		if len(rest) == 0 && code == "" {
			s.fact(&s.envDump, "env")
			return
		}
	}
	if code != "" {
		if base == "env" {
			code += " " + quoteArgs(rest)
			rest = nil
		}
		s.shellCode(code, nil, base)
	}
	if len(rest) > 0 {
		s.run(rest, in)
	}
}

func quoteArgs(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		q, err := syntax.Quote(a, syntax.LangBash)
		if err != nil {
			q = taintMark
		}
		b.WriteString(q)
	}
	return b.String()
}

func (s *gstate) outFileArg(p string) {
	if hasTaint(p) {
		s.fail("an output file computed at run time (%s) cannot be checked", printable(p))
		return
	}
	if why := s.writeCheck(p, false); why != "" {
		s.fail("writing %s: %s", p, why)
	}
}

// systemDirs may not be deleted (nor moved away) as a whole.
var systemDirs = []string{"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
	"/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/local", "/usr/share", "/usr/include",
	"/usr/libexec", "/usr/local/bin", "/var/lib", "/var/log", "/var/cache", "/home/*"}

func (s *gstate) systemDir(p string) string {
	dirs := append(slices.Clone(systemDirs), s.g.homes()...)
	dirs = append(dirs, filepath.Clean(s.g.Workspace))
	for _, a := range s.absPaths(p) {
		for _, d := range dirs {
			if segsMatch(splitPath(a), splitPath(d), s.glob) {
				return d
			}
		}
	}
	return ""
}

// operands are the arguments that are not options (GNU getopt permutes).
func operands(args []string) []string {
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			out = append(out, a)
		}
	}
	return out
}

// remove handles rm and its kin: no system directory, no control-plane
// file and no directory holding one.
func (s *gstate) remove(base string, args []string, _ stdin) {
	for _, a := range args {
		if a == "--no-preserve-root" {
			s.fail("%s --no-preserve-root deletes the whole system", base)
			return
		}
	}
	for _, p := range operands(args) {
		if d := s.systemDir(p); d != "" {
			s.fail("%s %s deletes the system directory %s; deleting inside /workspace is fine", base, printable(p), d)
			return
		}
		if why := s.writeCheck(p, true); why != "" {
			s.fail("%s %s would delete %s", base, printable(p), why)
			return
		}
	}
}

// moveLink handles mv, ln, chmod and friends: a directory holding the
// control plane may not be moved, linked or have its modes changed.
func (s *gstate) moveLink(base string, args []string, in stdin) {
	ops := operands(args)
	for i, p := range ops {
		if base == "mv" && i < len(ops)-1 {
			if d := s.systemDir(p); d != "" {
				s.fail("mv %s moves the system directory %s away", printable(p), d)
				return
			}
		}
		if why := s.writeCheck(p, true); why != "" {
			s.fail("%s %s reaches %s", base, printable(p), why)
			return
		}
	}
	if base == "mv" || base == "ln" {
		s.intoDir(base, ops)
	}
}

// intoDir checks DEST/basename(SRC) for cp, mv and ln into a directory.
func (s *gstate) intoDir(base string, ops []string) {
	if len(ops) < 2 {
		return
	}
	dest := ops[len(ops)-1]
	for _, src := range ops[:len(ops)-1] {
		p := strings.TrimSuffix(dest, "/") + "/" + filepath.Base(src)
		if why := s.writeCheck(p, false); why != "" {
			s.fail("%s into %s writes %s", base, printable(dest), why)
			return
		}
	}
}

// copyInto handles cp and rsync: the destination, the file inside it, and
// a recursive copy into a directory that holds the control plane.
func (s *gstate) copyInto(base string, args []string, _ stdin) {
	ops := operands(args)
	if base == "rsync" {
		for i, a := range args {
			if (a == "-e" || a == "--rsh") && i+1 < len(args) {
				s.nestedCode(args[i+1], "rsync -e")
			} else if v, ok := strings.CutPrefix(a, "--rsh="); ok {
				s.nestedCode(v, "rsync --rsh")
			}
		}
		for _, o := range ops {
			if strings.Contains(o, ":") {
				s.fact(&s.network, "rsync to "+printable(o))
			}
		}
	}
	s.intoDir(base, ops)
	recursive := base == "rsync"
	for _, a := range args {
		if a == "-r" || a == "-R" || a == "-a" || a == "--recursive" || a == "--archive" ||
			strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsAny(a, "rRa") {
			recursive = true
		}
	}
	if recursive && len(ops) >= 2 && !strings.Contains(ops[len(ops)-1], ":") {
		if why := s.writeCheck(ops[len(ops)-1], true); why != "" {
			s.fail("a recursive %s into %s could overwrite %s", base, printable(ops[len(ops)-1]), why)
		}
	}
}

// extract handles tar and unzip writing a tree into a directory.
func (s *gstate) extract(base string, args []string, _ stdin) {
	dir, extracting := "", base == "unzip"
	for i, a := range args {
		switch {
		case base == "tar" && (a == "-C" || a == "--directory") && i+1 < len(args):
			dir = args[i+1]
		case base == "tar" && strings.HasPrefix(a, "--directory="):
			dir = strings.TrimPrefix(a, "--directory=")
		case base == "unzip" && a == "-d" && i+1 < len(args):
			dir = args[i+1]
		case base == "tar" && (a == "-x" || a == "--extract" || a == "--get" ||
			!strings.HasPrefix(a, "--") && strings.Contains(a, "x") && (i == 0 || strings.HasPrefix(a, "-"))):
			extracting = true
		}
	}
	if !extracting {
		return
	}
	if dir == "" {
		dir = "."
	}
	if hasTaint(dir) {
		s.fail("%s extracts into a directory the guard cannot determine", base)
		return
	}
	if why := s.writeCheck(dir, true); why != "" {
		s.fail("%s extracts into %s, which holds %s; extract into a new directory (such as /opt/NAME) instead", base, printable(dir), why)
	}
}

// find: -exec and friends run commands with unknown file names, -delete
// deletes under the start points, -fprint writes a file.
func (s *gstate) find(_ string, args []string, _ stdin) {
	var starts []string
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "-H" || a == "-L" || a == "-P" {
			continue
		}
		if a == "-D" || strings.HasPrefix(a, "-O") {
			if a == "-D" {
				i++
			}
			continue
		}
		if strings.HasPrefix(a, "-") || a == "(" || a == "!" || a == "," {
			break
		}
		starts = append(starts, a)
	}
	if len(starts) == 0 {
		starts = []string{"."}
	}
	for ; i < len(args); i++ {
		switch a := args[i]; a {
		case "-exec", "-execdir", "-ok", "-okdir":
			var cmd []string
			j := i + 1
			for ; j < len(args) && args[j] != ";" && !(args[j] == "+" && j > i+1 && args[j-1] == "{}"); j++ {
				c := args[j]
				if strings.Contains(c, "{}") {
					c = taintMark
				}
				cmd = append(cmd, c)
			}
			s.run(cmd, stdinNone)
			i = j
		case "-delete":
			for _, st := range starts {
				s.remove("find -delete", []string{st}, stdinNone)
			}
		case "-fprint", "-fprint0", "-fprintf", "-fls":
			if i+1 < len(args) {
				s.outFileArg(args[i+1])
			}
		}
		if s.err != nil {
			return
		}
	}
}

// xargs runs a command with arguments read from standard input.
func (s *gstate) xargs(_ string, args []string, _ stdin) {
	replace := ""
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") {
			break
		}
		switch {
		case a == "-I":
			if i+1 < len(args) {
				i++
				replace = args[i]
			}
		case strings.HasPrefix(a, "-I"):
			replace = a[2:]
		case a == "-i" || a == "--replace":
			replace = "{}"
		case strings.HasPrefix(a, "-i"), strings.HasPrefix(a, "--replace="):
			_, replace, _ = strings.Cut(strings.TrimPrefix(a, "-i"), "=")
			if replace == "" {
				replace = strings.TrimPrefix(a, "-i")
			}
		case a == "-a" || a == "--arg-file":
			if i+1 < len(args) {
				i++
				s.inFile(args[i])
			}
		case a == "-d" || a == "-E" || a == "-L" || a == "-n" || a == "-P" || a == "-s" || a == "-e" || a == "-l":
			i++
		}
	}
	cmd := slices.Clone(args[min(i, len(args)):])
	if len(cmd) == 0 {
		cmd = []string{"echo"}
	}
	if replace != "" {
		for k, c := range cmd {
			if strings.Contains(c, replace) {
				cmd[k] = taintMark
			}
		}
	} else {
		cmd = append(cmd, taintMark)
	}
	s.run(cmd, stdinNone)
}

// cd follows the working directory. A directory from the environment
// (cd "$GOPATH/src", cd "$(git rev-parse --show-toplevel)") was not chosen
// by the command and is taken as staying where it was; one the command
// computes makes the directory unknown, and relative paths are then judged
// as if they could be anywhere.
func (s *gstate) cd(_ string, args []string, _ stdin) {
	ops := operands(args)
	switch {
	case len(ops) == 0:
		s.cwds = []string{s.g.homes()[0]}
	case ops[0] == "-":
		s.cwds = nil
	default:
		s.cdTo(ops[0])
	}
}

func (s *gstate) cdTo(p string) {
	if hasTaint(p) || s.cdpath {
		s.cwds = nil
		return
	}
	if strings.Contains(p, envMark) {
		return
	}
	ps := s.absPaths(p)
	var out []string
	for _, d := range ps {
		if strings.Contains(d, "**") {
			s.cwds = nil
			return
		}
		if !hasGlob(d) { // for d in */; do (cd $d && make); done
			if r, err := resolveLinks(d); err == nil {
				d = r
			}
		}
		out = append(out, d)
	}
	s.cwds = out
	if len(out) == 0 {
		s.cwds = nil
	}
}

// read and friends set variables to unknown values.
func (s *gstate) read(base string, args []string, _ stdin) {
	valued := map[string]string{"read": "adinNptu", "mapfile": "dnOsuCc", "readarray": "dnOsuCc", "getopts": ""}[base]
	var names []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			c := a[len(a)-1]
			if strings.IndexByte(valued, c) >= 0 && i+1 < len(args) {
				i++
				if c == 'a' {
					names = append(names, args[i])
				}
			}
			continue
		}
		names = append(names, a)
	}
	switch base {
	case "getopts":
		if len(names) >= 2 {
			names = names[1:2]
		}
	case "mapfile", "readarray":
		if len(names) == 0 {
			names = []string{"MAPFILE"}
		}
	}
	if len(names) == 0 {
		names = []string{"REPLY"}
	}
	for _, n := range names {
		s.arithmText(n)
		n, _, _ = strings.Cut(n, "[")
		s.vars[n] = strVar(taintMark)
	}
}

// claude: the agent may not reconfigure its own runtime.
func (s *gstate) claude(_ string, args []string, _ stdin) {
	for name := range s.vars {
		if strings.HasPrefix(name, "ANTHROPIC_") || strings.HasPrefix(name, "CLAUDE_") ||
			strings.HasSuffix(strings.ToUpper(name), "_PROXY") {
			s.fail("running claude with %s set by the command redirects the agent's runtime", name)
			return
		}
	}
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--mcp-config", "--settings", "--setting-sources", "--dangerously-skip-permissions",
			"--permission-mode", "--allowedTools", "--allowed-tools", "--disallowedTools", "--disallowed-tools",
			"--add-dir", "--plugin-dir", "--strict-mcp-config", "--permission-prompt-tool":
			s.fail("claude %s changes the agent's runtime configuration", name)
			return
		}
	}
	if ops := operands(args); len(ops) > 0 {
		switch ops[0] {
		case "mcp", "config", "install", "update", "migrate-installer", "setup-token", "plugin", "plugins":
			s.fail("claude %s changes the agent's runtime configuration", ops[0])
		}
	}
}

// awk runs commands through system() and pipes, and reaches the network
// through gawk's /inet files.
func (s *gstate) awk(base string, args []string, _ stdin) {
	if err := checkAwk(argList(args)); err == nil {
		return
	}
	for _, a := range args {
		if strings.Contains(a, "/inet") {
			s.fact(&s.network, base+" /inet")
		}
		if strings.Contains(a, "system") || strings.Contains(strings.ReplaceAll(a, "||", ""), "|") {
			s.fail("%s program runs commands (system or |), which the guard cannot check", base)
			return
		}
	}
	s.scanCode(base, strings.Join(args, "\n"))
}

func argList(args []string) []arg {
	out := make([]arg, len(args))
	for i, a := range args {
		out[i] = arg{text: stripEnv(a), static: !hasMark(a)}
	}
	return out
}

// git: URLs make push/fetch/clone/remote network use; -c and git config
// values that git runs as commands are checked as shell code.
func (s *gstate) git(_ string, args []string, _ stdin) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-c" && i+1 < len(args):
			i++
			s.gitConfigValue(args[i])
		case strings.HasPrefix(a, "--config-env"):
			s.fail("git --config-env sets configuration from the environment, which cannot be checked")
			return
		case a == "-C" || a == "--git-dir" || a == "--work-tree" || a == "--namespace" || a == "--exec-path":
			if a == "--exec-path" {
				s.fail("git --exec-path runs git commands from another directory")
				return
			}
			i++
		case strings.HasPrefix(a, "--exec-path="):
			s.fail("git --exec-path runs git commands from another directory")
			return
		case strings.HasPrefix(a, "-"):
		default:
			goto sub
		}
	}
	return
sub:
	sub, rest := args[i], args[i+1:]
	switch sub {
	case "push", "fetch", "pull", "clone", "ls-remote", "archive", "send-email", "request-pull", "submodule", "remote":
		for _, a := range rest {
			if isURL(a) {
				s.fact(&s.network, "git "+sub+" "+printable(a))
			}
			for _, p := range []string{"--receive-pack=", "--upload-pack=", "--exec=", "--remote-exec="} {
				if v, ok := strings.CutPrefix(a, p); ok {
					s.nestedCode(v, "git "+strings.TrimSuffix(p, "="))
				}
			}
		}
	case "config":
		ops := operands(rest)
		if len(ops) > 0 && (ops[0] == "set" || ops[0] == "--add") {
			ops = ops[1:]
		}
		if len(ops) >= 2 {
			s.gitConfigValue(ops[0] + "=" + ops[1])
		}
	case "credential", "credential-store", "credential-cache":
		s.fact(&s.secret, "git "+sub)
	}
}

// gitCmdKeys are configuration keys whose value git runs.
func gitCmdKey(k string) bool {
	k = strings.ToLower(k)
	switch k {
	case "core.sshcommand", "core.pager", "core.editor", "core.fsmonitor", "core.askpass", "diff.external",
		"sequence.editor", "gpg.program", "gpg.ssh.program", "credential.helper", "uploadpack.packobjectshook",
		"pager.log", "pager.diff", "pager.show", "web.browser", "core.hookspath", "core.gitproxy":
		return true
	}
	return strings.HasPrefix(k, "alias.") || strings.HasPrefix(k, "pager.") ||
		strings.HasSuffix(k, ".command") || strings.HasSuffix(k, ".driver") || strings.HasSuffix(k, ".clean") ||
		strings.HasSuffix(k, ".smudge") || strings.HasSuffix(k, ".process") || strings.HasSuffix(k, ".textconv") ||
		strings.HasSuffix(k, ".receivepack") || strings.HasSuffix(k, ".uploadpack") || strings.HasSuffix(k, ".cmd") ||
		strings.HasSuffix(k, ".helper") || strings.HasSuffix(k, ".path") && strings.HasPrefix(k, "mergetool.")
}

func (s *gstate) gitConfigValue(kv string) {
	k, v, _ := strings.Cut(kv, "=")
	lk := strings.ToLower(k)
	switch {
	case strings.HasPrefix(lk, "url.") || strings.HasSuffix(lk, ".url") || strings.HasSuffix(lk, ".pushurl") ||
		strings.HasPrefix(lk, "http.") && (strings.Contains(lk, "proxy") || strings.Contains(lk, "extraheader")):
		s.fact(&s.network, "git config "+k)
		if strings.Contains(lk, "extraheader") {
			s.fact(&s.secret, "git config "+k)
		}
	case gitCmdKey(k):
		if lk == "core.hookspath" {
			return // a directory of scripts, like any script
		}
		if strings.HasPrefix(lk, "alias.") && !strings.HasPrefix(v, "!") {
			return // an alias for git subcommands
		}
		s.nestedCode(strings.TrimPrefix(v, "!"), "git config "+k)
	}
}

func isURL(a string) bool {
	if strings.Contains(a, "://") || strings.HasPrefix(a, "ext::") || strings.HasPrefix(a, "fd::") {
		return true
	}
	// scp-like user@host:path or host:path (not a refspec like a:b).
	at := strings.Index(a, "@")
	colon := strings.Index(a, ":")
	return at > 0 && colon > at
}

// interpreter decides python, node, perl, ruby and friends: inline code is
// scanned, a script file runs like any script, code from a pipe is
// unknowable.
func (s *gstate) interpreter(lang string, args []string, in stdin) {
	codeOpts := map[string]string{
		"python": "c", "node": "ep", "nodejs": "ep", "bun": "ep", "perl": "eE", "ruby": "e", "php": "r",
		"lua": "e", "luajit": "e", "Rscript": "e", "tclsh": "", "pwsh": "c", "irb": "", "jshell": "", "osascript": "e",
		"deno": "",
	}[lang]
	valued := map[string]string{
		"python": "mWXQ", "node": "r", "nodejs": "r", "bun": "r", "perl": "MmIlx0", "ruby": "rIEFCx0K", "php": "fcdz",
		"lua": "l", "luajit": "lj",
	}[lang]
	var codes []string
	script := ""
	inPlace := false
	i := 0
opts:
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			break
		}
		if strings.HasPrefix(a, "--") {
			k, v, hasV := strings.Cut(a[2:], "=")
			if k == "eval" || k == "print" || k == "command" {
				if !hasV && i+1 < len(args) {
					i++
					v = args[i]
				}
				codes = append(codes, v)
			}
			continue
		}
		for k := 1; k < len(a); k++ {
			c := a[k]
			if c == 'i' && (lang == "perl" || lang == "ruby") {
				inPlace = true
				break // -i.bak
			}
			if strings.IndexByte(codeOpts, c) >= 0 {
				v := a[k+1:]
				if v == "" && i+1 < len(args) {
					i++
					v = args[i]
				}
				codes = append(codes, v)
				continue opts
			}
			if strings.IndexByte(valued, c) >= 0 {
				v := a[k+1:]
				if v == "" && i+1 < len(args) {
					i++
					v = args[i]
				}
				if c == 'm' || c == 'M' || c == 'r' {
					s.scanModule(lang, v)
				}
				if c == 'm' && lang == "python" {
					return // python -m MOD args: the module's business
				}
				continue opts
			}
		}
	}
	if lang == "deno" && i < len(args) && args[i] == "eval" && i+1 < len(args) {
		codes = append(codes, args[i+1])
	}
	if i < len(args) {
		script = args[i]
	}
	if inPlace {
		for _, a := range args[i:] {
			if hasTaint(a) {
				s.fail("%s -i edits a file computed at run time", lang)
				return
			}
		}
	}
	for _, c := range codes {
		s.scanCode(lang, c)
	}
	if len(codes) > 0 {
		return
	}
	if script != "" && script != "-" {
		s.scriptFile(lang, script, in)
		return
	}
	s.programOnStdin(lang, in, func(code string) { s.scanCode(lang, code) })
}

func (s *gstate) scanModule(lang, mod string) {
	for _, m := range netMarkers {
		if strings.Contains(mod, m) {
			s.fact(&s.network, lang+" module "+mod)
			return
		}
	}
}

// Inline code is not parsed; it is scanned for what gives its intent away.
// Code that builds names at run time or decodes and runs more code is
// denied outright, since its intent cannot be read.
var (
	netMarkers = []string{"socket", "Socket", "urllib", "urlopen", "requests", "http", "HTTP", "ftplib", "smtplib",
		"telnetlib", "xmlrpc", "paramiko", "pycurl", "websocket", "WebSocket", "fetch(", "XMLHttpRequest", "axios",
		"'net'", "\"net\"", "node:net", "dgram", "'tls'", "\"tls\"", "LWP", "Net::", "open-uri", "URI.open",
		"fsockopen", "curl", "wget", "/dev/tcp", "/dev/udp", "gethostbyname", "getaddrinfo", "dns", "DNS", "resolver"}
	secretMarkers = []string{"environ", "getenv", "process.env", "ENV[", "ENV.fetch", "$ENV{", "%ENV", "Getenv",
		"$_ENV", "$_SERVER", "Deno.env", "Bun.env", ".git-credentials", ".agent-mcp.json", "hosts.yml",
		".credentials.json", "printenv"}
	runMarkers = []string{"subprocess", "os.system", "os.popen", "os.exec", "os.spawn", "pty.spawn", "child_process",
		"execSync", "spawnSync", "exec(", "eval(", "system(", "popen", "`", "Kernel.exec", "IO.popen", "%x",
		"Open3", "compile(", "__import__", "importlib", "getattr(", "__builtins__", "globals()", "b64decode",
		"a85decode", "b32decode", "b16decode", "unhexlify", "fromhex", "codecs.decode", "atob(", "Buffer.from",
		"unpack(", "pack(", "marshal", "pickle", "Function(", "vm.run", "require(`", "process.binding",
		"shell_exec", "passthru", "proc_open", "fromCharCode", "chr(", "\\x", "\\u00", "decode_base64", "MIME::Base64",
		"Base64", "base64"}
	planeMarkers = []string{".claude", ".agent-mcp.json", ".git-credentials", ".agent.log", ".agent.task",
		".agent.run", ".agent.done", ".agent.hooks.log", "gh/hosts.yml", ".bashrc", ".bash_profile", ".profile",
		".zshrc", "crontab", "/etc/cron", "ld.so.preload", "/usr/local/bin/sbx", "/etc/profile", "systemd"}
	homeMarkers  = []string{"expanduser", "homedir", "HOME", "~/", "/root", "Path.home", "Dir.home", "os.UserHomeDir", "getpwuid"}
	writeMarkers = []string{"'w'", "\"w\"", "'a'", "\"a\"", "'wb'", "\"wb\"", "'w+'", "write", "Write", "unlink",
		"remove", "rename", "rmtree", "chmod", "symlink", "copy", "move", "truncate", "mkdir", ">>", "'>'", "File.open"}
	deleteMarkers = []string{"rmtree", "unlink", "rmdir", "rm_rf", "rm -rf", "rmSync", "remove", "delete"}
	requireRe     = "require("
)

func (s *gstate) scanCode(lang, code string) {
	if hasMark(code) {
		s.fail("%s code computed at run time cannot be checked", lang)
		return
	}
	for _, m := range planeMarkers {
		if strings.Contains(code, m) {
			s.fail("%s code names the control plane (%s)", lang, m)
			return
		}
	}
	for _, m := range runMarkers {
		if strings.Contains(code, m) {
			s.fail("%s code runs commands or decodes code (%s), which the guard cannot check", lang, m)
			return
		}
	}
	if containsAny(code, writeMarkers) || containsAny(code, deleteMarkers) {
		for _, d := range append(slices.Clone(systemDirs), "/") {
			if strings.Contains(code, "'"+d+"'") || strings.Contains(code, "\""+d+"\"") || strings.Contains(code, "'"+d+"/'") {
				s.fail("%s code writes or deletes the system directory %s", lang, d)
				return
			}
		}
	}
	if containsAny(code, homeMarkers) && containsAny(code, writeMarkers) {
		s.fail("%s code writes under the home directory, where the control plane lives", lang)
		return
	}
	if strings.Contains(code, requireRe) || strings.Contains(code, "import(") {
		for _, part := range strings.Split(code, requireRe)[1:] {
			if part == "" || part[0] != '\'' && part[0] != '"' {
				s.fail("%s code loads a module named at run time", lang)
				return
			}
		}
	}
	for _, m := range netMarkers {
		if strings.Contains(code, m) {
			s.fact(&s.network, fmt.Sprintf("%s code using %s", lang, m))
			break
		}
	}
	for _, m := range secretMarkers {
		if strings.Contains(code, m) {
			s.fact(&s.secret, fmt.Sprintf("%s code reading %s", lang, m))
			break
		}
	}
	for _, tok := range identTokens(code) {
		if isSecretName(tok) {
			s.fact(&s.secret, tok)
			break
		}
	}
}

func containsAny(s string, subs []string) bool {
	for _, m := range subs {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// safeProducer reports whether a command substitution prints something the
// command cannot steer to the control plane: a fresh temporary name, the
// date, a directory name of a literal path.
func safeProducer(cs *syntax.CmdSubst) bool {
	if len(cs.Stmts) != 1 || len(cs.Stmts[0].Redirs) > 0 {
		return false
	}
	ce, ok := cs.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok || len(ce.Assigns) > 0 || len(ce.Args) == 0 {
		return false
	}
	switch ce.Args[0].Lit() {
	case "mktemp", "date", "nproc", "whoami", "id", "uname", "hostname", "pwd", "getconf":
		return true
	case "git":
		return len(ce.Args) >= 2 && (ce.Args[1].Lit() == "rev-parse" || ce.Args[1].Lit() == "describe" || ce.Args[1].Lit() == "branch")
	case "go":
		return len(ce.Args) >= 2 && ce.Args[1].Lit() == "env"
	}
	return false
}

// recursiveReader: a search that reads every file under a directory.
func recursiveReader(base string, args []string) bool {
	switch base {
	case "rg", "ag", "ack", "ack-grep":
		return true
	case "grep", "egrep", "fgrep", "zgrep":
		for _, a := range options(argList(args)) {
			if a == "--recursive" || a == "--dereference-recursive" || a == "-d" ||
				!strings.HasPrefix(a, "--") && strings.ContainsAny(a, "rR") {
				return true
			}
		}
	}
	return false
}

// shadowsProgram reports whether the command wrote a file named like the
// program it runs by name (PATH=/tmp:$PATH ls after writing /tmp/ls).
func (s *gstate) shadowsProgram(name string) bool {
	if strings.Contains(name, "/") {
		return false
	}
	for _, w := range s.written {
		if filepath.Base(w) == name {
			return true
		}
	}
	return false
}

// readsProgramFromStdin: make -f -, awk -f -, sed -f /dev/stdin and the
// like take their program from standard input.
func readsProgramFromStdin(args []string) bool {
	for i := 1; i+1 < len(args); i++ {
		if (args[i] == "-f" || args[i] == "--file" || args[i] == "--makefile") &&
			(args[i+1] == "-" || args[i+1] == "/dev/stdin") {
			return true
		}
	}
	return false
}
