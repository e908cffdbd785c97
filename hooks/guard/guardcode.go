package guard

// The guard's reading of code it is handed as text: interpreter code
// (python -c, node -e, heredocs) and the content a Write or Edit plants in
// a file that will run later.

import (
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"sbx.dev/sbx/hooks/shell"
)

// codeLit is a string literal in interpreter code; joined when it is
// concatenated or formatted with something else, so the text the program
// uses is not the literal.
type codeLit struct {
	val    string
	joined bool
}

// codeLiterals extracts the quoted string literals of code in the C
// family's, Python's, Perl's, Ruby's and JavaScript's common spelling.
func codeLiterals(code string) []codeLit {
	var out []codeLit
	for i := 0; i < len(code); i++ {
		q := code[i]
		if q != '\'' && q != '"' && q != '`' {
			continue
		}
		j := i + 1
		var b strings.Builder
		for j < len(code) && code[j] != q {
			if code[j] == '\\' && j+1 < len(code) {
				j++
			}
			b.WriteByte(code[j])
			j++
		}
		v := b.String()
		before := strings.TrimRight(code[:i], " \t\n")
		after := strings.TrimLeft(code[min(j+1, len(code)):], " \t\n")
		joined := strings.HasSuffix(before, "+") || strings.HasSuffix(before, ".") || strings.HasSuffix(before, ",") && strings.Contains(before, "join") ||
			strings.HasPrefix(after, "+") || strings.HasPrefix(after, ".") && !strings.HasPrefix(after, ".write") && !strings.HasPrefix(after, ".read") ||
			strings.HasPrefix(after, "%") || strings.HasPrefix(after, "*") ||
			strings.ContainsAny(v, "{$#%") || strings.HasPrefix(before, "f") && strings.HasSuffix(before, "f")
		if i > 0 && (code[i-1] == 'f' || code[i-1] == 'F') {
			joined = true // a Python f-string
		}
		out = append(out, codeLit{val: v, joined: joined})
		i = j
	}
	return out
}

var (
	// codeWrites are calls that change files, beyond writeMarkers.
	codeWrites = []string{"writeFile", "appendFile", "Bun.write", "file_put_contents", "os.replace", "link(", "FileUtils",
		"rm_rf", "rmSync", "makedirs", "write_text", "write_bytes", "'x'", "\"x\"", "O_WRONLY", "O_CREAT", "O_TRUNC",
		"shutil.", "fs.", "cpSync", "copyFile", "rename", "mkdir_p", "move(", "symlink", "Set-Content", "Out-File", "writeLines", "write.csv", "Deno.write", "Deno.remove", "Deno.rename", "fopen", "IO.write", "cp(", "mv(", "rm(", "open(F", "open(my", "sysopen"}
	// codeEnvDynamic reaches the environment or a global by a computed
	// name: a dump of the environment for the guard's purposes.
	codeEnvDynamic = []string{"process[", "'process')", "\"process\")", "node:process", ".env)", ".env,", ".env}", "environb", "globalThis[", "global[", "Reflect.", "__dict__", "vars(", "ENV.to_", "ENV.each",
		"ENV.keys", "ENV.values", "ENV.map", "ENV.select", "ENV.inspect", "ENV.sort", "ENV.filter", "getenv()", "environ.items",
		"environ.copy", "os.environ)", "os.environ,", "(os.environ", "Deno.env.toObject", "Bun.env", "keys %ENV", "%ENV)",
		"os.Environ()", "env::vars", "System.getenv()", "ENVIRON", "/environ"}
	// pathSeparators build absolute paths without a "/" in the text.
	pathSeparators = []string{".sep", "SEPARATOR", "sep.join", "anchor", "Path.root", "abspath(os.curdir", "os.path.abspath('/"}
	// planeNames in a file's content: code that, run later, would write
	// the control plane.
	planeNames = []string{"/etc/claude-code", ".claude/settings", ".claude/hooks", "ld.so.preload", "ld.so.conf", "/usr/local/bin/sbx",
		".agent.task", ".agent.hooks", "sitecustomize", "usercustomize", "claude-code/cli.js", "disableAllHooks", "managed-settings.json",
		".credentials.json", ".git-credentials"}
	// pythonStartup are names whose writing plants code every python
	// process runs.
	pythonStartup = []string{"site.", "getsitepackages", "getusersitepackages", "site-packages", "dist-packages",
		"sitecustomize", "usercustomize", ".pth", "PYTHONSTARTUP", "node_modules/@anthropic-ai", "claude-code", "ld.so"}
)

