#!/bin/sh
# Build etcd and the Kubernetes server binaries into $BIN (cached outside the
# checkout). Each binary is built only when missing, so a second run is instant.
set -eu
K8S_VERSION=${K8S_VERSION:-v1.37.2}
here=$(cd "$(dirname "$0")" && pwd)
BIN=${1:?usage: build.sh BINDIR}
mkdir -p "$BIN"
export CGO_ENABLED=0
major=$(echo "$K8S_VERSION" | sed 's/^v\([0-9]*\)\..*/\1/')
minor=$(echo "$K8S_VERSION" | sed 's/^v[0-9]*\.\([0-9]*\)\..*/\1/')
# Without these, clients cannot parse the server's version (-master+$Format:%H$).
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=$major -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"
if [ ! -x "$BIN/etcd" ]; then
	echo "build: etcd"
	(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3 && mv "$BIN/etcd.tmp" "$BIN/etcd")
fi
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet; do
	[ -x "$BIN/$cmd" ] && continue
	echo "build: $cmd"
	(cd "$here/kube" && go build -trimpath -ldflags "$ldflags" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd" && mv "$BIN/$cmd.tmp" "$BIN/$cmd")
done
