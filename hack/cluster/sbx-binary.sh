#!/bin/sh
# Build the static sbx for the test cluster's box image into $1: the repo's
# own binary once main.go wires `sbx pod-agent` (vm/guest/podagent), until
# then the stand-in hack/cluster/sbxpod that has only that command.
set -eu
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: sbx-binary.sh OUT}
cd "$repo"
CGO_ENABLED=0 go build -trimpath -o "$out" .
if ! "$out" pod-agent --help >/dev/null 2>&1; then
	CGO_ENABLED=0 go build -trimpath -o "$out" ./hack/cluster/sbxpod
fi
