package guard

import (
	"path/filepath"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"sbx.dev/sbx/hooks/readonly"
	"sbx.dev/sbx/hooks/shell"
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
	if isPattern(name) {
		// ~/.* runs the first file it matches with the others as arguments.
		s.fail("the program name %s is a pattern: the files it matches pick the program and its arguments", name)
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
	if readsProgramFromStdin(args) && (in.kind == stdinPipeKind || in.kind == stdinCodeKind) {
		s.fail("%s reads a program (-f -) from a pipe or here-document, which cannot be checked", name)
		return
	}
	base := filepath.Base(name)
	if b, _, ok := strings.Cut(base, "."); ok && (b == "mkfs" || b == "fsck") {
		base = b // mkfs.ext4, fsck.xfs
	}
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
	s.codeOptions(base, rest)
	s.outputs(base, rest)
	if h, ok := s.handlers[base]; ok {
		h(s, base, rest, in)
		return
	}
	if strings.HasPrefix(base, "python") || strings.HasPrefix(base, "pypy") {
		s.interpreter("python", rest, in)
	}
}

// printfS is what printf FORMAT ARGS... prints when the format has only
// %s directives, one per argument, and no escapes: printf -v p '%s/%s' a b.
func printfS(args []string) (string, bool) {
	if len(args) == 0 || strings.Contains(args[0], `\`) || strings.Count(args[0], "%") != strings.Count(args[0], "%s") ||
		strings.Count(args[0], "%s") != len(args)-1 {
		return "", false
	}
	out := args[0]
	for _, a := range args[1:] {
		out = strings.Replace(out, "%s", a, 1)
	}
	return out, true
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
		s.specialPath(plain)
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
			s.specialPath(c)
			s.taintedIn(c, treeReaders[base])
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
			if !reader && !metaPrograms[base] && isBlockDevice(c) {
				s.fail("%s %s: the box's disks are not the agent's to touch", base, c)
				return
			}
			if !reader {
				why := s.mentionCheck(c)
				if writers[base] && sourceTakers[base] {
					why = s.planeCheck(c)
				} else if writers[base] {
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
	p, ok := readonly.Lookup(base)
	if !ok {
		return false
	}
	if p.Check == nil {
		return true
	}
	as := make([]shell.Arg, len(rest))
	for i, a := range rest {
		as[i] = shell.Arg{Text: stripEnv(a), Static: !hasMark(a) && !hasGlob(a)}
		if !as[i].Static && !p.Computed {
			return false
		}
	}
	return p.Check(as) == nil
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
	"resolvectl": true,
}

// writers take paths to change: none of their arguments may be computed
// at run time, since any could be a control-plane file.
var writers = map[string]bool{
	"cp": true, "mv": true, "tee": true, "rm": true, "rmdir": true, "unlink": true, "ln": true, "link": true,
	"chmod": true, "chown": true, "chgrp": true, "chattr": true, "setfacl": true, "truncate": true,
	"touch": true, "mkdir": true, "dd": true, "install": true, "rsync": true, "shred": true, "patch": true,
	"sponge": true, "mkfifo": true, "mknod": true, "sudoedit": true,
}

// treeReaders read every file below a directory they are given: a file
// filled from the environment below it goes with them.
var treeReaders = map[string]bool{"tar": true, "bsdtar": true, "zip": true, "7z": true, "7za": true, "rsync": true,
	"scp": true, "sftp": true, "rclone": true, "cpio": true, "pax": true, "gzip": false}

// sourceTakers are writers whose operands include files they only read:
// their targets are checked by their handlers.
var sourceTakers = map[string]bool{"cp": true, "mv": true, "install": true, "ln": true, "link": true, "rsync": true,
	"dd": true, "patch": true}

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
			case "sendenv", "setenv":
				s.fact(&s.envDump, "ssh "+k)
			}
		}
	}
	h["printenv"] = func(s *gstate, _ string, args []string, _ stdin) {
		if len(operands(args)) == 0 {
			s.fact(&s.envDump, "printenv")
		}
	}
	h["ps"] = func(s *gstate, _ string, args []string, _ stdin) {
		for _, a := range args {
			// BSD-style e (ps e, ps auxe, ps eww) prints each process's
			// environment.
			if !strings.HasPrefix(a, "-") && strings.Contains(a, "e") || a == "-E" {
				s.fact(&s.envDump, "ps "+a)
			}
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
		if slices.Contains(args, "-s") && slices.Contains(args, "dotglob") {
			s.glob = true
		}
		if slices.Contains(args, "-s") && slices.Contains(args, "globstar") {
			s.globstar = true
		}
	}
	h["cd"] = (*gstate).cd
	h["pushd"] = func(s *gstate, base string, args []string, in stdin) {
		s.pushd = true
		s.cd(base, args, in)
	}
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
				if v, ok := printfS(args[i+2:]); ok && name == args[i+1] {
					s.vars[name] = strVar(v)
				}
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
	h["sed"] = (*gstate).sedCode
	// npx @anthropic-ai/claude-code ..., node .../claude-code/cli.js ...
	for _, n := range []string{"npx", "bunx", "pnpx", "node", "nodejs", "bun", "deno"} {
		prev := h[n]
		h[n] = func(s *gstate, base string, args []string, in stdin) {
			for i, a := range args {
				// A path or package spec, not code that names it.
				if strings.Contains(a, "claude-code") && !strings.ContainsAny(a, " ('\"`;") {
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
	targetHandlers(h)
	return h
}

// shell handles bash and its kin: -c CODE, a script file, or a program
// read from standard input.
// scriptFile allows running a script file (its content is the repository's
// business) but not one produced at run time.
// programOnStdin decides a shell or interpreter that reads its program
// from standard input: from a pipe it is unknowable; a here-document is
// checked as code.
// wrapper handles programs that run another program given in their
// arguments, after their own options.
// systemDirs may not be deleted (nor moved away) as a whole.
// operands are the arguments that are not options (GNU getopt permutes).
// remove handles rm and its kin: no system directory, no control-plane
// file and no directory holding one.
// moveLink handles mv, ln, chmod and friends: a directory holding the
// control plane may not be moved, linked or have its modes changed.
// intoDir checks DEST/basename(SRC) for cp, mv and ln into a directory.
// copyInto handles cp and rsync: the destination, the file inside it, and
// a recursive copy into a directory that holds the control plane.
// extract handles tar and unzip writing a tree into a directory.
// find: -exec and friends run commands with unknown file names, -delete
// deletes under the start points, -fprint writes a file.
// xargs runs a command with arguments read from standard input.
// cd follows the working directory. A directory from the environment
// (cd "$GOPATH/src", cd "$(git rev-parse --show-toplevel)") was not chosen
// by the command and is taken as staying where it was; one the command
// computes makes the directory unknown, and relative paths are then judged
// as if they could be anywhere.
// read and friends set variables to unknown values.
// claude: the agent may not reconfigure its own runtime.
// awk runs commands through system() and pipes, and reaches the network
// through gawk's /inet files.
// git: URLs make push/fetch/clone/remote network use; -c and git config
// values that git runs as commands are checked as shell code.
// gitCmdKeys are configuration keys whose value git runs.
// interpreter decides python, node, perl, ruby and friends: inline code is
// scanned, a script file runs like any script, code from a pipe is
// unknowable.
// Inline code is not parsed; it is scanned for what gives its intent away.
// Code that builds names at run time or decodes and runs more code is
// denied outright, since its intent cannot be read.
// safeProducer reports whether a command substitution prints something the
// command cannot steer to the control plane: a fresh temporary name, the
// date, a directory name of a literal path.
// recursiveReader: a search that reads every file under a directory.
// shadowsProgram reports whether the command wrote a file named like the
// program it runs by name (PATH=/tmp:$PATH ls after writing /tmp/ls).
// readsProgramFromStdin: make -f -, awk -f -, sed -f /dev/stdin and the
// like take their program from standard input.

// isPattern reports whether bash would glob the word: *, ?, or a bracket
// that closes ("[" alone is the test builtin).
func isPattern(w string) bool {
	if strings.ContainsAny(w, "*?") {
		return true
	}
	i := strings.IndexByte(w, '[')
	return i >= 0 && strings.IndexByte(w[i+1:], ']') >= 0
}
