package fleet

import (
	"path"
	"strings"
	"unicode"

	"sbx.dev/sbx/fleet/accounts"
)

// MaxMentionedRepos caps the repositories offered from one task.
const MaxMentionedRepos = 10

// MentionedRepos finds the repositories a task names (owner/name, or a URL
// of a repository on the configured git host) that the delegation does not
// already have, so a front can offer them: they are never added without
// the operator's word. It is strict: only what ResolveRepo accepts, without
// words that merely look like owner/name ("and/or", "src/main.go", "1/2"),
// each once (as owner/name), at most MaxMentionedRepos, in the order the
// task names them.
func (f *Fleet) MentionedRepos(task string, given []RepoSpec) []string {
	if f.settings == nil || f.settings.accounts == nil {
		return nil
	}
	return ReposNamedIn(task, f.settings.accounts.ResolveRepo, given)
}

// ReposNamedIn is MentionedRepos with resolve as the host's rule
// (accounts.Service.ResolveRepo; accounts.ParseRepo for owner/name only).
func ReposNamedIn(task string, resolve func(string) (accounts.Repo, error), given []RepoSpec) []string {
	have := make([]string, 0, len(given))
	for _, g := range given {
		have = append(have, g.Repo)
	}
	return mentionedRepos(task, resolve, have)
}

// mentionedRepos is MentionedRepos with the host's resolver.
func mentionedRepos(task string, resolve func(string) (accounts.Repo, error), given []string) []string {
	seen := map[string]bool{}
	for _, g := range given {
		if r, err := resolve(strings.TrimSpace(g)); err == nil {
			seen[strings.ToLower(r.String())] = true
		}
	}
	out := []string{}
	fields := strings.FieldsFunc(task, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune("()[]{}<>\"'`,;|", r)
	})
	for _, tok := range fields {
		tok = strings.Trim(tok, ".:!?*_~")
		if !repoLike(tok) {
			continue
		}
		r, err := resolve(tok)
		if err != nil {
			continue
		}
		key := strings.ToLower(r.String())
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, r.String())
		if len(out) == MaxMentionedRepos {
			break
		}
	}
	return out
}

// repoLike keeps tokens that can name a repository and drops the ones
// that read as something else: a URL is left to the resolver (only the
// configured host's repository URLs pass it); owner/name must have exactly
// one slash, no file extension, no side that is a number or a word people
// write with a slash ("and/or", "read/write") or a path's usual folder
// ("src/…", "docs/…").
func repoLike(tok string) bool {
	if strings.Contains(tok, "://") {
		return true
	}
	owner, name, ok := strings.Cut(tok, "/")
	if !ok || strings.Contains(name, "/") || owner == "" || name == "" {
		return false
	}
	if ext := strings.ToLower(path.Ext(name)); ext != "" && ext != ".git" {
		return false // src/main.go, docs/README.md, v1.2/v1.3
	}
	for _, side := range []string{owner, name} {
		s := strings.ToLower(strings.TrimSuffix(side, ".git"))
		if slashWord(s) || strings.Trim(s, "0123456789-.") == "" || len(s) == 1 {
			return false
		}
	}
	return !pathFolder(strings.ToLower(owner))
}

// slashWord: s is a word words written with a slash that name no repository.
func slashWord(s string) bool {
	switch s {
	case "and", "or", "either", "yes", "no", "true", "false", "on", "off", "read", "write", "input", "output",
		"in", "out", "client", "server", "get", "set", "put", "post", "open", "close", "start", "stop", "enable",
		"disable", "add", "remove", "he", "she", "him", "her", "his", "they", "them", "we", "us", "you", "with",
		"without", "w", "n", "a", "tcp", "udp", "ip", "io", "before", "after", "old", "new", "up", "down", "left",
		"right", "min", "max", "ok", "fail", "pass", "success", "failure":
		return true
	}
	return false
}

// pathFolder: s is one of the usual first folders of a path inside a project or
// a system: "src/parser" is a path, not the parser repository of src.
func pathFolder(s string) bool {
	switch s {
	case "src", "lib", "cmd", "pkg", "internal", "test", "tests", "testdata", "doc", "docs", "bin", "usr",
		"etc", "var", "tmp", "home", "app", "apps", "api", "web", "static", "build", "dist", "scripts", "script",
		"vendor", "config", "configs", "assets", "public", "include", "examples", "example", "tools", "hack",
		"deploy", "views", "workspace", "dev", "proc", "sys", "opt", "root", "mnt", "run", "refs", "heads",
		"origin", "upstream", "sbx", "feature", "fix", "bugfix", "hotfix", "release", "main", "master", "v1", "v2",
		"v3":
		return true
	}
	return false
}
