#!/usr/bin/env bash
# Builds the small sbx guest kernel (uncompressed PVH vmlinux) from Debian's
# linux-source-6.1 with vm/build/kernel-*.patch applied and
# vm/build/kernel.config merged onto tinyconfig.
#
#   vm/build/kernel.sh build      build into the cache (if absent) and install
#   vm/build/kernel.sh key        print the cache key (fragment + source version)
#   vm/build/kernel.sh uptodate   exit 0 when the installed kernel matches the key
#   vm/build/kernel.sh verify C   check that every kernel.config line survived into .config C
#   vm/build/kernel.sh packages   print the Debian packages a build needs
#   vm/build/kernel.sh background start `build` detached (niced, logged) unless
#                                 the kernel is installed or a build runs
#
# Cache: ${SBX_CACHE:-$HOME/.cache/sbx}/kernel/<key>/{vmlinux,release}
# Install: ${SBX_DATA:-./.sbx}/kernel/small/{vmlinux,release,config,key}
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
fragment=$here/kernel.config
# Patches applied to the source in name order (-p1); part of the cache key.
patches=("$here"/kernel-*.patch)
pkg=linux-source-6.1
tarball=/usr/src/$pkg.tar.xz
# Build tools for the kernel; apt-get installs the missing ones.
build_deps=($pkg build-essential flex bison bc libelf-dev libssl-dev xz-utils)
cache=${SBX_CACHE:-$HOME/.cache/sbx}/kernel
data=${SBX_DATA:-./.sbx}
install_dir=$data/kernel/small

log() { printf 'kernel: %s\n' "$*" >&2; }
die() { printf 'kernel: error: %s\n' "$*" >&2; exit 1; }

source_version() { dpkg-query -W -f='${db:Status-Status} ${Version}\n' $pkg 2>/dev/null | awk '$1=="installed"{print $2}'; }

key() {
	local v; v=$(source_version)
	[ -n "$v" ] || return 1
	{ cat "$fragment" "${patches[@]}"; echo "source=$pkg $v"; } | sha256sum | cut -c1-16
}

uptodate() {
	local k; k=$(key) || return 1
	[ -s "$install_dir/vmlinux" ] && [ "$(cat "$install_dir/key" 2>/dev/null)" = "$k" ]
}

# shellcheck source=vm/build/debian.sh
. "$here/debian.sh"
install_deps() { debian_host_deps "${build_deps[@]}"; }

# verify_config fails naming every fragment line the final .config dropped
# (an unmet dependency, a typo, or an option renamed in this kernel version).
verify_config() {
	local config=$1 bad=0 line opt want got
	while IFS= read -r line; do
		case $line in
		CONFIG_*=*) opt=${line%%=*}; want=$line ;;
		"# CONFIG_"*" is not set") opt=${line#\# }; opt=${opt%% *}; want=$line ;;
		*) continue ;;
		esac
		got=$(grep -E "^($opt=|# $opt is not set)" "$config" || true)
		# An option absent from .config is "not set" as far as the kernel is concerned.
		if [ "$got" != "$want" ] && ! { [ -z "$got" ] && [ "$want" = "# $opt is not set" ]; }; then
			log "config option dropped: want '$want', got '${got:-<absent>}'"
			bad=1
		fi
	done <"$fragment"
	[ $bad = 0 ] || die "kernel.config options did not survive the merge (see above); fix vm/build/kernel.config"
}

# lock takes the build lock (fd 9): two builds of one cache never interleave.
lock() {
	mkdir -p "$cache"
	exec 9>"$cache/.build.lock"
	flock -n 9 && return
	log "another kernel build is running (lock $cache/.build.lock); waiting for it"
	flock 9
}

build() {
	lock
	install_deps
	local k; k=$(key) || die "$pkg is not installed"
	local out=$cache/$k
	if [ -s "$out/vmlinux" ]; then
		log "cached: $out/vmlinux"
	else
		local work=$cache/build-$k
		local start=$SECONDS
		rm -rf "$work"; mkdir -p "$work"
		log "unpacking $tarball into $work"
		tar -xJf "$tarball" -C "$work" --strip-components=1
		cd "$work"
		local p
		for p in "${patches[@]}"; do
			log "applying $(basename "$p")"
			patch -s -p1 --forward <"$p" || die "patch $p does not apply to $pkg"
		done
		make -s tinyconfig >/dev/null
		scripts/kconfig/merge_config.sh -m -O . .config "$fragment" >/dev/null
		make -s olddefconfig >/dev/null
		verify_config .config
		log "building vmlinux (nice -n 19 make -j2, ~10 minutes)"
		nice -n 19 make -s -j2 vmlinux
		local release; release=$(make -s kernelrelease)
		mkdir -p "$out.tmp"
		cp vmlinux "$out.tmp/vmlinux"
		cp .config "$out.tmp/config"
		echo "$release" >"$out.tmp/release"
		sync -f "$out.tmp/vmlinux"
		rm -rf "$out"; mv "$out.tmp" "$out"
		cd - >/dev/null
		rm -rf "$work"
		log "built $release in $((SECONDS - start)) s: $(du -h "$out/vmlinux" | cut -f1)"
	fi
	mkdir -p "$install_dir"
	local f
	# config: vm/qemu reads it to see what the kernel supports (free page reporting).
	for f in vmlinux release config; do
		cp "$out/$f" "$install_dir/.$f.tmp"
		sync -f "$install_dir/.$f.tmp"
		mv "$install_dir/.$f.tmp" "$install_dir/$f"
	done
	echo "$k" >"$install_dir/.key.tmp" && mv "$install_dir/.key.tmp" "$install_dir/key"
	log "installed $install_dir/vmlinux ($(cat "$install_dir/release"))"
}

# background starts a detached, niced build whose output goes to
# $data/kernel-build.log: the gateway runs meanwhile, its boxes boot the stock
# kernel and switch to the small one once it is installed.
background() {
	if uptodate; then
		log "small kernel installed: $install_dir/vmlinux ($(cat "$install_dir/release"))"
		return
	fi
	mkdir -p "$cache" "$data"
	local k
	if k=$(key) && [ -s "$cache/$k/vmlinux" ]; then
		# Built before on this machine: installing is a copy, done before
		# the gateway starts so no box boots the stock kernel.
		build
		return
	fi
	if ! flock -n "$cache/.build.lock" true 2>/dev/null; then
		log "a small kernel build is already running (see $data/kernel-build.log)"
		return
	fi
	local logf; logf=$(cd "$data" && pwd)/kernel-build.log
	log "building the small guest kernel in the background (~10 min once on 2 cores, niced; log: $logf)"
	log "until it is installed boxes boot the stock Debian kernel; new boxes switch to the small one by themselves"
	setsid nohup "$here/kernel.sh" build >"$logf" 2>&1 </dev/null &
}

case ${1:-build} in
build) build ;;
background) background ;;
packages) echo "${build_deps[*]}" ;;
key) key ;;
uptodate) uptodate ;;
verify) verify_config "${2:?usage: $0 verify CONFIG}" ;;
*) die "usage: $0 build|background|key|uptodate|packages|verify CONFIG" ;;
esac
