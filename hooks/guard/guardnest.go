package guard

// The guard's rules for programs that run other code: shells, wrappers,
// interpreters, git and claude.

import (
	"fmt"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"sbx.dev/sbx/hooks/readonly"
	"sbx.dev/sbx/hooks/shell"
)

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
			s.loaderVar(k, v)
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

// awkOutput finds `print > "file"` and `>> "file"` in an awk program: the
// file is a target; one named by an expression cannot be checked.
func (s *gstate) awkOutput(base, prog string) {
	for i := 0; i < len(prog); i++ {
		if prog[i] != '>' || i > 0 && prog[i-1] == '>' {
			continue
		}
		before := prog[:i]
		st := strings.LastIndexAny(before, ";{}\n")
		if !strings.Contains(before[st+1:], "print") {
			continue // a comparison
		}
		rest := strings.TrimLeft(strings.TrimPrefix(prog[i+1:], ">"), " \t")
		if rest == "" || rest[0] != '"' {
			s.fail("%s prints to a file named by an expression, which cannot be checked", base)
			return
		}
		end := strings.IndexByte(rest[1:], '"')
		if end < 0 {
			return
		}
		name := rest[1 : end+1]
		if strings.TrimLeft(rest[end+2:], " \t") != "" && !strings.ContainsAny(strings.TrimLeft(rest[end+2:], " \t")[:1], ";}\n)") {
			name += "x" // "dir/" $1: a file in that directory
		}
		s.targetFile(base+" print >", name)
	}
}

func (s *gstate) awk(base string, args []string, _ stdin) {
	if prog := operands(withoutValues(args, "-F", "-v", "-f")); len(prog) > 0 {
		s.awkOutput(base, prog[0])
	}
	for _, a := range args {
		if strings.Contains(a, "ENVIRON") || strings.Contains(a, "PROCINFO") {
			s.fact(&s.envDump, base+" ENVIRON")
		}
	}
	if err := readonly.CheckAwk(argList(args)); err == nil {
		return
	}
	for _, a := range args {
		if strings.Contains(a, "/inet") {
			s.fact(&s.network, base+" /inet")
		}
		if strings.Contains(a, "@load") || strings.Contains(a, "@include") {
			s.fail("%s program loads an extension or another program, which the guard cannot check", base)
			return
		}
		if strings.Contains(a, "system") || strings.Contains(strings.ReplaceAll(a, "||", ""), "|") {
			s.fail("%s program runs commands (system or |), which the guard cannot check", base)
			return
		}
	}
	s.scanCode(base, strings.Join(args, "\n"))
}

func argList(args []string) []shell.Arg {
	out := make([]shell.Arg, len(args))
	for i, a := range args {
		out[i] = shell.Arg{Text: stripEnv(a), Static: !hasMark(a)}
	}
	return out
}

