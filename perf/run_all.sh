#!/usr/bin/env bash
# The whole performance suite: kernel ratios, bytes / accuracy / time of RETEXO, the
# standard trainer and BNS-GCN across partition counts and datasets, emulated networks,
# time to accuracy, the products-scale run, retexo against a tuned PyTorch peer, and the three
# trainers on a real (namespaced, shaped) network.
# Writes OUT/report.md, OUT/report.json and OUT/*.png.
#   perf/run_all.sh [OUT_DIR]            (about 90 minutes on 2 cores: 20 step 7, 35 step 8)
# Step 7 passes REPS and LONG_S to perf/peer/compare.sh (up to 3 runs per side and cell);
# with REPS=1 LONG_S=1 (one run each) the suite took 87.5 minutes on a 2-core AVX2 EPYC, step 7 35.
# Environment: QUICK=1 shrinks every experiment (a smoke test of the pipeline, minutes).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/perf/results}
build=${RETEXO_BUILD_DIR:-$root/build}
apps=$build/apps
run=$root/mpi_scripts/retexo_run.sh
dsdir=${DATASET_DIR:-$root/../shared/datasets}
quick=${QUICK:-0}
mkdir -p "$out"
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*"; }
# Debian's python3 (matplotlib from apt), whatever python3 the PATH prefers.
py=/usr/bin/python3
"$root/cmake/install-deps.sh" --perf

# 1. Kernel throughput against this machine's limits.
log "kernels"
if [[ $quick == 1 ]]; then "$build/perf/bench_kernels" --quick --json "$out/kernels.json" >"$out/kernels.txt"
else "$build/perf/bench_kernels" --json "$out/kernels.json" >"$out/kernels.txt"; fi

# 2. RETEXO vs standard vs BNS on a synthetic graph, 2..16 partitions (rounds = epochs).
nodes=50000; rounds=100; parts="2 4 8 16"
[[ $quick == 1 ]] && { nodes=5000; rounds=10; parts="2 4"; }
syn=$out/syn.h5
[[ -f $syn ]] || "$apps/retexo_generate" --out "$syn" --nodes $nodes --features 128 --classes 10 --avg-degree 20 \
  --homophily 0.7 --power-law 2.5 --feature-signal 1.0 --seed 3 >/dev/null
for p in $parts; do
  log "synthetic, $p partitions"
  [[ -f $out/syn-p$p.json ]] || "$run" -np "$p" --data "$syn" --partition random --mode retexo,standard,bns --bns-p 0.1 \
    --config "$root/perf/configs/synthetic.cfg" --rounds $rounds --epochs $rounds --lr 0.01 --track-test --log-every 1000 --metrics-out "$out/syn-p$p.json" >"$out/syn-p$p.log"
done

# 3. The shared datasets, 4 random partitions (GCN, the workloads of perf/configs).
datasets="cora citeseer chameleon amazon-computers"
[[ $quick == 1 ]] && datasets="cora"
for ds in $datasets; do
  [[ -d $dsdir/$ds ]] || { log "skipping $ds (no $dsdir/$ds)"; continue; }
  [[ -f $out/$ds.h5 ]] || "$apps/retexo_convert" --ogb "$dsdir/$ds" --split random-paper --out "$out/$ds.h5" >/dev/null
  log "$ds, 4 partitions"
  [[ -f $out/$ds-p4.json ]] || "$run" -np 4 --data "$out/$ds.h5" --partition random --mode retexo,standard,bns --bns-p 0.1 \
    --config "$root/perf/configs/$ds.cfg" --rounds $((rounds * 2)) --epochs $((rounds * 2)) --track-test \
    --log-every 1000 --metrics-out "$out/$ds-p4.json" >"$out/$ds-p4.log"
done

# 4. Products scale: 2.4M nodes, 62M undirected edges, 100 features, 47 classes.
pnodes=2400000; pdeg=53; pepochs=2
[[ $quick == 1 ]] && { pnodes=100000; pdeg=20; }
prod=$out/products.h5
if [[ ! -f $prod ]]; then
  log "products: generate"
  /usr/bin/time -v "$apps/retexo_generate" --out "$prod" --nodes $pnodes --features 100 --classes 47 --avg-degree $pdeg \
    --homophily 0.8 --power-law 2.5 --feature-signal 1.5 --seed 5 >"$out/products-generate.log" 2>&1
fi
if [[ ! -f $out/products-p4/manifest.json ]]; then
  log "products: partition 4 ways"
  /usr/bin/time -v "$apps/retexo_partition" --graph "$prod" --parts 4 --method random --seed 1 --out "$out/products-p4" \
    >"$out/products-partition-p4.log" 2>&1
