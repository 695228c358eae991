#!/usr/bin/env bash
# Run an experiment file headless in the QEMU lab VM: build or boot the image, run
# `cclab run` inside, plot every run, and leave results and plots under results/ in the checkout.
#
# Usage: vm/experiment.sh SPEC.toml [--quick]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kit=$(cd "$here/.." && pwd)
. "$here/lib.sh"

[ $# -ge 1 ] || die "usage: vm/experiment.sh SPEC.toml [--quick]"
spec=$1; shift
quick=
for a in "$@"; do
  case "$a" in --quick) quick=--quick ;; *) die "unknown option $a (usage: vm/experiment.sh SPEC.toml [--quick])" ;; esac
done
[ -f "$spec" ] || die "no experiment file $spec"
abs=$(cd "$(dirname "$spec")" && pwd)/$(basename "$spec")
case "$abs" in "$kit"/*) rel=${abs#"$kit"/} ;; *) die "$spec must be inside the checkout ($kit): the VM sees only that" ;; esac
# Check the file on the host first when the host can import the kit: a typo fails in a second.
if python3 -c 'import cclab' 2>/dev/null; then
  (cd "$kit" && python3 -m cclab check "$rel" >/dev/null) || exit 2
fi

exec "$here/run.sh" -- sh -c '
  set -e
  dirs=$(python3 -m cclab run "$1" --out results $2)
  for d in $dirs; do
    python3 -m cclab plot "$d"
    echo "results: $d"
  done
' sh "$rel" "$quick"
