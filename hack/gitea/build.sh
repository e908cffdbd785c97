#!/bin/sh
# Build the Gitea server the forge tests start (fleet/forge/giteatest) into
# ${SBX_CACHE:-~/.cache/sbx}/gitea/VERSION, once: the version is the one
# go.mod here pins, built from the Go module proxy like hack/cluster's
# binaries. Next to the binary: options/ and templates/ from the module's
# source (a build without the bindata tag reads them from disk; the tests
# point STATIC_ROOT_PATH there). The built frontend (public/assets) is not
# in the module and no test needs it: the API and git over HTTP work.
#
#   build.sh          build if missing; print the binary's path
#   build.sh uptodate exit 0 when the binary is there
set -eu
here=$(cd "$(dirname "$0")" && pwd)
version=$(sed -n 's#^require code.gitea.io/gitea \(v[^ ]*\).*#\1#p' "$here/go.mod")
[ -n "$version" ] || { echo "gitea build: no code.gitea.io/gitea version in $here/go.mod" >&2; exit 1; }
dir=${SBX_CACHE:-$HOME/.cache/sbx}/gitea/$version
bin=$dir/gitea
if [ "${1:-}" = uptodate ]; then
	[ -x "$bin" ]
	exit
fi
if [ ! -x "$bin" ]; then
	mkdir -p "$dir"
	# One build at a time: test packages that start Gitea in parallel wait
	# for the first one's build instead of each building it.
	exec 9>"$dir/.lock"
	flock 9
	if [ ! -x "$bin" ]; then
		echo "gitea: building Gitea $version from the Go module proxy into $dir (once; ~10 min cold on 2 cores)" >&2
		start=$(date +%s)
		src=$(cd "$here" && go list -m -f '{{.Dir}}' code.gitea.io/gitea)
		for d in options templates; do
			rm -rf "$dir/$d.tmp"
			cp -R "$src/$d" "$dir/$d.tmp"
			chmod -R u+w "$dir/$d.tmp"
			rm -rf "$dir/$d"
			mv "$dir/$d.tmp" "$dir/$d"
		done
		# CGO and these tags: Gitea's SQLite driver is mattn/go-sqlite3.
		tags="sqlite sqlite_unlock_notify"
		(cd "$here" && CGO_ENABLED=1 go build -trimpath -tags "$tags" \
			-ldflags "-s -w -X 'main.Version=${version#v}' -X 'main.Tags=$tags'" \
			-o "$bin.tmp" code.gitea.io/gitea)
		mv "$bin.tmp" "$bin"
		echo "gitea: built in $(($(date +%s) - start))s" >&2
	fi
fi
echo "$bin"
