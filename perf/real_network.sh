#!/usr/bin/env bash
# RETEXO (on shared datasets also with --replicate-train), the standard trainer and BNS-GCN
# on a real network: 4 hosts in network namespaces
# (mpi_scripts/local_cluster.sh), Open MPI over TCP only, every link shaped to 10 Gb/s,
# 1 Gb/s, 100 Mb/s and 10 Mb/s with tc tbf.  Per run: wall time, time to the standard
# trainer's final test accuracy, and the bytes the hosts' links carried (interface counters)
# against the byte ledger.  Each graph also runs once on the same 4 ranks in shared memory:
# the emulated prediction (measured time + bytes / bandwidth) is made from that run.
#   perf/real_network.sh [OUT_DIR]      (root; about 35 minutes on 2 cores)
# OUT_DIR/net/*.json are the metrics, *.wire the counters; perf/report.py OUT_DIR adds the
# table and net_time_to_accuracy.png to OUT_DIR/report.md.
# Environment: RATES (default "10gbit 1gbit 100mbit 10mbit"), GRAPHS (default "syn cora": syn
# is the synthetic graph, the others shared datasets with their GCN preset, e.g. citeseer),
# CAP_S (default 150): a standard or BNS run predicted to take longer than CAP_S seconds
# runs only as many epochs as fit in CAP_S (at least 3); report.py extrapolates its time from
# the measured epochs and marks the figure as extrapolated.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/perf/results}
net=$out/net
apps=${RETEXO_BUILD_DIR:-$root/build}/apps
dsdir=${DATASET_DIR:-$root/../shared/datasets}
cluster=$root/mpi_scripts/local_cluster.sh
rates=${RATES:-10gbit 1gbit 100mbit 10mbit}
graphs=${GRAPHS:-syn cora}
cap_s=${CAP_S:-150}
export RETEXO_CLUSTER=${RETEXO_CLUSTER:-rxperf}
mkdir -p "$net"
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*"; }
[[ $(id -u) -eq 0 ]] || { echo "real_network.sh: needs root (network namespaces)" >&2; exit 1; }

# The graphs and each mode's options (epochs = rounds = 100 at most; --track-test: RETEXO's
# test accuracy every round, for time to accuracy).
syn=$out/net-syn.h5
[[ " $graphs " != *" syn "* || -f $syn ]] || "$apps/retexo_generate" --out "$syn" --nodes 50000 --features 100 --classes 10 --avg-degree 20 \
  --homophily 0.8 --power-law 2.5 --feature-signal 0.8 --seed 3 >/dev/null
