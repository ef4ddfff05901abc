#!/usr/bin/env bash
# retexo_convert's peak memory on OGB's binary layout: generate a graph (gen_ogb_npz) at two
# feature widths and report the peak RSS of the conversion against the size of the features.
# The peak should stay near the CSR's size whatever the features' size (they are streamed).
#   perf/convert_memory.sh BUILD_DIR [NODES] [EDGES] [FEATURES...]   (default 1000000 4000000 8 128)
set -euo pipefail
build=$1
nodes=${2:-1000000}
edges=${3:-4000000}
shift $(($# < 3 ? $# : 3))
widths=("$@")
[[ ${#widths[@]} -gt 0 ]] || widths=(8 128)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-9s %-9s %-9s %-14s %-14s %s\n' nodes edges features "features MiB" "peak RSS MiB" seconds
for f in "${widths[@]}"; do
  "$build/perf/gen_ogb_npz" "$tmp/ds" --nodes "$nodes" --edges "$edges" --features "$f" >/dev/null
  /usr/bin/time -v "$build/apps/retexo_convert" --ogb "$tmp/ds" --out "$tmp/g.h5" --features dense \
    >"$tmp/out.txt" 2>"$tmp/time.txt"
  rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$tmp/time.txt")
  secs=$(sed -n 's/.* in \([0-9.]*\) s$/\1/p' "$tmp/out.txt")
  printf '%-9s %-9s %-9s %-14.1f %-14.1f %s\n' "$nodes" "$edges" "$f" "$(echo "$nodes * $f * 4 / 1048576" | bc -l)" \
    "$(echo "$rss / 1024" | bc -l)" "$secs"
  rm -rf "$tmp/ds" "$tmp/g.h5"
done
