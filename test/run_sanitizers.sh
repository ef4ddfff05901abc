#!/usr/bin/env bash
# Build everything with AddressSanitizer + UndefinedBehaviorSanitizer (RETEXO_SANITIZE=ON)
# into build-asan/ and run the whole test suite under it.
#   test/run_sanitizers.sh [ctest options]
# Suppressions (test/sanitizers/): leak reports are off (detect_leaks=0) because Open MPI and
# HDF5 keep global allocations alive until exit and report them as leaks; every other ASan
# and UBSan finding fails the run (halt_on_error).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETEXO_ASAN_BUILD:-$root/build-asan}
RETEXO_BUILD_DIR=$build "$root/cmake/bootstrap.sh" -DRETEXO_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRETEXO_NATIVE=ON
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
cd "$build"
exec ctest --output-on-failure -j "$(nproc)" "$@"
