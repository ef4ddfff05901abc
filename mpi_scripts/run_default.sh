#!/usr/bin/env bash
# The README's main command: install what the library and retexo_mpi need, build the library,
# retexo_mpi and the other tools (no tests or benchmarks), and run retexo_mpi on 4 ranks on the
# built-in synthetic graph.  Extra arguments go to retexo_mpi.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/cmake/bootstrap.sh" --main
exec "$root/mpi_scripts/retexo_run.sh" -np 4 "$@"
