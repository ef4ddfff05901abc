#!/usr/bin/env bash
# ctest fuzz_smoke: each fuzz target built as a plain executable (<target>_replay, with
# fuzz_main.cpp) runs its seeds and then deterministic random mutations for SECONDS.  Fails if a
# target lets anything but retexo::error out or crashes (the input is kept as
# crash-<target>-<hash> in the work directory, printed below).
#   test/fuzz/smoke_test.sh BIN_DIR RETEXO_GENERATE [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$1
generate=$2
seconds=${3:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/retexo-fuzz-smoke.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$here/make_seeds.sh" "$work/corpus" "$generate"
status=0
for t in fuzz_ogb fuzz_npz fuzz_assignment fuzz_graph_file; do
  if ! (cd "$work" && "$bin/${t}_replay" --seconds "$seconds" --seed 1 "$work/corpus/$t"); then
    echo "== $t: FAILED"
    status=1
  fi
done
if compgen -G "$work/crash-*" >/dev/null; then
  for f in "$work"/crash-*; do echo "== $(basename "$f") (hex):"; od -A d -t x1 "$f" | head -20; done
  mkdir -p fuzz-crashes && cp "$work"/crash-* fuzz-crashes/ && echo "== saved in $(pwd)/fuzz-crashes"
fi
exit $status
