#!/usr/bin/env bash
# Ingestion and partitioning without one machine holding the graph: the products-scale graph
# of perf/run_all.sh (2.4M nodes, 123M CSR in-edges, 100 features) partitioned and loaded by
# 2, 4 and 8 ranks, each rank in a memory cgroup of its own (perf/mem_limit.sh) whose limit is
# below the single-process path's peak; each rank's peak RSS and the wall time per step.
#   perf/ingest_scale.sh [OUT_DIR]    PRODUCTS_GRAPH=FILE reuses a graph; LIMIT=1200M sets the
#                                     per-rank limit; RANKS="2 4 8"; METHODS="random blocks"
# Steps per rank count P:
#   partition   mpirun -np P retexo_partition --graph G (each rank reads its slice, writes its part)
#   slice-load  mpirun -np P retexo_mpi --data G --partition M --mode stats (the same, in memory)
#   shards      retexo_shard --graph G --parts P (preparation, one process: an owner directory)
#   owner-load  mpirun -np P retexo_mpi --data OWNERS --mode stats (rank r opens shard<r>.h5 only)
# and once, the single-process path: retexo_partition --graph G --parts 8 in one process.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/perf/results/ingest_scale}
apps=${RETEXO_BUILD_DIR:-$root/build}/apps
mkdir -p "$out"
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
limit=${LIMIT:-1200M}
methods=${METHODS:-random blocks}
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*"; }
prod=${PRODUCTS_GRAPH:-$out/products.h5}
if [[ ! -f $prod ]]; then
  log "generate the products-scale graph"
  "$apps/retexo_generate" --out "$prod" --nodes 2400000 --features 100 --classes 47 --avg-degree 53 \
    --homophily 0.8 --power-law 2.5 --feature-signal 1.5 --seed 5 >"$out/generate.log"
fi
table=$out/ingest_scale.tsv
printf 'step\tmethod\tranks\tlimit\twall_s\tmax_rank_rss_MB\tsum_rss_MB\tper_rank_rss_MB\n' >"$table"
# measure STEP METHOD P LIMIT command...: wall time and every rank's peak RSS.
measure() {
  local step=$1 method=$2 p=$3 lim=$4
  shift 4
  rm -f "$out/rss".*
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >"$out/$step-$method-p$p.log" 2>&1 || { log "FAILED: $step $method P=$p (see $out/$step-$method-p$p.log)"; tail -5 "$out/$step-$method-p$p.log"; return 1; }
  t1=$(date +%s.%N)
  python3 - "$out" "$step" "$method" "$p" "$lim" "$t0" "$t1" >>"$table" <<'PY'
import glob, sys
out, step, method, p, lim, t0, t1 = sys.argv[1:]
rss = [int(open(f).read().split()[-1]) / 1024 for f in sorted(glob.glob(out + "/rss.*"), key=lambda f: int(f.rsplit(".", 1)[1]))]
print(f"{step}\t{method}\t{p}\t{lim}\t{float(t1) - float(t0):.1f}\t{max(rss):.0f}\t{sum(rss):.0f}\t{','.join(f'{r:.0f}' for r in rss)}")
PY
  log "$(tail -1 "$table")"
}
log "single-process path: retexo_partition --parts 8 in one process"
measure single random 1 none "$root/perf/mem_limit.sh" 20G "$out/rss" "$apps/retexo_partition" --graph "$prod" --parts 8 --method random --out "$out/single-p8"
rm -rf "$out/single-p8"
for p in ${RANKS:-2 4 8}; do
  lim=$limit
  for m in $methods; do
    measure partition "$m" "$p" "$lim" mpirun -np "$p" --bind-to none "$root/perf/mem_limit.sh" "$lim" "$out/rss" "$apps/retexo_partition" --graph "$prod" --method "$m" --out "$out/parts-$m-p$p"
    rm -rf "$out/parts-$m-p$p"
    measure slice-load "$m" "$p" "$lim" mpirun -np "$p" --bind-to none "$root/perf/mem_limit.sh" "$lim" "$out/rss" "$apps/retexo_mpi" --data "$prod" --partition "$m" --mode stats
  done
  measure shards random "$p" none "$root/perf/mem_limit.sh" 20G "$out/rss" "$apps/retexo_shard" --graph "$prod" --parts "$p" --method random --out "$out/owners-p$p"
  measure owner-load random "$p" "$lim" mpirun -np "$p" --bind-to none "$root/perf/mem_limit.sh" "$lim" "$out/rss" "$apps/retexo_mpi" --data "$out/owners-p$p" --mode stats
  [[ $p -eq 8 ]] || rm -rf "$out/owners-p$p"
done
column -t -s $'\t' "$table"
