#!/usr/bin/env bash
# Measures clone -> first box output the way the README's first command
# goes, with caches of its own (pass an empty dir for a fresh machine's,
# the same dir again for a second checkout's). Debian packages are the
# machine's: remove them first for a truly fresh figure.
#
#   hack/first-hour.sh RUN_DIR CACHE_DIR [SOURCE_REPO]
#
# Runs `go tool -modfile=tools/go.mod task up` in a new clone at RUN_DIR
# (log: RUN_DIR.up.log), waits for the gateway, delegates `new --agent
# script "hello world"` over the real ssh and polls the transcript for its
# first line after the turn header, then removes the box. The gateway keeps
# running afterwards: stop it with kill -INT -- -$(cat RUN_DIR.pid).
set -u
run=${1:?usage: first-hour.sh RUN_DIR CACHE_DIR [SOURCE_REPO]}
croot=${2:?usage: first-hour.sh RUN_DIR CACHE_DIR [SOURCE_REPO]}
src=${3:-$(cd "$(dirname "$0")/.." && pwd)}
export GOMODCACHE=$croot/gomod GOCACHE=$croot/gobuild SBX_CACHE=$croot/sbx
mkdir -p "$croot"
rm -f "$croot/known_hosts" # a new checkout has a new host key
ts() { date +%s.%N; }
ssh_() { ssh -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile="$croot/known_hosts" -p 2222 localhost "$@"; }

t0=$(ts)
git clone -q "$src" "$run" || exit 1
cd "$run"
setsid go tool -modfile=tools/go.mod task up >"$run.up.log" 2>&1 </dev/null &
echo $! >"$run.pid"
until [ -s .sbx/sbx.addr ]; do
	sleep 0.2
	kill -0 "$(cat "$run.pid")" 2>/dev/null || { echo "up exited early:"; tail -30 "$run.up.log"; exit 1; }
done
t1=$(ts)
box=$(ssh_ new --agent script "hello world") || exit 1
t2=$(ts)
first=
for _ in $(seq 600); do
	first=$(ssh_ logs "$box" | sed -n 2p)
	[ -n "$first" ] && break
	sleep 0.1
done
t3=$(ts)
printf 'box %s, first output: %s\n' "$box" "$first"
printf 'clone -> gateway serving: %6.1f s\nclone -> new returned:    %6.1f s\nclone -> first output:    %6.1f s (load average %s)\n' \
	"$(echo "$t1-$t0" | bc)" "$(echo "$t2-$t0" | bc)" "$(echo "$t3-$t0" | bc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
ssh_ rm "$box" >/dev/null
