#!/bin/bash
# Exit 0 when the test cluster and PostgreSQL from up.sh are running and ready
# (cluster-up's status check, so a second cluster-up is a no-op).
STATE=${SBX_CLUSTER_DIR:-/tmp/sbx-cluster}
for c in containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet; do
	[ -f "$STATE/pids/$c.pid" ] && kill -0 "$(cat "$STATE/pids/$c.pid")" 2>/dev/null || exit 1
done
kubectl --kubeconfig "$STATE/kubeconfig" get node localhost -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True || exit 1
runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$STATE/pg/data" status >/dev/null 2>&1 || exit 1
# The box image holds this checkout's sbx: stale after a change to it.
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$(dirname "$0")/sbx-binary.sh" "$tmp" && cmp -s "$tmp" "$STATE/images/sbx"