// codePaths denies interpreter code whose file paths the guard cannot
// place: a path built at run time from pieces (the text split to hide
// '/root/.claude'), and code that can write given a path outside the
// workspace and /tmp.
func (s *gstate) codePaths(lang, code string) {
	writes := containsAny(code, writeMarkers) || containsAny(code, deleteMarkers) || containsAny(code, codeWrites)
	if writes {
		if m, ok := firstContained(code, pathSeparators); ok {
			s.fail("%s code can write and builds paths from %s; the guard cannot tell where they lead", lang, m)
			return
		}
		if m, ok := firstContained(code, pythonStartup); ok {
			s.fail("%s code writes and names %s: code other programs load at start", lang, m)
			return
		}
	}
	for _, l := range codeLiterals(code) {
		v := l.val
		if writes && !l.joined && strings.ContainsAny(v, "./") && !strings.ContainsAny(v, " \n\t") && v != "." && v != "/" {
			// A file the code may write: remembered, like a
			// redirection's target, should the code read the environment.
			defer s.wrote(v)
		}
		pathy := strings.HasPrefix(v, "/") || strings.HasPrefix(v, "~") || strings.Contains(v, "..") || strings.HasPrefix(v, "\\")
		if !pathy {
			continue
		}
		inside := s.scratchOnly(v) && !strings.Contains(v, "..")
		switch {
		case l.joined && !inside || v == "/" && writes:
			s.fail("%s code builds a path at run time from %q; the guard cannot tell where it leads", lang, v)
			return
		case writes && !inside && !shell.OutputSinks[v] && !strings.HasPrefix(v, "/dev/fd/") && !strings.HasPrefix(v, "//"):
			if strings.ContainsAny(v, " \n") {
				continue // text, not a path
			}
			s.fail("%s code can write and names %q, outside the workspace and /tmp", lang, v)
			return
		}
	}
	if containsAny(code, codeEnvDynamic) || hasToken(code, "ENV") {
		s.fact(&s.envDump, lang+" code reading the environment")
	}
}

func hasToken(code, tok string) bool {
	for _, t := range identTokens(code) {
		if t == tok {
			return true
		}
	}
	return false
}

// pythonModule: python -m MOD ARGS. The archivers extract where they are
// told; http.server serves a directory to the network; pip installs.
func (s *gstate) pythonModule(mod string, args []string) {
	switch mod {
	case "zipfile", "tarfile":
		for i, a := range args {
			if a == "-e" || a == "--extract" {
				ops := operands(args[i+1:])
				dir := "."
				if len(ops) >= 2 {
					dir = ops[1]
				}
				s.targetDir("python -m "+mod+" -e", dir)
			}
		}
	case "http.server", "SimpleHTTPServer", "uploadserver":
		s.fact(&s.network, "python -m "+mod)
		dir := "."
		for _, d := range optValues(args, "-d", "--directory") {
			dir = d
		}
		if s.holdsSecrets(dir) {
			s.fail("python -m %s serves %s, which holds credentials", mod, dir)
		}
	case "pip":
		s.pip("pip", args, stdinNone)
	}
}

// plantPatterns are compiled on the first Write or Edit that needs them:
// compiled at package init, every hook process (most of them deciding a
// Bash command) paid for them.
var plantPatterns = sync.OnceValue(func() [4]*regexp.Regexp {
	return [4]*regexp.Regexp{regexp.MustCompile(plantEnv), regexp.MustCompile(plantSecret), regexp.MustCompile(plantNet),
		regexp.MustCompile(plantEnvCode)}
})

