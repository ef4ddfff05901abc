#!/usr/bin/env bash
# Ingestion and partitioning without one machine holding the graph: the products-scale graph
# of perf/run_all.sh (2.4M nodes, 123M CSR in-edges, 100 features) partitioned and loaded by
# 2, 4 and 8 ranks, each rank in a memory cgroup of its own (perf/mem_limit.sh) limited to
# LIMIT_FRACTION (default 0.75) of the single-process path's peak for the same step, measured
# first in the same run (partitioning: retexo_partition with the same method in one process;
# loading: retexo_mpi -np 1, one process holding the whole graph); then RETEXO trained from 8 owner shards under
# TRAIN_LIMIT per rank, beside one process training the whole graph.  Per step: wall time, each rank's peak RSS and CPU seconds (on 2
# cores, ranks beyond 2 share them: wall time then measures the total work).
#   perf/ingest_scale.sh [OUT_DIR]     PRODUCTS_GRAPH=FILE reuses a graph; RANKS="2 4 8";
#                                      METHODS="random blocks"; TRAIN_LIMIT=3000M; TRAIN=0 skips training,
#                                      TRAIN_SINGLE=0 the single-process training;
#                                      TRAIN_RANKS="1 2 4 8 16" also trains from the graph file
# Steps per rank count P:
#   partition   mpirun -np P retexo_partition --graph G (each rank reads its slice, writes its part)
#   slice-load  mpirun -np P retexo_mpi --data G --partition M --mode stats (the same, in memory)
#   shards      retexo_shard --graph G --parts P (preparation in one process: an owners directory)
#   owner-load  mpirun -np P retexo_mpi --data OWNERS --mode stats (rank r opens shard<r>.h5 only)
# Output: OUT_DIR/ingest_scale.tsv (one row per step) and the logs.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/perf/results/ingest_scale}
apps=${RETEXO_BUILD_DIR:-$root/build}/apps
mkdir -p "$out"
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
limit_fraction=${LIMIT_FRACTION:-0.75}
methods=${METHODS:-random blocks}
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*"; }
prod=${PRODUCTS_GRAPH:-$out/products.h5}
if [[ ! -f $prod ]]; then
  log "generate the products-scale graph"
  "$apps/retexo_generate" --out "$prod" --nodes 2400000 --features 100 --classes 47 --avg-degree 53 \
    --homophily 0.8 --power-law 2.5 --feature-signal 1.5 --seed 5 >"$out/generate.log"
fi
table=$out/ingest_scale.tsv
printf 'step\tmethod\tranks\tlimit_MB\twall_s\tmax_rank_rss_MB\tmax_rank_cpu_s\tper_rank_rss_MB\n' >"$table"
# measure STEP METHOD P LIMIT command...: one row of the table.
measure() {
  local step=$1 method=$2 p=$3 lim=$4
  shift 4
  rm -f "$out/rss".*
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$@" >"$out/$step-$method-p$p.log" 2>&1; then # recorded, and the run goes on
    local why=failed
    grep -q "Exit code:    137\|hit the memory limit" "$out/$step-$method-p$p.log" && why="over the limit"
    printf '%s\t%s\t%s\t%s\t-\t%s\t-\t-\n' "$step" "$method" "$p" "$lim" "$why" >>"$table"
    log "$(tail -1 "$table") (see $out/$step-$method-p$p.log)"
    return 0
  fi
  t1=$(date +%s.%N)
  python3 - "$out" "$step" "$method" "$p" "$lim" "$t0" "$t1" >>"$table" <<'PY'
import glob, sys
out, step, method, p, lim, t0, t1 = sys.argv[1:]
rows = []
for f in sorted(glob.glob(out + "/rss.*"), key=lambda f: int(f.rsplit(".", 1)[1])):
    kb, wall, user, sys_s = open(f).read().split()[-4:]
    rows.append((int(kb) / 1024, float(user) + float(sys_s)))
print(f"{step}\t{method}\t{p}\t{lim}\t{float(t1) - float(t0):.1f}\t{max(r for r, _ in rows):.0f}\t"
      f"{max(c for _, c in rows):.1f}\t{','.join(f'{r:.0f}' for r, _ in rows)}")
PY
  log "$(tail -1 "$table")"
}
limited() { # limited MB P command...: under mpirun -np P, each rank limited to MB
  local mb=$1 p=$2
  shift 2
  mpirun -np "$p" --bind-to none "$root/perf/mem_limit.sh" "${mb}M" "$out/rss" "$@"
}
log "single-process paths: retexo_partition --parts 8 (each method), and retexo_mpi -np 1 loading the whole graph"
for m in $methods; do
  measure single-partition "$m" 1 - "$root/perf/mem_limit.sh" 20G "$out/rss" "$apps/retexo_partition" --graph "$prod" \
    --parts 8 --method "$m" --out "$out/single-p8"
  rm -rf "$out/single-p8"
done
measure single-load random 1 - "$root/perf/mem_limit.sh" 20G "$out/rss" "$apps/retexo_mpi" --data "$prod" --mode stats
limit_of() { awk -F'\t' -v s="$1" -v m="$2" -v f="$limit_fraction" '$1 == s && $2 == m { printf "%d", $6 * f }' "$table"; }
llim=$(limit_of single-load random)
for p in ${RANKS:-2 4 8}; do
  for m in $methods; do
    plim=$(limit_of single-partition "$m")
    measure partition "$m" "$p" "$plim" limited "$plim" "$p" "$apps/retexo_partition" --graph "$prod" --method "$m" \
      --out "$out/parts-$m-p$p"
    rm -rf "$out/parts-$m-p$p"
    measure slice-load "$m" "$p" "$llim" limited "$llim" "$p" "$apps/retexo_mpi" --data "$prod" --partition "$m" --mode stats
  done
  measure shards random "$p" - "$root/perf/mem_limit.sh" 20G "$out/rss" "$apps/retexo_shard" --graph "$prod" \
    --parts "$p" --method random --out "$out/owners-p$p"
  measure owner-load random "$p" "$llim" limited "$llim" "$p" "$apps/retexo_mpi" --data "$out/owners-p$p" --mode stats
  [[ $p -eq 8 ]] || rm -rf "$out/owners-p$p"
done
# RETEXO training from the graph file at TRAIN_RANKS (e.g. "1 2 4 8 16"; none by default), all
# stage-input columns at once and 64 at a time: perf/ingest_model.py fits the training formula
# to these rows (steps train-graph, methods cols0 and cols64).
for p in ${TRAIN_RANKS:-}; do
  for cols in 0 64; do
    measure train-graph "cols$cols" "$p" - limited 20000 "$p" "$apps/retexo_mpi" --data "$prod" --mode retexo \
      --model gcn --rounds 2 --hidden 256 --log-every 1000 --exchange-columns "$cols"
  done
done
if [[ ${TRAIN:-1} != 0 && -d $out/owners-p8 ]]; then
  train=(--mode retexo --model gcn --rounds 2 --hidden 256 --exchange-columns 64 --log-every 1000)
  tl=${TRAIN_LIMIT:-3000M}
  [[ ${TRAIN_SINGLE:-1} == 0 ]] ||
    measure train-single random 1 - "$root/perf/mem_limit.sh" 20G "$out/rss" "$apps/retexo_mpi" --data "$prod" "${train[@]}"
  measure train-owners random 8 "${tl%M}" limited "${tl%M}" 8 "$apps/retexo_mpi" --data "$out/owners-p8" "${train[@]}"
fi
column -t -s $'\t' "$table"
