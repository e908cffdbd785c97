#!/usr/bin/env bash
# Builds the sbx agent image: a lean Debian bookworm root with git, curl,
# Node.js and Claude Code, packed into an ext4 file with `mkfs.ext4 -d` (no
# loop mounts). Boxes boot it read-only behind a per-box writable overlay.
#
#   vm/build/image.sh build      build into the cache (if absent) and install
#   vm/build/image.sh key        print the recipe hash
#   vm/build/image.sh uptodate   exit 0 when the installed image matches the recipe
#   vm/build/image.sh packages   print the Debian packages a build needs
#
# Cache: ${SBX_CACHE:-$HOME/.cache/sbx}/images/agent-<recipe hash>.ext4
# Install: ${SBX_DATA:-./.sbx}/images/agent.ext4 (+ agent.key)
set -euo pipefail

# --- recipe: the text from here to "end of recipe" is hashed into the key ---
suite=bookworm
packages=(git ca-certificates curl nodejs npm procps less)
claude_code=@anthropic-ai/claude-code@2.1.332

# rootfs ROOT MIRROR...: the root filesystem, lean (no docs, man pages,
# locales or apt lists). npm inside the chroot trusts the build host's CAs (a
# TLS-inspecting proxy's root included) through /tmp/build-ca.crt, which the
# last hook removes: the image keeps only Debian's ca-certificates. No file
# keeps a setuid or setgid bit (su, passwd, chsh, unix_chkpwd...; the build
# fails if one is left): the agent runs unprivileged and must have no setuid
# path to root (issue 16), and no box needs one — root work runs as root.
rootfs() {
	local root=$1; shift
	mmdebstrap --mode=root --variant=apt --format=directory \
		--include="$(IFS=,; echo "${packages[*]}")" \
		--aptopt='APT::Install-Recommends "false"' \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-include=/usr/share/locale/locale.alias' \
		--dpkgopt='path-exclude=/usr/share/lintian/*' \
		--customize-hook='cp /etc/ssl/certs/ca-certificates.crt "$1"/tmp/build-ca.crt' \
		--customize-hook="chroot \"\$1\" env NODE_EXTRA_CA_CERTS=/tmp/build-ca.crt npm install --global --omit=dev --no-audit --no-fund --no-update-notifier $claude_code" \
		--customize-hook='rm -rf "$1"/usr/local/lib/node_modules/@anthropic-ai/claude-code/node_modules/@anthropic-ai/claude-code-*musl*' \
		--customize-hook='chroot "$1" claude --version' \
		--customize-hook='chroot "$1" git --version' \
		--customize-hook='chroot "$1" node --version' \
		--customize-hook='mkdir -p "$1"/workspace && echo sbx >"$1"/etc/hostname && : >"$1"/etc/resolv.conf' \
		--customize-hook='rm -rf "$1"/root/.npm "$1"/root/.cache "$1"/tmp/* "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/apt/* "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old' \
		--customize-hook='find "$1" -xdev -perm /6000 -exec chmod ug-s {} + && ! find "$1" -xdev -perm /6000 | grep .' \
		"$suite" "$root" "$@"
}

# pack ROOT OUT: an ext4 file with headroom for what a box writes to / (its
# overlay holds the blocks, but the filesystem needs the free space); the
# file is sparse, so the headroom costs no disk.
pack() {
	local used_kb; used_kb=$(du -sk "$1" | cut -f1)
	local size_mb=$(( used_kb * 12 / 10 / 1024 + 1024 ))
	log "mkfs.ext4 -d ($((used_kb / 1024)) MiB of files, ${size_mb} MiB filesystem)"
	mkfs.ext4 -q -F -L sbx-agent -m 0 -i 8192 -d "$1" "$2" "${size_mb}M"
}
# --- end of recipe -----------------------------------------------------------

here=$(cd "$(dirname "$0")" && pwd)
cache=${SBX_CACHE:-$HOME/.cache/sbx}/images
data=${SBX_DATA:-./.sbx}
install_dir=$data/images
host_deps=(mmdebstrap e2fsprogs ca-certificates)

log() { printf 'image: %s\n' "$*" >&2; }
die() { printf 'image: error: %s\n' "$*" >&2; exit 1; }

key() {
	sed -n '/^# --- recipe/,/^# --- end of recipe/p' "$here/image.sh" | sha256sum | cut -c1-16
}

uptodate() {
	[ -s "$install_dir/agent.ext4" ] && [ "$(cat "$install_dir/agent.key" 2>/dev/null)" = "$(key)" ]
}

# shellcheck source=vm/build/debian.sh
. "$here/debian.sh"
install_deps() { debian_host_deps "${host_deps[@]}"; }
mirrors() { debian_mirrors "$suite"; }

build() {
	[ "$(id -u)" = 0 ] || die "run as root: mmdebstrap needs root mode to write a directory with real ownership"
	install_deps
	local k; k=$(key)
	local out=$cache/agent-$k.ext4
	mkdir -p "$cache"
	if [ -s "$out" ]; then
		log "cached: $out"
	else
		local start=$SECONDS
		root=$cache/agent-$k.root
		# A failed build leaves neither a half root nor a half image.
		trap 'rm -rf "$root" "$out.tmp"' EXIT
		rm -rf "$root" "$out.tmp"
		local -a mirror_args; mapfile -t mirror_args < <(mirrors)
		log "building the agent image once for this recipe (~3 min: Debian packages, then Claude Code from npm; cached in $cache)"
		log "mmdebstrap $suite (${packages[*]}) + $claude_code into $root"
		rootfs "$root" "${mirror_args[@]}"
		pack "$root" "$out.tmp"
		e2fsck -fn "$out.tmp" >/dev/null || die "e2fsck found errors in $out.tmp"
		sync -f "$out.tmp"
		mv "$out.tmp" "$out"
		rm -rf "$root"
		trap - EXIT
		log "built $out in $((SECONDS - start)) s: $(du -h --apparent-size "$out" | cut -f1) apparent, $(du -h "$out" | cut -f1) allocated"
	fi
	mkdir -p "$install_dir"
	cp --sparse=always "$out" "$install_dir/.agent.ext4.tmp"
	sync -f "$install_dir/.agent.ext4.tmp"
	mv "$install_dir/.agent.ext4.tmp" "$install_dir/agent.ext4"
	echo "$k" >"$install_dir/.agent.key.tmp" && mv "$install_dir/.agent.key.tmp" "$install_dir/agent.key"
	log "installed $install_dir/agent.ext4"
}

# oci OUT NAME SBX: the installed agent image as an OCI image archive for a
# cluster (vm.backend kubernetes): the image's root as one layer (extracted
# from the ext4 with debugfs, no mount; cached by recipe key, so its digest
# stays the same), the static sbx binary SBX at /usr/local/bin/sbx as a
# second. Push it with `skopeo copy oci-archive:OUT docker://REGISTRY/NAME`
# or import it with `ctr images import`.
oci() {
	local out=${1:?usage: image.sh oci OUT NAME SBX} name=${2:?usage: image.sh oci OUT NAME SBX} bin=${3:?usage: image.sh oci OUT NAME SBX}
	uptodate || die "no agent image matching the recipe in $install_dir: run \`go tool -modfile=tools/go.mod task image\` first"
	command -v debugfs >/dev/null || die "debugfs missing: apt-get install e2fsprogs"
	local k; k=$(key)
	local root=$cache/agent-$k.oci-root
	if [ ! -d "$root" ]; then
		log "extracting $install_dir/agent.ext4 into $root"
		rm -rf "$root.tmp" && mkdir -p "$root.tmp"
		debugfs -R "rdump / $root.tmp" "$install_dir/agent.ext4" 2>/dev/null
		[ -x "$root.tmp/usr/bin/node" ] || die "extracting the agent image failed (no usr/bin/node in $root.tmp)"
		rm -rf "$root.tmp/lost+found"
		find "$cache" -maxdepth 1 -name 'agent-*.oci-root' ! -name "agent-$k.oci-root" -exec rm -rf {} +
		mv "$root.tmp" "$root"
	fi
	local top; top=$(mktemp -d)
	mkdir -p "$top/usr/local/bin"
	cp "$bin" "$top/usr/local/bin/sbx"
	(cd "$here/../.." && go run ./hack/cluster/ociimage -dir "$root" -dir "$top" -name "$name" -o "$out" -entrypoint /usr/local/bin/sbx,pod-agent,serve)
	rm -rf "$top"
	log "packed $out ($name, $(du -h "$out" | cut -f1))"
}

case ${1:-build} in
build) build ;;
key) key ;;
uptodate) uptodate ;;
packages) echo "${host_deps[*]}" ;;
oci) shift; oci "$@" ;;
*) die "usage: $0 build|key|uptodate|packages|oci OUT NAME SBX" ;;
esac