fi
"$run" -np 4 --data "$out/products-p4" --mode stats >"$out/products-p4-stats.txt"
# RETEXO end to end on 4 partitions (bf16 and int8 exchange; each stage's inputs sent 64
# columns at a time: same bytes, a quarter of the halo buffers), and the standard trainer on
# the same 4 partitions for $pepochs epochs (bytes per epoch are constant; report.py checks
# them against perf/std_bytes.py), once with the raw features' halo rows sent once (the
# default) and once resent every epoch (--resend-features), the two baselines RETEXO's bytes
# are reported against.  The standard trainer keeps only what its backward pass reads (about
# 4.7 GB per rank here).  Eight ranks, where each holds ~2M halo rows, are
# perf/products_p8.sh (17 min, not in this suite).  A run that fails is reported as missing,
# not fatal.
products_run() {  # name ranks options...
  local name=$1 np=$2
  shift 2
  log "products: $name"
  [[ -f $out/products-$name.json ]] || /usr/bin/time -v "$run" -np "$np" --data "$out/products-p$np" "$@" \
    --metrics-out "$out/products-$name.json" >"$out/products-$name.log" 2>&1 || log "failed: see $out/products-$name.log"
}
retexo_opts=(--mode retexo --config "$root/perf/configs/synthetic.cfg" --rounds 200 --lr 0.01 --patience 30 --log-every 50 --exchange-columns 64)
products_run retexo_bf16-p4 4 "${retexo_opts[@]}" --exchange-precision bf16
products_run retexo_int8-p4 4 "${retexo_opts[@]}" --exchange-precision int8
products_run standard-p4 4 --mode standard --epochs $pepochs --log-every 1
products_run standard_resend-p4 4 --mode standard --epochs $pepochs --log-every 1 --resend-features

# 5. Exchange precision: RETEXO on the synthetic graph, 8 partitions, bf16 and int8 (fp32 is
#    the RETEXO row of step 2).
for wire in bf16 int8; do
  log "synthetic, 8 partitions, RETEXO with $wire exchange"
  [[ -f $out/wire-syn-p8-$wire.json ]] || "$run" -np 8 --data "$syn" --partition random --mode retexo --rounds $rounds \
    --config "$root/perf/configs/synthetic.cfg" --lr 0.01 --track-test --exchange-precision $wire --log-every 1000 --metrics-out "$out/wire-syn-p8-$wire.json" \
    >"$out/wire-syn-p8-$wire.log"
done

# 6. Overlap: GCN on amazon-computers, 2 METIS partitions (interior rows exist only when
#    partitions follow the graph; one rank per core, as an oversubscribed rank's emulated
#    wait already lends its core to another rank), an emulated 10 Gb/s and 1 Gb/s network;
#    time spent waiting for halo rows with and without aggregating the interior rows
#    meanwhile (RETEXO: each stage's exchange; standard: every layer's exchange, 30 epochs).
ovg=$out/amazon-computers.h5
[[ $quick == 1 ]] && ovg=$out/cora.h5
if [[ -f $ovg ]]; then
  for bw in 1e10 1e9; do
    for ov in overlap no-overlap; do
      log "overlap: $ov at $bw bit/s"
      flag=(); [[ $ov == no-overlap ]] && flag=(--no-overlap)
      [[ -f $out/overlap-$bw-$ov.json ]] || "$run" -np 2 --data "$ovg" --partition metis --mode retexo,standard \
        --config "$root/perf/configs/synthetic.cfg" --rounds 30 --epochs 30 \
        --emulate-bandwidth $bw "${flag[@]}" --log-every 1000 --metrics-out "$out/overlap-$bw-$ov.json" \
        >"$out/overlap-$bw-$ov.log"
    done
  done
fi

# 7. Against a tuned PyTorch peer (perf/peer/peer.py: oneDNN GEMMs, sparse inputs, passive
#    waiting), back to back on the same files: every shared dataset x standard and RETEXO GCN /
#    SAGE / GAT with the defaults, np 1, 100 epochs / rounds per stage (QUICK: cora, one run each).
log "peer baseline"
if [[ $quick == 1 ]]; then
  DATASETS=cora REPS=1 H5_DIR=$out "$root/perf/peer/compare.sh" "$out/peer" >"$out/peer.log" 2>&1 || log "failed: see $out/peer.log"
else
  H5_DIR=$out "$root/perf/peer/compare.sh" "$out/peer" >"$out/peer.log" 2>&1 || log "failed: see $out/peer.log"
fi

# 8. A real network: 4 hosts in network namespaces over TCP, links shaped to 10 Gb/s .. 10 Mb/s
#    (perf/real_network.sh, about 35 minutes; needs root; QUICK: cora at 100 Mb/s only).
if [[ $(id -u) -eq 0 ]]; then
  log "real network"
  if [[ $quick == 1 ]]; then RATES=100mbit GRAPHS=cora "$root/perf/real_network.sh" "$out" >"$out/net.log" 2>&1 || log "failed: see $out/net.log"
  else "$root/perf/real_network.sh" "$out" >"$out/net.log" 2>&1 || log "failed: see $out/net.log"; fi
else
  log "real network: skipped (needs root for network namespaces)"
fi

log "report"
"$py" "$root/perf/report.py" "$out"
log "done: $out/report.md"
