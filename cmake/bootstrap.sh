#!/usr/bin/env bash
# Install the dependencies (if missing), configure and build retexo into build/ (or
# $RETEXO_BUILD_DIR).
#   cmake/bootstrap.sh [CMAKE_ARGS...]          # everything: library, tools, tests, benchmarks
#   cmake/bootstrap.sh --main [CMAKE_ARGS...]   # only the library, retexo_mpi and the tools (the main job)
# Extra arguments are passed to cmake's configure step.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RETEXO_BUILD_DIR:-$root/build}
if [[ ${1:-} == --main ]]; then
  shift
  "$root/cmake/install-deps.sh"
  # A new build directory is configured without tests and benchmarks (whose dependencies the
  # main job does not install); an existing one keeps its configuration.
  options=()
  [[ -f $build/CMakeCache.txt ]] || options=(-DRETEXO_BUILD_TESTS=OFF -DRETEXO_BUILD_PERF=OFF)
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "${options[@]}" "$@" >/dev/null
  cmake --build "$build" -j "$(nproc)" --target retexo_tools
else
  "$root/cmake/install-deps.sh" --test
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DRETEXO_BUILD_TESTS=ON -DRETEXO_BUILD_PERF=ON "$@" >/dev/null
  cmake --build "$build" -j "$(nproc)"
fi
