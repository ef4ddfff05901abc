#!/usr/bin/env bash
# The README's main command: install what is missing, build, and run retexo_mpi on 4 ranks
# on the built-in synthetic graph.  Extra arguments go to retexo_mpi.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/cmake/bootstrap.sh"
exec "$root/mpi_scripts/retexo_run.sh" -np 4 "$@"