func (s *gstate) git(_ string, args []string, _ stdin) {
	s.gitDirs(args)
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
	case "add", "commit", "stash":
		hit := s.taintHit
		s.taintHit = false
		for _, a := range operands(rest) {
			s.taintedIn(a, true)
		}
		if all := slices.ContainsFunc(rest, func(a string) bool { return a == "-A" || a == "--all" || a == "-a" || a == "-u" }); all && len(s.cwds) > 0 {
			s.taintedIn(s.cwds[0], true)
		}
		if s.taintHit {
			s.fail("git %s takes in a file filled from the environment earlier in the session; it would leave with the next push", sub)
			return
		}
		s.taintHit = hit
	case "push", "send-email", "request-pull":
		s.fact(&s.sends, "git "+sub)
	case "apply", "am":
		dirs := optValues(rest, "--directory")
		for _, d := range dirs {
			s.targetDir("git "+sub+" --directory", d)
		}
		if slices.Contains(rest, "--unsafe-paths") {
			s.fail("git %s --unsafe-paths writes outside the work tree", sub)
		}
		// Outside a repository git apply is patch: it writes where it runs.
		if len(dirs) == 0 && !slices.ContainsFunc(rest, func(a string) bool {
			return a == "--cached" || a == "--check" || a == "--stat" || a == "--numstat" || a == "--summary"
		}) {
			s.targetDir("git "+sub, ".")
		}
	case "checkout", "switch", "restore", "reset", "merge", "pull", "cherry-pick", "revert", "rebase", "read-tree", "checkout-index", "clean":
		// They write the work tree, which is where git runs unless -C or
		// --work-tree (checked above) say otherwise.
		s.targetDir("git "+sub, ".")
	}
	switch sub {
	case "push", "fetch", "pull", "clone", "ls-remote", "archive", "send-email", "request-pull", "submodule", "remote":
		if sub == "clone" {
			for _, d := range optValues(rest, "--separate-git-dir", "--template") {
				s.targetDir("git clone", d)
			}
		}
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
		s.gitGlobalConfig(rest)
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

func (s *gstate) interpreter(lang string, args []string, in stdin) {
	codeOpts := map[string]string{
		"python": "c", "node": "ep", "nodejs": "ep", "bun": "ep", "perl": "eE", "ruby": "e", "php": "r",
		"lua": "e", "luajit": "e", "Rscript": "e", "tclsh": "", "pwsh": "c", "irb": "", "jshell": "", "osascript": "e",
		"deno": "",
	}[lang]
	valued := map[string]string{
		"python": "mWXQ", "node": "r", "nodejs": "r", "bun": "r", "perl": "MmIx", "ruby": "rIEFCx0K", "php": "fcdz",
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
			if (c == 'l' || c == '0') && lang == "perl" {
				// -l and -0 take only attached digits: -le CODE.
				for k+1 < len(a) && a[k+1] >= '0' && a[k+1] <= '9' {
					k++
				}
				continue
			}
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
					// python -m MOD args: the module's business, but for
					// the archivers, which extract where they are told.
					s.pythonModule(v, args[i+1:])
					return
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
		"unpack(", "pack(", "marshal", "pickle", "Function(", "vm.run", "require(`", "process.binding", "execute(",
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
	if m, ok := firstContained(code, planeMarkers); ok {
		s.fail("%s code names the control plane (%s)", lang, m)
		return
	}
	if m, ok := firstContained(code, runMarkers); ok {
		s.fail("%s code runs commands or decodes code (%s), which the guard cannot check", lang, m)
		return
	}
	if s.codePaths(lang, code); s.err != nil {
		return
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
	_, ok := firstContained(s, subs)
	return ok
}

// firstContained returns the first of subs that s contains.
func firstContained(s string, subs []string) (string, bool) {
	for _, m := range subs {
		if strings.Contains(s, m) {
			return m, true
		}
	}
	return "", false
}

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

func readsProgramFromStdin(args []string) bool {
	for i := 1; i+1 < len(args); i++ {
		if (args[i] == "-f" || args[i] == "--file" || args[i] == "--makefile") &&
			(args[i+1] == "-" || args[i+1] == "/dev/stdin") {
			return true
		}
	}
	return false
}

// optionCode lists, per program, the options whose value the program runs
// as a shell command (GTFOBins' usual suspects); a value given after "="
// or as the next argument.
var optionCode = map[string][]string{
	"tar":   {"--to-command", "--use-compress-program", "-I", "--info-script", "-F", "--new-volume-script", "--checkpoint-action", "--rsh-command"},
	"zip":   {"-TT", "--unzip-command"},
	"scp":   {"-S"},
	"man":   {"-P", "--pager", "-H", "--html"},
	"rg":    {"--pre"},
	"gdb":   {"-ex", "--eval-command"},
	"vim":   {"-c", "--cmd"},
	"vi":    {"-c", "--cmd"},
	"nvim":  {"-c", "--cmd"},
	"ex":    {"-c", "--cmd"},
	"view":  {"-c", "--cmd"},
	"ssh":   {"-oProxyCommand", "-oLocalCommand"},
	"mysql": {"--pager"},
	"psql":  {"--pset"},
}

// codeOptions walks the commands hidden in such option values. Editors and
// debuggers take their own command language, where !cmd and shell cmd run
// a shell command.
func (s *gstate) codeOptions(base string, args []string) {
	opts, ok := optionCode[base]
	if !ok {
		return
	}
	for i, a := range args {
		for _, o := range opts {
			v, found := "", false
			switch {
			case a == o && i+1 < len(args):
				v, found = args[i+1], true
			case strings.HasPrefix(a, o+"="):
				v, found = a[len(o)+1:], true
			case strings.HasPrefix(o, "-") && !strings.HasPrefix(o, "--") && len(o) == 2 && strings.HasPrefix(a, o) && len(a) > 2:
				v, found = a[2:], true
			}
			if !found {
				continue
			}
			switch base {
			case "vim", "vi", "nvim", "ex", "view", "gdb":
				v = strings.TrimSpace(strings.TrimPrefix(v, ":"))
				if c, ok := strings.CutPrefix(v, "!"); ok {
					s.nestedCode(c, base+" "+o)
				} else if c, ok := strings.CutPrefix(v, "shell "); ok {
					s.nestedCode(c, base+" "+o)
				} else if f := strings.Fields(v); len(f) >= 2 && vimWrites[f[0]] {
					s.targetFile(base+" "+o+" "+f[0], f[1])
				} else if strings.Contains(v, "system(") || strings.HasPrefix(v, "py") || strings.HasPrefix(v, "lua") {
					s.fail("%s %s runs code the guard cannot check", base, o)
				}
			case "tar":
				if o == "--checkpoint-action" {
					c, ok := strings.CutPrefix(v, "exec=")
					if !ok {
						continue
					}
					v = c
				}
				s.nestedCode(v, base+" "+o)
			case "rg":
				s.run([]string{v, taintMark}, stdinNone) // rg runs PROGRAM FILE
			default:
				s.nestedCode(v, base+" "+o)
			}
		}
	}
	for _, a := range args {
		// vim +!cmd and +:!cmd run a shell command at startup.
		if (base == "vim" || base == "vi" || base == "nvim" || base == "view") && strings.HasPrefix(a, "+") {
			if c, ok := strings.CutPrefix(strings.TrimPrefix(a[1:], ":"), "!"); ok {
				s.nestedCode(c, base+" +!")
			}
		}
	}
}

// vimWrites are the editor commands that write the buffer to a file.
var vimWrites = map[string]bool{"w": true, "w!": true, "write": true, "write!": true, "wq": true, "wq!": true, "x": true,
	"x!": true, "sav": true, "sav!": true, "saveas": true, "saveas!": true, "up": true, "update": true, "w>>": true}

// sedCode: sed's e command and s///e flag run shell commands, and w
// writes a file named inside the script.
func (s *gstate) sedCode(_ string, args []string, _ stdin) {
	inPlace, scripted := false, false
	for _, a := range args {
		if a == "--in-place" || strings.HasPrefix(a, "--in-place=") || strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.Contains(a, "i") {
			inPlace = true
		}
		if a == "-e" || a == "-f" || a == "--expression" || a == "--file" || strings.HasPrefix(a, "--expression=") || strings.HasPrefix(a, "--file=") {
			scripted = true
		}
	}
	if inPlace {
		ops := operands(withoutValues(args, "-e", "-f", "--expression", "--file", "-l", "--line-length"))
		if !scripted && len(ops) > 0 {
			ops = ops[1:]
		}
		for _, o := range ops {
			s.targetFile("sed -i", o)
		}
	}
	err := readonly.CheckSed(argList(args))
	if err == nil {
		return
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "runs a program"):
		s.fail("sed script runs a shell command (e), which the guard cannot check")
	case strings.Contains(msg, "writes a file"):
		for _, a := range args {
			for _, f := range strings.FieldsFunc(a, func(r rune) bool { return r == ' ' || r == ';' || r == '\n' || r == '}' }) {
				if why := s.writeCheck(f, false); why != "" && strings.Contains(f, "/") {
					s.fail("sed script writes %s, which is %s", f, why)
					return
				}
			}
		}
	}
}
