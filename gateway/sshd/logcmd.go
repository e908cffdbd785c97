package sshd

import (
	"net/url"
	"strings"
)

// loggedCommand is a session's command line as the gateway log shows it:
// every http(s) URL in it (an argument or a --flag=value) cut to scheme and
// host, since a URL's path or query may be a credential (a Slack webhook's
// path, an ntfy topic, a ?key=).
func loggedCommand(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		prefix, value := "", a
		if strings.HasPrefix(a, "--") {
			if k, v, ok := strings.Cut(a, "="); ok {
				prefix, value = k+"=", v
			}
		}
		if u, err := url.Parse(value); err == nil && (strings.EqualFold(u.Scheme, "http") || strings.EqualFold(u.Scheme, "https")) && u.Host != "" {
			value = u.Scheme + "://" + u.Host + "/…"
			if u.User != nil {
				value = u.Scheme + "://…@" + u.Host + "/…"
			}
		}
		out[i] = prefix + value
	}
	return out
}