const (
	// plantEnv are ways code dumps the whole environment, in the shell
	// and in the usual languages.
	plantEnv = (`(?m)(^|[|;&(\x60\s"'@-]|\$\(|\$\$\()(env|printenv|set|export -p|export|declare -p?x|declare -p|typeset -x|compgen -e)\s*($|[|;&)>\x60"']|\s*\|)` +
		`|/proc/[^/\s]+(/task/[^/\s]+)?/environ|\bENVIRON\b|jq\s+-n\s+['"]?\$?env|\$ENV\b`)
	// plantEnvCode are a language's dumps of the environment.
	plantEnvCode = (`process\.env\s*[),;}\]]|JSON\.stringify\(\s*process\.env|Object\.(entries|keys|values)\(\s*process\.env|\{\s*\.\.\.process\.env` +
		`|os\.environ\s*[),\]}]|environ\.(items|copy|keys|values)\(|dict\(\s*os\.environ|str\(\s*os\.environ|repr\(\s*os\.environ|os\.environ\s*$` +
		`|ENV\.(to_h|to_a|to_s|each|keys|values|inspect|map|select|sort)|\bENV\s*[),]|%ENV|getenv\(\s*\)|os\.Environ\(\)|env::vars|System\.getenv\(\s*\)` +
		`|Deno\.env\.toObject|Bun\.env\b|/proc/[^/\s]+(/task/[^/\s]+)?/environ|\bENVIRON\b|jq\s+-n\s+['"]?\$?env|\$ENV\b` +
		`|process\[|globalThis\[`)
	// plantSecret reads a credential variable by name.
	plantSecret = (`(\$\{?|env\.|environ\[\s*['"]|environ\.get\(\s*['"]|getenv\(\s*['"]|ENV\[\s*['"]|ENV\.fetch\(\s*['"]|Getenv\(\s*"|\$ENV\{)([A-Z][A-Z0-9_]*)`)
	// plantNet sends data out.
	plantNet = (`\b(curl|wget|nc|ncat|netcat|socat|scp|sftp|rsync|telnet|nslookup|dig)\b|/dev/(tcp|udp)/|fetch\(|XMLHttpRequest|https?\.(request|get|post)\(|` +
		`requests\.(post|get|put|patch|request|Session)|urllib|urlopen|http\.client|httpx|aiohttp|socket\.|socket\(|create_connection|` +
		`http\.(Post|Get|NewRequest|PostForm|DefaultClient)|net\.Dial|Net::HTTP|LWP|HTTP::Tiny|IO::Socket|TCPSocket|open-uri|URI\.open|` +
		`java\.net|URL\(|HttpClient|axios|got\(|node-fetch|undici|WebSocket|dgram|fsockopen|curl_exec|reqwest|ureq|hyper::|TcpStream|` +
		`require\(\s*\\?['"](node:)?(https?|net|tls|dgram|http2)\\?['"]\s*\)|npm\s+(publish|view|install\s+https?:)|pip\s+(download|install)\s+['"]?https?:|git\s+push\s+\S*(://|@)`)
)

// isDocument: documentation, which nothing runs.
func isDocument(p string) bool {
	switch strings.ToLower(filepath.Ext(p)) {
	case ".md", ".markdown", ".rst", ".txt", ".adoc", ".org", ".tex", ".html":
		return true
	}
	return false
}

// plantsControlWrite reports a control-plane name in text that can
// write files (code, or a shell redirection): run later, it would change
// what the guard protects.
func plantsControlWrite(text string) string {
	for _, m := range planeNames {
		if strings.Contains(text, m) && (containsAny(text, writeMarkers) || containsAny(text, codeWrites) ||
			strings.Contains(text, ">") || containsAny(text, []string{"cp ", "mv ", "tee ", "install ", "ln ", "rm "})) {
			return m
		}
	}
	return ""
}

// plantsExfiltration reports what in text would send the environment or
// a secret out when run: a file that dumps the environment (or reads a
// credential variable) and reaches the network.
func plantsExfiltration(text string) string {
	re := plantPatterns()
	net := re[2].FindString(text)
	if net == "" {
		return ""
	}
	// A shell's dump of the environment goes out in the same command (a
	// line, with its continuations); a language's anywhere in the file.
	for _, line := range strings.Split(strings.ReplaceAll(text, "\\\n", " "), "\n") {
		if m := re[0].FindString(line); m != "" {
			if n := re[2].FindString(line); n != "" {
				return strings.TrimSpace(m) + " with " + n
			}
		}
	}
	if m := re[3].FindString(text); m != "" {
		return strings.TrimSpace(m) + " with " + net
	}
	for _, m := range re[1].FindAllStringSubmatch(text, -1) {
		if isSecretName(m[2]) {
			return m[2] + " with " + net
		}
	}
	return ""
}
