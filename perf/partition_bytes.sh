#!/usr/bin/env bash
# What the partitioner changes in the bytes: the standard trainer (halo exchange every layer,
# every epoch) and RETEXO on random, METIS and PT-Scotch partitions of cora, citeseer and
# amazon-computers at PARTS ranks (default 4); each rank reads its slice of the graph file and
# the ranks partition it (retexo_mpi --data G.h5 --partition M).  Defaults of both trainers,
# EPOCHS epochs and rounds per stage (default 50).
#   perf/partition_bytes.sh [OUT_DIR]      NAMES, PARTS, EPOCHS, DATASETS, RETEXO_BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/perf/results/partition_bytes}
apps=${RETEXO_BUILD_DIR:-$root/build}/apps
datasets=${DATASETS:-$root/../shared/datasets}
parts=${PARTS:-4}
epochs=${EPOCHS:-50}
mkdir -p "$out"
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
tsv=$out/partition_bytes.tsv
printf 'graph\tranks\tmethod\ttotal_halo\tstandard_MB\tretexo_MB\tstandard_acc\tretexo_acc\n' >"$tsv"
for name in ${NAMES:-cora citeseer amazon-computers}; do
  g=$out/$name.h5
  split=$(ls "$datasets/$name/split" | head -1)
  [[ -f $g ]] || "$apps/retexo_convert" --ogb "$datasets/$name" --split "$split" --out "$g" >/dev/null
  for m in random metis scotch; do
    mpirun -np "$parts" --bind-to none "$apps/retexo_mpi" --data "$g" --partition "$m" --mode both \
      --epochs "$epochs" --rounds "$epochs" --log-every 1000 --metrics-out "$out/$name-$m.json" >"$out/$name-$m.log" 2>&1
    halo=$(awk '$1 == "all" { print $3 }' "$out/$name-$m.log")
    python3 - "$out/$name-$m.json" "$name" "$parts" "$m" "$halo" >>"$tsv" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
runs = {r["mode"]: r for r in j["runs"]}
mb = lambda r: r["bytes"]["total"] / 1e6
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}\t{sys.argv[5]}\t{mb(runs['standard']):.1f}\t{mb(runs['retexo']):.1f}\t"
      f"{runs['standard']['accuracy']['test']:.4f}\t{runs['retexo']['accuracy']['test']:.4f}")
PY
    tail -1 "$tsv"
  done
done
column -t -s $'\t' "$tsv"
