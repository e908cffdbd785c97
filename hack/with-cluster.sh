#!/bin/bash
# Run a command with the throwaway test cluster and PostgreSQL up
# (hack/cluster): `go tool -modfile=tools/go.mod task test` wraps `go test ./...` in it, so the
# Kubernetes backend's and the PostgreSQL store's tests run instead of
# skipping. A cluster this script starts is torn down afterwards, whatever
# the command's result; one that was already running is left running
# (up.sh only refreshes it). SBX_TEST_CLUSTER=0 runs the command without
# one (those tests then skip and say so).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
STATE=${SBX_CLUSTER_DIR:-/tmp/sbx-cluster}

if [ "${SBX_TEST_CLUSTER:-1}" = 0 ]; then
	echo "with-cluster: SBX_TEST_CLUSTER=0: running without the test cluster"
	exec "$@"
fi
pidfile=$STATE/pids/kube-apiserver.pid
if ! { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }; then
	trap 'echo "with-cluster: taking the test cluster down"; "$here/cluster/down.sh" >/dev/null 2>&1 || true' EXIT
fi
start=$(date +%s)
"$here/cluster/up.sh"
echo "with-cluster: test cluster up in $(($(date +%s) - start)) s"
"$@"
