package guard

// The guard's rules for writers that take a target directory or work tree,
// for tools that reach the network by other names (package managers), and
// for programs that change disks, mounts and the loader.

import (
	"path/filepath"
	"slices"
	"strings"

	"sbx.dev/sbx/hooks/shell"
)

// planeCheck is writeCheck without the system directories: for an
// argument that may be a source (cp /etc/os-release .) rather than the
// target.
func (s *gstate) planeCheck(p string) string {
	s.noSystem = true
	defer func() { s.noSystem = false }()
	return s.writeCheck(p, false)
}

// scratchOnly reports whether every path p may name lies in the workspace
// or a temporary directory.
func (s *gstate) scratchOnly(p string) bool {
	if hasMark(p) {
		return false
	}
	as := s.absPaths(p)
	for _, a := range as {
		if strings.HasPrefix(a, "/**") || !s.g.scratchPath(splitPath(a)) {
			return false
		}
	}
	return len(as) > 0
}

// targetDir checks a directory a program writes a tree into (tar -C,
// unzip -d, patch -d, git --work-tree, curl --output-dir): it may not be
// computed at run time, nor hold the control plane or be a system
// directory.
func (s *gstate) targetDir(what, dir string) {
	if s.err != nil {
		return
	}
	if hasTaint(dir) {
		s.fail("%s writes into a directory computed at run time (%s), which cannot be checked", what, printable(dir))
		return
	}
	if why := s.writeCheck(dir, true); why != "" {
		s.fail("%s writes into %s, which holds %s", what, printable(dir), why)
	}
}

// targetFile checks one file a program writes (dd of=, curl -o).
func (s *gstate) targetFile(what, p string) {
	if s.err != nil || p == "-" || shell.OutputSinks[p] {
		return
	}
	if hasTaint(p) {
		s.fail("%s writes a file computed at run time (%s), which cannot be checked", what, printable(p))
		return
	}
	s.wrote(p)
	if why := s.writeCheck(p, false); why != "" {
		s.fail("%s writes %s, which is %s", what, printable(p), why)
	}
}

// optValue returns the values of an option in its spellings: "-o V",
// "-oV", "--output V", "--output=V". Short options are given as "-o".
func optValues(args []string, names ...string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		for _, n := range names {
			switch {
			case a == n && i+1 < len(args):
				out = append(out, args[i+1])
			case strings.HasPrefix(n, "--") && strings.HasPrefix(a, n+"="):
				out = append(out, a[len(n)+1:])
			case !strings.HasPrefix(n, "--") && len(n) == 2 && strings.HasPrefix(a, n) && len(a) > 2 && !strings.HasPrefix(a, "--"):
				out = append(out, a[2:])
			case !strings.HasPrefix(n, "--") && len(n) == 2 && isFlagBundle(a) && a[len(a)-1] == n[1] && i+1 < len(args):
				// -sft DIR: a bundle of flags ending in the option.
				out = append(out, args[i+1])
			}
		}
	}
	return out
}

// isBlockDevice: a disk, partition or device-mapper node.
func isBlockDevice(p string) bool {
	rest, ok := strings.CutPrefix(filepath.Clean(p), "/dev/")
	if !ok {
		return false
	}
	for _, pre := range []string{"vd", "sd", "hd", "xvd", "nvme", "mmcblk", "dm-", "mapper/", "disk/", "loop", "md", "nbd", "pmem", "ram", "sr", "mem", "kmem", "port"} {
		if strings.HasPrefix(rest, pre) {
			return true
		}
	}
	return false
}

