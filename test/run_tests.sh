#!/usr/bin/env bash
# The README's test command (and what .ci/run calls): install what is missing, build, and
# run the whole test suite with ctest.  Extra arguments go to ctest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/cmake/bootstrap.sh"
cd "${RETEXO_BUILD_DIR:-$root/build}"
exec ctest --output-on-failure -j "$(nproc)" "$@"
