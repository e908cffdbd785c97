#!/usr/bin/env bash
# Builds the gateway's container image as an OCI archive, with no Docker
# daemon: `ctr images import` takes it, `skopeo copy oci-archive:OUT
# docker://REGISTRY/sbx-gateway:TAG` pushes it.
#
#   deploy/image.sh OUT NAME SBX     e.g. OUT.tar sbx.local/gateway:dev bin/sbx
#   deploy/image.sh key              print the recipe hash
#
# Two layers, packed by hack/cluster/ociimage like the agent image's:
#   1. a lean Debian root with what `sbx serve` runs besides itself: git
#      (it clones delegated repos on the gateway) and CA certificates (git
#      hosts, the model upstream); user sbx (65532), no setuid file. Built
#      by mmdebstrap once per recipe and kept under
#      ${SBX_CACHE:-~/.cache/sbx}/images/gateway-<recipe hash>.root, so its
#      layer digest stays the same from one build to the next.
#   2. the static sbx SBX at /usr/local/bin/sbx and /data, owned by sbx.
# The image runs `sbx serve` as 65532 with SBX_DATA=/data, a volume: with
# vm.backend kubernetes it needs nothing else (no QEMU, no KVM).
set -euo pipefail

# --- recipe: the text from here to "end of recipe" is hashed into the key ---
suite=bookworm
packages=(git ca-certificates)
uid=65532

rootfs() {
	local root=$1; shift
	mmdebstrap --mode=root --variant=essential --format=directory \
		--include="$(IFS=,; echo "${packages[*]}")" \
		--aptopt='APT::Install-Recommends "false"' \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-include=/usr/share/locale/locale.alias' \
		--dpkgopt='path-exclude=/usr/share/lintian/*' \
		--customize-hook='chroot "$1" git --version' \
		--customize-hook="echo 'sbx:x:$uid:$uid:sbx:/data:/usr/sbin/nologin' >>\"\$1\"/etc/passwd && echo 'sbx:x:$uid:' >>\"\$1\"/etc/group" \
		--customize-hook='echo sbx >"$1"/etc/hostname && : >"$1"/etc/resolv.conf' \
		--customize-hook='rm -rf "$1"/tmp/* "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/* "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old' \
		--customize-hook='find "$1" -xdev -perm /6000 -exec chmod ug-s {} + && ! find "$1" -xdev -perm /6000 | grep .' \
		"$suite" "$root" "$@"
}
# --- end of recipe -----------------------------------------------------------

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${SBX_CACHE:-$HOME/.cache/sbx}/images

log() { printf 'gateway-image: %s\n' "$*" >&2; }
die() { printf 'gateway-image: error: %s\n' "$*" >&2; exit 1; }
# shellcheck source=vm/build/debian.sh
. "$repo/vm/build/debian.sh"

key() {
	sed -n '/^# --- recipe/,/^# --- end of recipe/p' "$here/image.sh" | sha256sum | cut -c1-16
}

# base prints the cached Debian root, building it first when missing.
base() {
	local root; root=$cache/gateway-$(key).root
	if [ -d "$root" ]; then
		echo "$root"
		return
	fi
	[ "$(id -u)" = 0 ] || die "run as root: mmdebstrap needs root mode to write a directory with real ownership"
	debian_host_deps mmdebstrap ca-certificates
	local start=$SECONDS
	mkdir -p "$cache"
	rm -rf "$root.tmp"
	local -a mirror_args; mapfile -t mirror_args < <(debian_mirrors "$suite")
	log "mmdebstrap $suite (${packages[*]}) into $root (about a minute, once)"
	if ! rootfs "$root.tmp" "${mirror_args[@]}" >&2; then
		rm -rf "$root.tmp"
		die "mmdebstrap failed"
	fi
	find "$cache" -maxdepth 1 -name 'gateway-*.root' -exec rm -rf {} +
	mv "$root.tmp" "$root"
	log "built $root in $((SECONDS - start)) s ($(du -sh "$root" | cut -f1))"
	echo "$root"
}

oci() {
	local out=${1:?usage: image.sh OUT NAME SBX} name=${2:?usage: image.sh OUT NAME SBX} bin=${3:?usage: image.sh OUT NAME SBX}
	[ -x "$bin" ] || die "$bin: not an executable (build it with hack/cluster/sbx-binary.sh)"
	if file_out=$(LC_ALL=C file -b "$bin" 2>/dev/null) && ! grep -q 'statically linked\|static-pie' <<<"$file_out"; then
		die "$bin is not static ($file_out): build it with CGO_ENABLED=0"
	fi
	local root; root=$(base)
	local top; top=$(mktemp -d)
	mkdir -p "$top/usr/local/bin" "$top/data"
	chmod 0750 "$top/data"
	cp "$bin" "$top/usr/local/bin/sbx"
	mkdir -p "$(dirname "$out")"
	(cd "$repo" && go run ./hack/cluster/ociimage -dir "$root" -dir "$top" -name "$name" -o "$out" \
		-entrypoint /usr/local/bin/sbx,serve -user "$uid:$uid" -workdir /data -volume /data \
		-owner "data=$uid:$uid" -env SBX_DATA=/data -env HOME=/data)
	rm -rf "$top"
	log "packed $out ($name, $(du -h "$out" | cut -f1))"
}

case ${1:-} in
key) key ;;
-* | '') die "usage: $0 OUT NAME SBX | key" ;;
*) oci "$@" ;;
esac