// writesInto: a long option's name says it names where the program writes.
func writesInto(k string) bool {
	if strings.Contains(k, "include") || strings.Contains(k, "exclude") || strings.Contains(k, "source") || strings.Contains(k, "input") || strings.Contains(k, "from") ||
		strings.Contains(k, "sysroot") || strings.Contains(k, "config") {
		return false
	}
	for _, w := range []string{"dir", "dest", "prefix", "root", "target", "output", "out", "install", "into", "location", "home", "path"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// isFlagBundle: -abc, letters only.
func isFlagBundle(a string) bool {
	if len(a) < 3 || a[0] != '-' || a[1] == '-' {
		return false
	}
	for _, c := range a[1:] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// targetHandlers are the programs that write where an option or an
// operand says.
func targetHandlers(h map[string]handler) {
	h["dd"] = func(s *gstate, _ string, args []string, _ stdin) {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "of="); ok {
				s.targetFile("dd of=", v)
			}
		}
	}
	h["bsdtar"] = (*gstate).extract
	for _, n := range []string{"7z", "7za", "7zr", "7zz"} {
		h[n] = func(s *gstate, base string, args []string, _ stdin) {
			if len(args) == 0 || (args[0] != "x" && args[0] != "e") {
				return
			}
			dir := "."
			for _, a := range args {
				if v, ok := strings.CutPrefix(a, "-o"); ok {
					dir = v
				}
			}
			s.targetDir(base+" "+args[0], dir)
		}
	}
	h["patch"] = func(s *gstate, _ string, args []string, _ stdin) {
		dirs := optValues(args, "-d", "--directory")
		for _, d := range dirs {
			s.targetDir("patch -d", d)
		}
		if len(dirs) == 0 && !slices.Contains(args, "--dry-run") {
			s.targetDir("patch", ".") // it patches the files where it runs
		}
		for _, o := range optValues(args, "-o", "--output", "-B", "--prefix", "-r", "--reject-file") {
			s.targetFile("patch", o)
		}
		for _, o := range operands(args) {
			s.targetFile("patch", o)
		}
	}
	h["curl"] = func(s *gstate, _ string, args []string, _ stdin) {
		dirs := optValues(args, "--output-dir")
		for _, d := range dirs {
			s.targetDir("curl --output-dir", d)
		}
		for _, o := range optValues(args, "-o", "--output") {
			if len(dirs) > 0 && !filepath.IsAbs(o) {
				o = dirs[len(dirs)-1] + "/" + o
			}
			s.targetFile("curl -o", o)
		}
		for _, a := range args {
			// -sSLo FILE: a bundle of short flags ending in o.
			if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && len(a) > 2 && strings.HasSuffix(a, "o") {
				if i := slices.Index(args, a); i+1 < len(args) {
					s.targetFile("curl -o", args[i+1])
				}
			}
		}
		for _, c := range optValues(args, "-c", "--cookie-jar", "-D", "--dump-header", "--trace", "--trace-ascii", "--stderr", "--libcurl", "--etag-save") {
			s.targetFile("curl", c)
		}
	}
	h["wget"] = func(s *gstate, _ string, args []string, _ stdin) {
		for _, d := range optValues(args, "-P", "--directory-prefix") {
			s.targetDir("wget -P", d)
		}
		for _, o := range optValues(args, "-O", "--output-document", "-o", "--output-file", "-a", "--append-output") {
			s.targetFile("wget -O", o)
		}
	}
	for _, n := range []string{"mkfs", "mke2fs", "mkswap", "wipefs", "sfdisk", "fdisk", "cfdisk", "sgdisk", "gdisk",
		"parted", "blkdiscard", "cryptsetup", "losetup", "mount", "umount", "swapon", "swapoff", "setcap", "tune2fs",
		"debugfs", "e2fsck", "fsck", "hdparm", "sysctl", "pivot_root", "switch_root", "kexec", "reboot", "poweroff",
		"halt", "shutdown", "init", "telinit", "useradd", "usermod", "userdel", "groupadd", "passwd", "chpasswd", "visudo",
		"update-alternatives", "dpkg-divert", "chroot"} {
		h[n] = func(s *gstate, base string, args []string, _ stdin) {
			if base == "sysctl" && !slices.ContainsFunc(args, func(a string) bool { return a == "-w" || strings.Contains(a, "=") || a == "-p" }) {
				return
			}
			if (base == "mount" || base == "swapon") && len(args) == 0 {
				return
			}
			if base == "update-alternatives" && slices.ContainsFunc(args, func(a string) bool { return a == "--display" || a == "--list" || a == "--query" }) {
				return
			}
			s.fail("%s changes the box's disks, mounts, users or kernel, which is not the agent's to change", base)
		}
	}
	h["ldconfig"] = func(s *gstate, _ string, args []string, _ stdin) {
		if len(args) > 0 && (args[0] == "-p" || args[0] == "--print-cache") {
			return
		}
		s.fail("ldconfig changes which libraries every program loads")
	}
	h["install"] = func(s *gstate, _ string, args []string, _ stdin) {
		ops := operands(withoutValues(args, "-m", "--mode", "-o", "--owner", "-g", "--group", "-S", "--suffix"))
		for _, t := range optValues(args, "-t", "--target-directory") {
			s.targetDir("install -t", t)
		}
		if slices.Contains(args, "-d") || slices.Contains(args, "--directory") {
			for _, o := range ops {
				s.targetFile("install -d", o)
			}
			return
		}
		if len(ops) >= 2 {
			s.targetFile("install", ops[len(ops)-1])
			s.intoDir("install", ops)
		}
	}
	for _, n := range []string{"pip", "pip3", "pipx", "uv", "uvx"} {
		h[n] = (*gstate).pip
	}
	for _, n := range []string{"npm", "pnpm", "yarn", "bun"} {
		prev := h[n]
		h[n] = func(s *gstate, base string, args []string, in stdin) {
			s.jsPackages(base, args)
			if prev != nil && s.err == nil {
				prev(s, base, args, in)
			}
		}
	}
	for _, n := range []string{"gem", "bundle", "cargo", "go", "composer", "mvn", "gradle", "apt", "apt-get", "dnf", "yum",
		"apk", "conda", "mamba", "poetry", "pdm", "hatch", "twine", "nuget", "dotnet", "deno", "brew", "helm", "docker", "podman"} {
		prev := h[n]
		h[n] = func(s *gstate, base string, args []string, in stdin) {
			if packageNetwork(base, args) {
				s.fact(&s.network, base+" "+strings.Join(operands(args)[:min(1, len(operands(args)))], ""))
			}
			if prev != nil {
				prev(s, base, args, in)
			}
		}
	}
	for _, n := range []string{"bundle", "poetry", "conda", "mamba", "gh", "composer", "go", "cargo", "rustup", "pdm", "hatch", "uv"} {
		prev := h[n]
		h[n] = func(s *gstate, base string, args []string, in stdin) {
			s.toolConfig(base, args)
			if prev != nil && s.err == nil {
				prev(s, base, args, in)
			}
		}
	}
	for _, n := range []string{"sqlite3", "duckdb", "psql", "mysql", "mariadb"} {
		h[n] = (*gstate).sqlFiles
	}
	h["jq"] = func(s *gstate, _ string, args []string, _ stdin) {
		for _, a := range args {
			if strings.Contains(a, "$ENV") || strings.Contains(a, "$__loc__") || slices.Contains(identTokens(a), "env") && !strings.HasPrefix(a, "-") {
				s.fact(&s.envDump, "jq "+a)
			}
		}
		for _, a := range args {
			if a == "--rawfile" || a == "--slurpfile" {
				continue
			}
		}
	}
	for _, n := range []string{"yq", "gojq", "jaq"} {
		h[n] = h["jq"]
	}
}

// loaderVars make programs load code or configuration from a path the
// variable names: set by the agent, they reconfigure its runtime.
var loaderVars = map[string]bool{"GIT_CONFIG_GLOBAL": true, "GIT_CONFIG_SYSTEM": true, "GIT_CONFIG_PARAMETERS": true,
	"GIT_CONFIG_COUNT": true, "GIT_EXEC_PATH": true, "GIT_TEMPLATE_DIR": true, "LD_PRELOAD": true, "LD_AUDIT": true,
	"BASH_ENV": true, "ENV": true, "PYTHONSTARTUP": true, "PYTHONHOME": true, "PERL5OPT": true, "RUBYOPT": true,
	"CLAUDE_CONFIG_DIR": true, "XDG_CONFIG_HOME": true, "GIT_CONFIG_NOSYSTEM": false}

func (s *gstate) loaderVar(name, val string) {
	switch {
	case loaderVars[name]:
		s.fail("setting %s makes programs load code or configuration from elsewhere, which reconfigures the agent's runtime", name)
	case name == "NODE_OPTIONS" && (strings.Contains(val, "-r") || strings.Contains(val, "--require") || strings.Contains(val, "--import") ||
		strings.Contains(val, "--loader") || strings.Contains(val, "--experimental-loader")):
		s.fail("NODE_OPTIONS with a preloaded module runs code in every node process, Claude Code included")
	case name == "GIT_WORK_TREE" || name == "GIT_DIR" || name == "GIT_COMMON_DIR" || name == "GIT_INDEX_FILE":
		if !s.scratchOnly(val) {
			s.targetDir(name, val)
		}
	case strings.HasPrefix(name, "GIT_CONFIG_KEY_") || strings.HasPrefix(name, "GIT_CONFIG_VALUE_"):
		s.fail("%s sets git configuration the guard cannot follow", name)
	}
}

// outputOptions are the options by which most programs name the file or
// directory they write; programs for which they mean something else are
// left out.
var (
	outputFileOptions = []string{"-o", "--output", "--out", "--output-file", "--outfile", "--out-file"}
	outputDirOptions  = []string{"--output-dir", "--outdir", "--out-dir", "--target-dir", "--destdir", "--dest", "--install-dir",
		"--prefix", "--root", "--directory-prefix", "--dir"}
	otherOutput = map[string]bool{"ssh": true, "scp": true, "sftp": true, "mount": true, "ps": true, "grep": true, "egrep": true,
		"fgrep": true, "rg": true, "ag": true, "ls": true, "tar": true, "bsdtar": true, "unzip": true, "sshfs": true, "lsof": true,
		"mtr": true, "7z": true, "7za": true, "7zr": true, "7zz": true, "patch": true, "curl": true, "wget": true, "git": true,
		"jq": true, "yq": true, "set": true, "shopt": true, "bash": true, "sh": true, "zsh": true, "dash": true, "xargs": true,
		"find": true, "pip": true, "pip3": true, "npm": true, "pnpm": true, "yarn": true, "make": true, "nc": true, "ncat": true,
		"socat": true, "openssl": true, "df": true, "du": true, "sed": true, "awk": true, "gawk": true, "cut": true, "tr": true,
		"echo": true, "printf": true, "test": true, "[": true, "sudo": true, "env": true, "read": true, "head": true, "tail": true,
		"column": true, "uniq": true, "join": true, "paste": true, "comm": true, "diff": true, "cmp": true, "top": true, "htop": true,
		"sysctl": true, "ip": true, "ss": true, "netstat": true, "docker": true, "podman": true, "kubectl": true, "helm": true}
)

// outputs checks the generic output options of any other program: go
// build -o, gcc -o, sort -o, aria2c -d, cpio -D and the like.
func (s *gstate) outputs(base string, args []string) {
	if metaPrograms[base] || isReader(base, args) {
		return
	}
	for _, a := range args {
		// --wheel-dir=, --pack-destination, --install-root: a long
		// option named for where it writes.
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") {
			continue
		}
		if !ok {
			if i := slices.Index(args, a); i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				v = args[i+1]
			}
		}
		if v != "" && filepath.IsAbs(stripEnv(v)) && writesInto(k) {
			s.targetDir(base+" --"+k, v)
		}
	}
	if otherOutput[base] {
		return
	}
	for _, f := range optValues(args, outputFileOptions...) {
		s.targetFile(base+" -o", f)
	}
	for _, d := range optValues(args, outputDirOptions...) {
		if !strings.HasPrefix(d, "-") {
			s.targetDir(base, d)
		}
	}
	switch base {
	case "gem":
		for _, d := range optValues(args, "-i", "-n", "--bindir") {
			s.targetDir(base+" -i", d)
		}
	case "aria2c":
		for _, d := range optValues(args, "-d") {
			s.targetDir(base+" -d", d)
		}
	case "cpio", "bsdcpio":
		for _, d := range optValues(args, "-D") {
			s.targetDir(base+" -D", d)
		}
		if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-i") || a == "--extract" }) &&
			len(optValues(args, "-D", "--directory")) == 0 {
			s.targetDir(base+" -i", ".")
		}
	case "unsquashfs", "unrar", "cabextract", "lha":
		for _, d := range optValues(args, "-d", "-dest") {
			s.targetDir(base+" -d", d)
		}
	}
}

