# Shared by the builds (vm/build/image.sh: the agent image, kernel.sh: the
# small kernel, deploy/image.sh: the gateway's image): sourced, not run.
# Expects log.

# debian_host_deps PKG...: installs the Debian packages a build needs on the
# host, only those missing.
debian_host_deps() {
	local missing=() p sudo=
	[ "$(id -u)" = 0 ] || sudo=sudo
	for p in "$@"; do
		dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return
	log "installing ${missing[*]}"
	$sudo apt-get update -q
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}"
}

# debian_mirrors SUITE prints the host's apt sources for the suite, for
# mmdebstrap: only the mirror the host is configured for is reachable on
# locked-down build machines.
debian_mirrors() {
	local f found=0
	for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -s "$f" ] && grep -q "$1" "$f" && { echo "$f"; found=1; }
	done
	[ $found = 1 ] || echo "http://deb.debian.org/debian"
}
