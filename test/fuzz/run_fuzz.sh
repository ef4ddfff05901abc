#!/usr/bin/env bash
# Build the fuzz targets with clang (libFuzzer + AddressSanitizer + UBSan, the library
# instrumented too) and run each for SECONDS (default 600), the three side by side.
#   test/fuzz/run_fuzz.sh [SECONDS]
# Needs clang and libclang-rt-14-dev (Debian); crashes are saved as fuzz/<target>/crash-*.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
seconds=${1:-600}
build=${RETEXO_FUZZ_BUILD:-$root/build-fuzz}
"$root/cmake/install-deps.sh"
command -v clang++ >/dev/null || { sudo=(); [[ $(id -u) -ne 0 ]] && sudo=(sudo); "${sudo[@]}" apt-get install -y -qq clang libclang-rt-14-dev; }
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRETEXO_FUZZ=ON -DRETEXO_SANITIZE=ON \
  -DRETEXO_BUILD_TESTS=OFF -DRETEXO_BUILD_PERF=OFF -DRETEXO_BUILD_APPS=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz_ogb fuzz_npz fuzz_assignment fuzz_graph_file retexo_generate >/dev/null
corpus=$build/corpus
mkdir -p "$corpus/fuzz_ogb" "$corpus/fuzz_npz" "$corpus/fuzz_assignment" "$corpus/fuzz_graph_file"
# fuzz_npz: byte 1 (stored node_feat.npy) then a valid float32 (4, 2) .npy array.
npy_dict="{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }"
while (( (10 + ${#npy_dict} + 1) % 64 != 0 )); do npy_dict+=" "; done
{ printf '\001\223NUMPY\001\000'; printf "\\x$(printf %02x $((${#npy_dict} + 1)))\\000"; printf '%s\n' "$npy_dict"
  head -c 32 /dev/zero; } >"$corpus/fuzz_npz/feat"
printf '\0000,1\n1,2\n' >"$corpus/fuzz_ogb/edges"
printf '0\n1\n2\n0\n' >"$corpus/fuzz_assignment/ok"
"$build/apps/retexo_generate" --out "$corpus/fuzz_graph_file/small.h5" --nodes 40 --features 3 --classes 2 --avg-degree 3 >/dev/null
export ASAN_OPTIONS=detect_leaks=0  # MPI and HDF5 keep allocations until exit
# The four targets run side by side; each writes findings/<target>.log.
pids=()
for t in fuzz_ogb fuzz_npz fuzz_assignment fuzz_graph_file; do
  mkdir -p "$build/findings/$t"
  echo "== $t for ${seconds}s (log: $build/findings/$t.log)"
  (cd "$build/findings/$t" && "$build/test/fuzz/$t" -max_total_time="$seconds" -rss_limit_mb=4096 "$corpus/$t" \
    >"$build/findings/$t.log" 2>&1) &
  pids+=($!)
done
status=0
for i in 0 1 2 3; do
  t=$(echo fuzz_ogb fuzz_npz fuzz_assignment fuzz_graph_file | cut -d' ' -f$((i + 1)))
  if wait "${pids[$i]}"; then echo "== $t: no crash ($(grep -o 'Done [0-9]* runs' "$build/findings/$t.log" | tail -1))"
  else echo "== $t: FAILED, see $build/findings/$t.log and $build/findings/$t/crash-*"; status=1; fi
done
exit $status
