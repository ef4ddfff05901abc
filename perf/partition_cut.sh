#!/usr/bin/env bash
# Edge cut and total halo of random, METIS (cut and vol objectives) and PT-Scotch partitions of
# cora, citeseer and amazon-computers at 2, 4 and 8 parts.  PT-Scotch runs distributed, one
# rank per part (mpirun -np PARTS, oversubscribed on a small machine through Open MPI's
# OMPI_MCA_rmaps_base_oversubscribe=1, like --oversubscribe); random and METIS run on
# rank 0 of the same job (perf/partition_cut.cpp).
#   perf/partition_cut.sh [OUT_DIR]
# Environment: RETEXO_BUILD_DIR (default build/), DATASETS (default ../shared/datasets),
# NAMES ("cora citeseer amazon-computers"), PARTS ("2 4 8"), SEED (42), MPIEXEC (mpirun).
# Writes OUT_DIR/partition_cut.tsv and prints it as a table.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/perf/results/partition_cut}
build=${RETEXO_BUILD_DIR:-$root/build}
datasets=${DATASETS:-$root/../shared/datasets}
names=${NAMES:-cora citeseer amazon-computers}
parts_list=${PARTS:-2 4 8}
seed=${SEED:-42}
mpiexec=${MPIEXEC:-mpirun}
tool=$build/perf/partition_cut
convert=$build/apps/retexo_convert
for exe in "$tool" "$convert"; do
  [[ -x $exe ]] || { echo "partition_cut.sh: $exe not built (cmake --build $build --target partition_cut retexo_convert)" >&2; exit 1; }
done
mkdir -p "$out"
tsv=$out/partition_cut.tsv
printf 'graph\tparts\tranks\tmethod\tedge_cut\ttotal_halo\tbalance\tseconds\n' >"$tsv"
for name in $names; do
  graph=$out/$name.h5
  if [[ ! -f $graph ]]; then
    "$convert" --ogb "$datasets/$name" --split random-paper --out "$graph" >"$out/$name-convert.log"
  fi
  for p in $parts_list; do
    OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1 "$mpiexec" -np "$p" "$tool" "$graph" "$p" "$seed" >>"$tsv"
  done
done
# The table: one row per graph and part count, cut and halo of each method.
python3 - "$tsv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
methods = ['random', 'metis-cut', 'metis-vol', 'ptscotch']
table = {}
for r in rows:
    table.setdefault((r['graph'], int(r['parts'])), {})[r['method']] = r
head = '| graph | parts | ' + ' | '.join(f'{m} cut | {m} halo' for m in methods) + ' | ptscotch balance | ptscotch s |'
print(head)
print('|' + '---|' * (head.count('|') - 1))
for (g, p), m in table.items():
    cells = ' | '.join(f"{m[k]['edge_cut']} | {m[k]['total_halo']}" for k in methods)
    print(f"| {g} | {p} | {cells} | {m['ptscotch']['balance']} | {m['ptscotch']['seconds']} |")
EOF
