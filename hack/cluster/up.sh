#!/bin/bash
# Start a throwaway single-node Kubernetes cluster and PostgreSQL on loopback.
#
#   state:      $SBX_CLUSTER_DIR (default /tmp/sbx-cluster), removed by down.sh
#   kubeconfig: $SBX_CLUSTER_DIR/kubeconfig (cluster-admin; also printed at the end)
#   postgres:   $SBX_CLUSTER_DIR/postgres.dsn (postgres://postgres@127.0.0.1:15432/postgres)
#   binaries:   ${SBX_CACHE:-~/.cache/sbx}/k8s/bin-$K8S_VERSION (built once by build.sh)
#
# Every step checks whether it is already done, so a second run returns in
# seconds. Components run as background processes with pid files under
# $STATE/pids; down.sh ends them and removes everything they left.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
K8S_VERSION=${K8S_VERSION:-v1.37.2}
CACHE=${SBX_CACHE:-$HOME/.cache/sbx}/k8s
BIN=$CACHE/bin-$K8S_VERSION
STATE=${SBX_CLUSTER_DIR:-/tmp/sbx-cluster}
PKI=$STATE/pki
PIDS=$STATE/pids
LOGS=$STATE/logs
ETCD_PORT=23790
API_PORT=16443
PG_PORT=15432
CTR_SOCK=$STATE/containerd/containerd.sock
DEB_PACKAGES="containerd runc containernetworking-plugins postgresql-15 busybox-static openssl"

