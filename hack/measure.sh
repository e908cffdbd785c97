#!/usr/bin/env bash
# measure.sh prints the structural figures issue 17 asks for (lines of
# code, duplicate pairs, longest functions, the guest binary, the core's
# size), for comparing two commits: run it in a checkout of each.
set -euo pipefail
cd "$(dirname "$0")/.."

gofiles() { git ls-files -- '*.go' | grep -v '_templ\.go$' || true; }
loc() { xargs -r cat | grep -cv '^\s*$' || true; }

echo "commit            $(git rev-parse --short HEAD)"
echo "go lines (non-test, non-blank)  $(gofiles | grep -v '_test\.go$' | loc)"
echo "go lines (tests)                $(gofiles | grep '_test\.go$' | loc)"
echo "store lines (non-test)          $(gofiles | grep '^store/' | grep -v '_test\.go$' | loc)"
echo "vm manager lines (+records)     $(ls vm/manager.go vm/records.go vm/kube/machines.go vm/kube/records.go 2>/dev/null | loc)"
echo "methods on *fleet.Fleet         $(cat fleet/*.go | grep -c '^func (f \*Fleet)' || true)"
echo "fleet/ files (non-test)         $(ls fleet/*.go | grep -vc '_test\.go$')"
echo "type switch on backend in core  $(grep -c 'be\.(\*kube\.Backend)' gateway/core.go || true)"
echo "fronts importing vm or vm/agent $(grep -rlE '"sbx\.dev/sbx/vm(/agent)?"' --include='*.go' gateway/web gateway/mcp gateway/sshd | grep -vc '_test\.go$' || true)"
echo "duplicates                      $(duplicates --seconds 300 | head -1)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go build -tags guest -trimpath -o "$tmp/guest" .
echo "guest binary bytes              $(stat -c %s "$tmp/guest")"
echo "guest sbx packages              $(go list -tags guest -deps . | grep -c '^sbx\.dev/' || true)"
echo "guest host packages             $(go list -tags guest -deps . | grep -E '^sbx\.dev/sbx/(vm|vm/image|vm/kernel|vm/qemu(/.*)?|gateway(/.*)?|store(/.*)?)$' | tr '\n' ' ')"

echo "longest functions (lines):"
gofiles | grep -v '_test\.go$' | while read -r f; do
	awk -v f="$f" '/^func /{s=NR; n=$0} /^}/{if(s){print NR-s+1, f":"s, n; s=0}}' "$f"
done | sort -rn | head -8 | sed 's/{$//; s/^/  /'