func withoutValues(args []string, names ...string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if slices.Contains(names, args[i]) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// networkSubs are package-manager subcommands that reach a registry or
// an arbitrary URL: with the environment or a secret in the same command,
// they carry it out (in a package name, a URL, a search term).
var networkSubs = map[string]bool{
	"install": true, "i": true, "add": true, "ci": true, "view": true, "info": true, "show": true, "search": true,
	"publish": true, "download": true, "get": true, "fetch": true, "update": true, "upgrade": true, "outdated": true,
	"audit": true, "login": true, "adduser": true, "dist-tag": true, "owner": true, "access": true, "pack": true,
	"exec": true, "dlx": true, "create": true, "init": true, "push": true, "pull": true, "upload": true, "sources": true,
	"source": true, "require": true, "create-project": true, "deprecate": true, "unpublish": true, "star": true, "ping": true, "whoami": true, "token": true,
	"lock": true, "sync": true, "mod": true, "run": true, "build": true, "x": true, "tool": true, "yank": true,
	"restore": true, "deploy": true, "repo": true, "dependency:get": true,
}

// packageValued are package managers' options that take a value, which
// is not the subcommand.
var packageValued = []string{"--registry", "--prefix", "-C", "--cwd", "--dir", "-w", "--workspace", "--filter", "-i",
	"--index-url", "--extra-index-url", "-r", "--requirement", "-t", "--target", "--source", "-c", "--constraint",
	"--python", "-p", "--project", "--manifest-path", "--config", "--userconfig", "--cache", "--directory", "--index"}

func packageNetwork(base string, args []string) bool {
	ops := operands(withoutValues(args, packageValued...))
	if base == "uv" && len(ops) > 0 && ops[0] == "pip" {
		ops = ops[1:] // uv pip install
	}
	if base == "uvx" || base == "pipx" && len(ops) > 0 && ops[0] == "run" {
		return true
	}
	if len(ops) == 0 {
		return base == "yarn" || base == "bundle" || base == "composer"
	}
	sub := ops[0]
	if base == "go" {
		return sub == "get" || sub == "install" || sub == "mod" || sub == "list" && slices.Contains(args, "-m")
	}
	if base == "cargo" && (sub == "run" || sub == "build" || sub == "test") {
		return false // fetches the lockfile's crates, not the command's choice
	}
	if base == "docker" || base == "podman" {
		return sub == "push" || sub == "pull" || sub == "login" || sub == "run" || sub == "build"
	}
	if (base == "npm" || base == "pnpm" || base == "yarn" || base == "bun") && (sub == "run" || sub == "build") {
		return false
	}
	return networkSubs[sub]
}

// jsPackages: npm and friends reach a registry; a global install or a
// configuration change alters programs and settings outside the
// workspace, Claude Code's own install among them.
func (s *gstate) jsPackages(base string, args []string) {
	if packageNetwork(base, args) {
		s.fact(&s.network, base+" registry")
	}
	ops := operands(withoutValues(args, "--prefix", "--registry", "-C", "--cwd", "--dir", "--workspace", "-w", "--filter"))
	global := slices.ContainsFunc(args, func(a string) bool { return a == "-g" || a == "--global" || a == "--location=global" }) ||
		len(ops) > 0 && ops[0] == "global"
	if len(ops) > 0 && ops[0] == "global" {
		ops = ops[1:]
	}
	for _, p := range optValues(args, "--prefix", "-C", "--cwd", "--dir") {
		if !s.scratchOnly(p) && !(base != "npm" && base != "pnpm") {
			s.targetDir(base+" --prefix", p)
		}
	}
	if len(ops) == 0 {
		return
	}
	switch ops[0] {
	case "publish", "pack":
		s.fact(&s.sends, base+" "+ops[0])
		if len(s.cwds) > 0 && len(ops) == 1 {
			s.taintedIn(s.cwds[0], true)
		}
	case "install", "i", "add", "uninstall", "remove", "rm", "un", "update", "upgrade", "up", "link", "ln", "unlink":
		if global {
			s.fail("%s %s -g changes the system's global packages, Claude Code's own install among them", base, ops[0])
		}
	case "config", "c", "set":
		if len(ops) > 1 && (ops[1] == "set" || ops[1] == "edit" || ops[1] == "delete" || ops[1] == "rm") || ops[0] == "set" {
			s.fail("%s config %s changes the package manager's configuration (where packages come from and what runs their scripts)", base, ops[len(ops)-1])
		}
	}
}

// sqlFiles: a database shell opens and writes files its SQL names
// (ATTACH 'file', .output FILE, COPY ... TO 'file', INTO OUTFILE 'file').
func (s *gstate) sqlFiles(base string, args []string, _ stdin) {
	for _, a := range args {
		for _, l := range codeLiterals(a) {
			if strings.HasPrefix(l.val, "/") || strings.HasPrefix(l.val, "~") || strings.Contains(l.val, "..") {
				s.targetFile(base, l.val)
			}
		}
		f := strings.Fields(a)
		for i := 0; i+1 < len(f); i++ {
			switch f[i] {
			case ".output", ".once", ".save", ".backup", ".import", ".open", "\\o", "\\copy", "\\g":
				s.targetFile(base+" "+f[i], strings.Trim(f[i+1], `'"`))
			}
		}
	}
}

// toolConfig: a tool's user or global configuration outlives the
// command and decides what later runs of the tool execute or fetch (go env
// -w GOFLAGS=-toolexec=..., gh config set editor, bundle config --global).
func (s *gstate) toolConfig(base string, args []string) {
	ops := operands(args)
	if base == "go" {
		if len(ops) > 0 && ops[0] == "env" && slices.ContainsFunc(args, func(a string) bool { return a == "-w" || a == "-u" }) {
			s.fail("go env -w changes go's configuration for every later build")
		}
		return
	}
	if len(ops) < 2 || ops[0] != "config" {
		return
	}
	if slices.Contains(args, "--local") || slices.Contains(args, "--project") {
		return
	}
	switch ops[1] {
	case "get", "list", "show", "--list", "-l", "view":
		return
	}
	if base == "conda" || base == "mamba" || base == "composer" || base == "poetry" {
		if len(ops) == 2 && !slices.ContainsFunc(args, func(a string) bool { return a == "--set" || a == "--add" || a == "-g" || a == "--global" }) && base != "poetry" {
			return
		}
	}
	s.fail("%s config %s changes the tool's configuration for every later run", base, ops[1])
}

// pip: a target or prefix outside the workspace installs code other
// programs import; a config change moves where packages come from.
func (s *gstate) pip(base string, args []string, _ stdin) {
	if packageNetwork(base, args) {
		s.fact(&s.network, base+" index")
	}
	for _, d := range optValues(args, "-t", "--target", "--prefix", "--root", "-d", "--dest", "--src", "-w", "--wheel-dir") {
		s.targetDir(base, d)
	}
	ops := operands(args)
	if len(ops) > 1 && ops[0] == "config" && (ops[1] == "set" || ops[1] == "edit" || ops[1] == "unset") {
		s.fail("%s config %s changes where packages come from", base, ops[1])
	}
	if base == "pip" || base == "pip3" {
		for _, o := range ops {
			if isURL(o) && hasTaint(o) {
				s.fail("%s fetches a URL computed at run time (%s)", base, printable(o))
			}
		}
	}
}

// gitDirs checks git's --work-tree, --git-dir and -C: checkout, reset and
// pull write the work tree there, and the git directory holds hooks git
// runs.
func (s *gstate) gitDirs(args []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return
		}
		for _, n := range []string{"-C", "--work-tree", "--git-dir"} {
			v, ok := "", false
			if a == n && i+1 < len(args) {
				v, ok = args[i+1], true
			} else if strings.HasPrefix(a, n+"=") {
				v, ok = a[len(n)+1:], true
			}
			if ok && !s.scratchOnly(v) {
				s.targetDir("git "+n, v)
			}
		}
	}
}

// gitGlobalConfig: global and system configuration that runs code or
// redirects every repository is the agent's runtime, not its project.
func (s *gstate) gitGlobalConfig(rest []string) {
	scope := slices.ContainsFunc(rest, func(a string) bool {
		return a == "--global" || a == "--system" || strings.HasPrefix(a, "--file") || a == "-f"
	})
	if !scope {
		return
	}
	ops := operands(withoutValues(rest, "--file", "-f", "--type", "--default", "--comment"))
	if len(ops) > 0 && (ops[0] == "set" || ops[0] == "--add") {
		ops = ops[1:]
	}
	if len(ops) < 2 {
		return
	}
	k := strings.ToLower(ops[0])
	if gitCmdKey(k) || k == "include.path" || strings.HasPrefix(k, "includeif.") || strings.HasPrefix(k, "url.") ||
		k == "core.worktree" || k == "core.sshcommand" || strings.HasPrefix(k, "http.") || k == "safe.directory" ||
		strings.HasPrefix(k, "filter.") || strings.HasPrefix(k, "credential") {
		s.fail("git config %s changes every repository's configuration in a way that runs or redirects code", ops[0])
	}
}