declare -A data opts epochs modes
data[syn]=$syn
epochs[syn]=100  # standard and BNS epochs (RETEXO: --rounds)
modes[syn]="standard bns retexo retexo_int8"
# Shared datasets (OGB layout under DATASET_DIR), split random-paper, 200 epochs / rounds.
for g in $graphs; do
  [[ $g == syn ]] && continue
  data[$g]=$out/$g.h5
  epochs[$g]=200
  modes[$g]="standard bns retexo retexo_rep"
  [[ -f ${data[$g]} ]] && continue
  if [[ -d $dsdir/$g ]]; then "$apps/retexo_convert" --ogb "$dsdir/$g" --split random-paper --out "${data[$g]}" >/dev/null
  else log "no $dsdir/$g: $g skipped"; graphs=${graphs//$g/}; fi
done
common=(--partition random --seed 1 --log-every 1000)
# Synthetic: the standard trainer and BNS with 2 layers; RETEXO needs 3 stages to pass the
# standard trainer's 2-layer accuracy here (2 stages: 0.945 against 0.966), and stops a stage
# after 10 rounds without a better validation score.
opts[syn:standard]="--mode standard --lr 0.01"
opts[syn:bns]="--mode bns --bns-p 0.1 --lr 0.01"
opts[syn:retexo]="--mode retexo --config $root/perf/configs/synthetic.cfg --stages 3 --rounds 100 --patience 10 --lr 0.01 --track-test"
# ... and with the stage inputs sent as int8 (per-row scale): a quarter of the halo bytes.
opts[syn:retexo_int8]="${opts[syn:retexo]} --exchange-precision int8"
# Shared datasets: the GCN preset, for every mode.
for g in $graphs; do
  [[ $g == syn ]] && continue
  for m in standard bns retexo; do
    opts[$g:$m]="--config $root/perf/configs/$g-gcn.cfg --mode $m --track-test"
  done
  opts[$g:bns]+=" --bns-p 0.1"
  # ... and RETEXO with --replicate-train: the training rows once per stage, no gradient all-reduce.
  opts[$g:retexo_rep]="${opts[$g:retexo]} --replicate-train"
done

# mode_opts graph mode [epochs]: the options of one run.
mode_opts() {
  echo "${opts[$1:$2]}"
  [[ $2 == retexo* ]] || echo "--epochs ${3:-${epochs[$1]}}"
}

# The shared-memory runs: the base of the emulated predictions, and the epoch count and
# bytes that decide whether a shaped run is capped.
for g in $graphs; do
  for m in ${modes[$g]}; do
    f=$net/$g-$m-shm.json
    [[ -f $f ]] && continue
    log "$g $m: shared memory"
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 "$root/mpi_scripts/retexo_run.sh" -np 4 --data "${data[$g]}" "${common[@]}" $(mode_opts "$g" "$m") \
      --metrics-out "$f" >"${f%.json}.log" 2>&1
  done
done

# Epochs a run may take at RATE to stay within CAP_S (empty: no cap).  The prediction: the
# shared-memory run's time plus the busiest rank's bytes at RATE.
cap_epochs() { # graph mode rate_bits
  python3 - "$net/$1-$2-shm.json" "$3" "$cap_s" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
r = r["runs"][0] if "runs" in r else r
bits, cap = float(sys.argv[2]), float(sys.argv[3])
epochs = len(r["history"])
pred = r["time_s"]["total"] + 8.0 * r["max_rank_bytes"] / bits
if r["mode"] != "retexo" and pred > cap:
    print(max(3, int(epochs * cap / pred)))
EOF
}
bits_of() { awk -v r="$1" 'BEGIN { n = r + 0; u = substr(r, length(n "") + 1);
  m = (u ~ /^g/) ? 1e9 : (u ~ /^m/) ? 1e6 : (u ~ /^k/) ? 1e3 : 1; printf "%.0f", n * m }'; }
wire_total() { "$cluster" counters | awk 'NR > 1 { tx += $3; rx += $4 } END { printf "%.0f %.0f\n", tx, rx }'; }

log "cluster: 4 hosts"
"$cluster" down >/dev/null 2>&1 || true
"$cluster" up 4
trap '"$cluster" down' EXIT
trap 'exit 130' INT TERM
for rate in $rates; do
  "$cluster" shape "$rate"
  for g in $graphs; do
    for m in ${modes[$g]}; do
      f=$net/$g-$m-$rate.json
      [[ -f $f ]] && continue
      cap=$(cap_epochs "$g" "$m" "$(bits_of "$rate")")
      log "$g $m at $rate${cap:+ (capped at $cap epochs)}"
      before=$(wire_total)
      start=$(date +%s.%N)
      # In the background and waited for, so that INT/TERM end this script (and its EXIT trap
      # stops the run) at once rather than after the run.
      # shellcheck disable=SC2086
      "$cluster" run -np 4 "$apps/retexo_mpi" --data "${data[$g]}" "${common[@]}" $(mode_opts "$g" "$m" "$cap") \
        --metrics-out "$f.tmp" >"${f%.json}.log" 2>&1 &
      wait $! || { log "failed: see ${f%.json}.log"; continue; }
      end=$(date +%s.%N)
      after=$(wire_total)
      read -r tx0 rx0 <<<"$before"
      read -r tx1 rx1 <<<"$after"
      printf '{"rate": "%s", "rate_bits": %s, "wall_s": %s, "wire_tx_bytes": %d, "wire_rx_bytes": %d, "capped_epochs": %s}\n' \
        "$rate" "$(bits_of "$rate")" "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }')" $((tx1 - tx0)) $((rx1 - rx0)) "${cap:-null}" \
        >"${f%.json}.wire"
      mv "$f.tmp" "$f"
    done
  done
done
log "done: $net (perf/report.py $out adds the table and plot)"
