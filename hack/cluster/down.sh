#!/bin/bash
# Stop the test cluster and PostgreSQL started by up.sh and remove everything
# they left: processes (by pid file), containers, mounts, network namespaces,
# the bridge, and the directories containerd and the kubelet write to.
set -uo pipefail

STATE=${SBX_CLUSTER_DIR:-/tmp/sbx-cluster}
PIDS=$STATE/pids
CTR_SOCK=$STATE/containerd/containerd.sock
KC=$STATE/kubeconfig
log() { echo "cluster-down: $*"; }
ctr_() { ctr --address "$CTR_SOCK" -n k8s.io "$@"; }

# stop NAME: TERM, then KILL after 10 s, the process in NAME's pid file.
stop() {
	local f=$PIDS/$1.pid pid i
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		log "stop $1 ($pid)"
		kill -TERM "$pid" 2>/dev/null
		for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$f"
}

# 1. Pods first, while the kubelet can still tear down their sandboxes
# (CNI DEL, mounts) properly.
if [ -f "$KC" ] && kubectl --kubeconfig "$KC" get --raw /readyz >/dev/null 2>&1; then
	log "delete pods"
	kubectl --kubeconfig "$KC" delete pods --all -A --force --grace-period=0 --wait=false >/dev/null 2>&1
	for ((i = 0; i < 300; i++)); do
		[ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && break
		sleep 0.1
	done
fi
stop kubelet
stop kube-scheduler
stop kube-controller-manager
stop kube-apiserver
stop etcd

# 2. Whatever the kubelet did not end: kill tasks, remove containers.
if [ -S "$CTR_SOCK" ]; then
	for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
	for ((i = 0; i < 100; i++)); do
		[ -z "$(ctr_ tasks ls 2>/dev/null | awk 'NR>1 && $3!="STOPPED"')" ] && break
		sleep 0.1
	done
	for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$t" >/dev/null 2>&1; done
	for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers rm "$c" >/dev/null 2>&1; done
fi
stop containerd
# Shims of this containerd only (they carry its socket path).
for p in /proc/[0-9]*; do
	if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- "-address $CTR_SOCK "; then
		log "kill shim ${p#/proc/}"
		kill -KILL "${p#/proc/}" 2>/dev/null
	fi
done

# 3. PostgreSQL.
if [ -f "$STATE/pg/data/PG_VERSION" ]; then
	runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$STATE/pg/data" -m immediate stop >/dev/null 2>&1 && log "stop postgres"
fi

# 4. Mounts (deepest first), network namespaces, the bridge, directories.
for ((round = 0; round < 3; round++)); do
	m=$(awk -v s="$STATE" '$2 ~ "^"s"/" || $2 ~ "^/run/containerd/" || $2 ~ "^/var/run/netns/cni-" || $2 ~ "^/run/netns/cni-" {print $2}' /proc/mounts | sort -r)
	[ -z "$m" ] && break
	for p in $m; do umount -l "$p" 2>/dev/null || true; done
done
for ns in /var/run/netns/cni-* /run/netns/cni-*; do
	[ -e "$ns" ] || continue
	ip netns delete "$(basename "$ns")" 2>/dev/null || rm -f "$ns"
done
ip link show sbxtest0 >/dev/null 2>&1 && ip link delete sbxtest0 && log "delete bridge sbxtest0"
rm -rf "$STATE" /run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers /var/log/pods /tmp/hostpath_pv
left=$(awk -v s="$STATE" '$2 ~ "^"s"/" {print $2}' /proc/mounts)
if [ -n "$left" ]; then
	log "mounts left: $left"
	exit 1
fi
log "done"
