#!/usr/bin/env bash
# The seed inputs of the fuzz targets, written to OUT/<target>/ (run_fuzz.sh and the ctest
# fuzz_smoke use them).  RETEXO_GENERATE (apps/retexo_generate) makes the graph file.
#   test/fuzz/make_seeds.sh OUT RETEXO_GENERATE
set -euo pipefail
out=$1
generate=$2
mkdir -p "$out/fuzz_ogb" "$out/fuzz_npz" "$out/fuzz_assignment" "$out/fuzz_graph_file"
# fuzz_npz: byte 1 (stored node_feat.npy) then a valid float32 (4, 2) .npy array.
npy_dict="{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }"
while (( (10 + ${#npy_dict} + 1) % 64 != 0 )); do npy_dict+=" "; done
{ printf '\001\223NUMPY\001\000'; printf "\\x$(printf %02x $((${#npy_dict} + 1)))\\000"; printf '%s\n' "$npy_dict"
  head -c 32 /dev/zero; } >"$out/fuzz_npz/feat"
# fuzz_ogb: byte 0..5 picks the file the rest replaces (edges, features, labels, train split,
# node count, edge count); each seed holds a valid file.
printf '\0000,1\n1,2\n' >"$out/fuzz_ogb/edges"
printf '\0011,0\n0,1\n1,1\n0,0\n' >"$out/fuzz_ogb/features"
printf '\0020\n1\n1\n0\n' >"$out/fuzz_ogb/labels"
printf '\0030\n2\n' >"$out/fuzz_ogb/train"
printf '\0044\n' >"$out/fuzz_ogb/nodes"
printf '\0053\n' >"$out/fuzz_ogb/edge-count"
printf '0\n1\n2\n0\n' >"$out/fuzz_assignment/ok"
printf '0\n1\n2\n0\n1\n2\n1\n' | gzip -n -c >"$out/fuzz_assignment/ok.gz"
"$generate" --out "$out/fuzz_graph_file/small.h5" --nodes 40 --features 3 --classes 2 --avg-degree 3 >/dev/null
