#!/usr/bin/env bash
# Build the fuzz targets with clang (libFuzzer + AddressSanitizer + UBSan, the library
# instrumented too) and run each for SECONDS (default 600), the four side by side.  Every
# target parses its input in memory (no files, no per-input setup), so each runs thousands of
# inputs a second; the summary gives runs and libFuzzer's exec/s.
#   test/fuzz/run_fuzz.sh [SECONDS]        (RETEXO_FUZZ_BUILD: build directory, default build-fuzz)
# Needs clang and libclang-rt-14-dev (Debian); crashes are saved as
# <build>/findings/<target>/crash-*.  Without clang, the ctest fuzz_smoke runs the same targets
# for a few seconds each (seeds and random mutations, no coverage guidance; fuzz_main.cpp).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
seconds=${1:-600}
build=${RETEXO_FUZZ_BUILD:-$root/build-fuzz}
"$root/cmake/install-deps.sh"
command -v clang++ >/dev/null || { sudo=(); [[ $(id -u) -ne 0 ]] && sudo=(sudo); "${sudo[@]}" apt-get install -y -qq clang libclang-rt-14-dev; }
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRETEXO_FUZZ=ON -DRETEXO_SANITIZE=ON \
  -DRETEXO_BUILD_TESTS=OFF -DRETEXO_BUILD_PERF=OFF -DRETEXO_BUILD_APPS=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz_ogb fuzz_npz fuzz_assignment fuzz_graph_file retexo_generate >/dev/null
corpus=$build/corpus  # the seeds, and what libFuzzer adds to them
"$root/test/fuzz/make_seeds.sh" "$corpus" "$build/apps/retexo_generate"
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
  if wait "${pids[$i]}"; then
    echo "== $t: no crash ($(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$build/findings/$t.log" | tail -1)," \
         "$(grep -o 'DONE .*exec/s: [0-9]*' "$build/findings/$t.log" | grep -o 'exec/s: [0-9]*' | tail -1))"
  else echo "== $t: FAILED, see $build/findings/$t.log and $build/findings/$t/crash-*"; status=1; fi
done
exit $status