log() { echo "cluster-up: $*"; }
alive() { [ -f "$PIDS/$1.pid" ] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }
# start NAME CMD... runs CMD in the background unless it already runs.
start() {
	local name=$1
	shift
	if alive "$name"; then return 0; fi
	log "start $name"
	setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
	echo $! >"$PIDS/$name.pid"
}
# wait_for WHAT SECONDS CMD... retries CMD until it succeeds.
wait_for() {
	local what=$1 secs=$2
	shift 2
	local i
	for ((i = 0; i < secs * 10; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	log "$what did not come up in ${secs}s; last log lines:"
	tail -n 20 "$LOGS/$what.log" 2>/dev/null || true
	return 1
}

# 1. Debian packages, only those missing.
missing=$(for p in $DEB_PACKAGES; do dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -q '^installed$' || echo "$p"; done)
command -v kubectl >/dev/null || missing="$missing kubernetes-client"
if [ -n "$missing" ]; then
	log "apt-get install $missing"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi

# 2. etcd and the Kubernetes server binaries (cached outside the checkout).
"$here/build.sh" "$BIN"

mkdir -p "$STATE" "$PKI" "$PIDS" "$LOGS" "$STATE/images"
chmod 755 "$STATE"

# 3. PKI: one CA, the apiserver's serving cert, one admin client cert that
# every component uses (system:masters), the service-account key pair.
if [ ! -f "$PKI/admin.crt" ]; then
	log "pki"
	(
		cd "$PKI"
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
			-keyout ca.key -out ca.crt -subj /CN=sbx-test-cluster-ca 2>/dev/null
		cert() { # name subject san
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
			printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -out "$1.crt" -extfile "$1.ext" 2>/dev/null
		}
		cert apiserver /CN=kube-apiserver "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
		cert kubelet /CN=system:node:localhost "IP:127.0.0.1,DNS:localhost"
		cert admin "/O=system:masters/CN=sbx-admin" "DNS:sbx-admin"
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	)
fi
if [ ! -f "$STATE/kubeconfig" ]; then
	cat >"$STATE/kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sbx-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: sbx-admin
  user:
    client-certificate: $PKI/admin.crt
    client-key: $PKI/admin.key
contexts:
- name: sbx-test
  context: {cluster: sbx-test, user: sbx-admin}
current-context: sbx-test
EOF
	mv "$STATE/kubeconfig.tmp" "$STATE/kubeconfig"
fi
KC=$STATE/kubeconfig

# 4. Images: the box image (busybox + a static sbx with the pod-agent
# command) and the Pod sandbox image, imported into containerd later. The
# box image is rebuilt whenever the sbx binary changes.
IMG=$STATE/images
build_box_image() {
	local root
	root=$(mktemp -d "$IMG/box.XXXXXX")
	mkdir -p "$root/bin" "$root/usr/local/bin" "$root/workspace" "$root/run/sbx" "$root/tmp" "$root/etc" "$root/root"
	chmod 1777 "$root/tmp"
	cp /bin/busybox "$root/bin/busybox"
	for a in $("$root/bin/busybox" --list); do [ "$a" = busybox ] || ln -s busybox "$root/bin/$a"; done
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
	printf 'root:x:0:\n' >"$root/etc/group"
	cp "$IMG/sbx" "$root/usr/local/bin/sbx"
	(cd "$repo" && go run ./hack/cluster/ociimage -dir "$root" -name sbx.local/box:dev -o "$IMG/box.tar" -entrypoint /usr/local/bin/sbx,pod-agent,serve)
	rm -rf "$root"
}
build_pause_image() {
	local root
	root=$(mktemp -d "$IMG/pause.XXXXXX")
	(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$root/pause" ./hack/cluster/pause)
	(cd "$repo" && go run ./hack/cluster/ociimage -dir "$root" -name sbx.local/pause:dev -o "$IMG/pause.tar" -entrypoint /pause)
	rm -rf "$root"
}
"$here/sbx-binary.sh" "$IMG/sbx.next"
sbx_changed=0
if ! cmp -s "$IMG/sbx.next" "$IMG/sbx" || [ ! -f "$IMG/box.tar" ]; then
	log "box image"
	mv "$IMG/sbx.next" "$IMG/sbx"
	build_box_image
	sbx_changed=1
fi
rm -f "$IMG/sbx.next"
# The agent image (Debian, Node.js, Claude Code: `go tool -modfile=tools/go.mod task image`) with
# this checkout's sbx, when one is built: what the claude agent runs in on a
# cluster. Its root layer is cached by recipe key (vm/build/image.sh oci).
agent_data=${SBX_DATA:-$repo/.sbx}
if SBX_DATA="$agent_data" "$repo/vm/build/image.sh" uptodate; then
	agent_key=$("$repo/vm/build/image.sh" key)
	if [ $sbx_changed = 1 ] || [ ! -f "$IMG/agent.tar" ] || [ "$(cat "$IMG/agent.key" 2>/dev/null)" != "$agent_key" ]; then
		log "agent image"
		SBX_DATA="$agent_data" "$repo/vm/build/image.sh" oci "$IMG/agent.tar" sbx.local/agent:dev "$IMG/sbx"
		echo "$agent_key" >"$IMG/agent.key"
	fi
else
	rm -f "$IMG/agent.tar" "$IMG/agent.key"
	log "no agent image built (go tool -modfile=tools/go.mod task image): the claude agent cannot run on this cluster"
fi
if [ ! -f "$IMG/pause.tar" ]; then
	log "pause image"
	build_pause_image
fi

# 5. PostgreSQL 15, as the postgres user (initdb refuses root).
PGBIN=/usr/lib/postgresql/15/bin
if ! runuser -u postgres -- "$PGBIN/pg_ctl" -D "$STATE/pg/data" status >/dev/null 2>&1; then
	log "start postgres"
	mkdir -p "$STATE/pg"
	chown postgres:postgres "$STATE/pg"
	if [ ! -f "$STATE/pg/data/PG_VERSION" ]; then
		runuser -u postgres -- "$PGBIN/initdb" -D "$STATE/pg/data" --auth=trust -U postgres >"$LOGS/initdb.log" 2>&1
	fi
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$STATE/pg/data" -l "$STATE/pg/postgres.log" \
		-o "-k $STATE/pg -c listen_addresses=127.0.0.1 -p $PG_PORT -c fsync=off -c max_connections=200" -w start >/dev/null
fi
echo "postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable" >"$STATE/postgres.dsn"

# 6. containerd with its own config, root, state and socket under $STATE.
mkdir -p "$STATE/containerd" "$STATE/cni/net.d" "$STATE/cni/networks"
cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
[grpc]
  address = "$CTR_SOCK"
[ttrpc]
  address = "$CTR_SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "sbx.local/pause:dev"
  # No CAP_SYS_RESOURCE here: without this runc fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
EOF
cat >"$STATE/cni/net.d/10-sbx.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sbx-test",
  "plugins": [
    {"type": "bridge", "bridge": "sbxtest0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "dataDir": "$STATE/cni/networks", "ranges": [[{"subnet": "10.244.0.0/24"}]]}},
    {"type": "loopback"}
  ]
}
EOF
start containerd /usr/bin/containerd --config "$STATE/containerd/config.toml"
wait_for containerd 30 ctr --address "$CTR_SOCK" version
for i in box pause agent; do
	[ -f "$STATE/images/$i.tar" ] || continue
	if ! ctr --address "$CTR_SOCK" -n k8s.io images ls -q | grep -qx "sbx.local/$i:dev" ||
		[ "$STATE/images/$i.tar" -nt "$STATE/images/$i.imported" ]; then
		log "import $i image"
		ctr --address "$CTR_SOCK" -n k8s.io images import --no-unpack=false "$STATE/images/$i.tar" >/dev/null
		touch "$STATE/images/$i.imported"
	fi
done

# 7. etcd, kube-apiserver, controller-manager, scheduler, kubelet.
start etcd "$BIN/etcd" --name sbx --data-dir "$STATE/etcd" --unsafe-no-fsync \
	--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
	--listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
	--initial-cluster sbx=http://127.0.0.1:23800 --listen-metrics-urls http://127.0.0.1:23810
start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
	--bind-address 127.0.0.1 --secure-port "$API_PORT" \
	--tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" --client-ca-file "$PKI/ca.crt" \
	--service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
	--service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.0.0.0/24 \
	--authorization-mode RBAC --kubelet-client-certificate "$PKI/admin.crt" --kubelet-client-key "$PKI/admin.key" \
	--kubelet-preferred-address-types Hostname --cert-dir "$STATE/apiserver"
wait_for kube-apiserver 120 kubectl --kubeconfig "$KC" get --raw /readyz
start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$KC" \
	--authentication-kubeconfig "$KC" --authorization-kubeconfig "$KC" \
	--bind-address 127.0.0.1 --secure-port 10257 --leader-elect=false \
	--service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
	--use-service-account-credentials=false --allocate-node-cidrs=false \
	--enable-hostpath-provisioner --cert-dir "$STATE/controller-manager"
start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$KC" \
	--authentication-kubeconfig "$KC" --authorization-kubeconfig "$KC" \
	--bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false
mkdir -p "$STATE/kubelet" "$STATE/pod-logs"
cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
podLogsDir: $STATE/pod-logs
containerRuntimeEndpoint: unix://$CTR_SOCK
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
start kubelet "$BIN/kubelet" --config "$STATE/kubelet/config.yaml" --kubeconfig "$KC" \
	--root-dir "$STATE/kubelet/root" --hostname-override localhost
node_ready() { kubectl --kubeconfig "$KC" get node localhost -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True; }
wait_for kubelet 120 node_ready
sa_ready() { kubectl --kubeconfig "$KC" -n default get serviceaccount default; }
wait_for kube-controller-manager 60 sa_ready

# 8. What the tests apply: the test StorageClass, the Kata RuntimeClass (so a
# kata-qemu box is admitted and fails clearly) and the gateway's RBAC.
kubectl --kubeconfig "$KC" apply -f "$repo/deploy/namespace.yaml" -f "$repo/deploy/test/" -f "$repo/deploy/runtimeclass.yaml" -f "$repo/deploy/rbac.yaml" \
	-f "$repo/deploy/networkpolicy.yaml" >/dev/null
log "ready: KUBECONFIG=$KC, postgres $(cat "$STATE/postgres.dsn")"
