#!/usr/bin/env bash
# Install the dependencies (if missing), configure and build retexo into build/ (or
# $RETEXO_BUILD_DIR).  Extra arguments are passed to cmake's configure step.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/cmake/install-deps.sh"
build=${RETEXO_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
