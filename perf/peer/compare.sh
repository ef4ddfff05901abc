#!/usr/bin/env bash
# retexo against a tuned PyTorch peer baseline (perf/peer/peer.py), back to back on the same
# HDF5 files: cora, citeseer, facebook, chameleon, amazon-computers (those present in
# ../shared/datasets) x {standard, RETEXO} x {GCN, SAGE, GAT}; one process, every core for its
# OpenMP threads on both sides (retexo: mpirun -np 1 without core binding; passive waiting;
# glibc's huge-page and malloc-threshold tunables, which retexo_run.sh sets for retexo, for
# the peer too), the defaults
# (data/defaults.cfg; both sides read it) with every RETEXO stage running all its rounds
# (patience = 0: the same work on both sides), 100 epochs / 100 rounds per stage, seed 1.
# PRESETS=perf: the workloads of perf/configs instead.  Each side's time is the
# best of 3 runs, retexo and peer alternating (one run each for a cell whose first run takes
# longer than LONG_S seconds).  Writes OUT/peer.md, OUT/peer.json and OUT/runs/*.json.
#   perf/peer/compare.sh OUT
# Duration on this 2-core VM: about 20 minutes for the standard cells (REPS=3), 8 for the RETEXO
# ones (REPS=2).  Runs whose JSON exists are kept, so removing some cells' runs/* files and
# calling it again re-measures only those (meta.json accumulates).
# Environment: RETEXO_BUILD_DIR (default build/), DATASET_DIR, H5_DIR (converted graphs,
# default OUT/data), DATASETS, MODELS (default: all six), PRESETS (defaults | perf),
# REPS (3), LONG_S (60), EPOCHS (100), ROUNDS (100), THREADS (all cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: perf/peer/compare.sh OUT}
build=${RETEXO_BUILD_DIR:-$root/build}
dsdir=${DATASET_DIR:-$root/../shared/datasets}
h5dir=${H5_DIR:-$out/data}
datasets=${DATASETS:-cora citeseer facebook chameleon amazon-computers}
models=${MODELS:-standard:gcn standard:sage standard:gat retexo:gcn retexo:sage retexo:gat}
presets=${PRESETS:-defaults}
reps=${REPS:-3}
epochs=${EPOCHS:-100}
rounds=${ROUNDS:-100}
threads=${THREADS:-$(nproc)}
long_s=${LONG_S:-60} # cells whose first run takes longer than this are run once
py=/usr/bin/python3 # Debian's python3 with python3-torch (the PATH may prefer another)
mkdir -p "$out/runs" "$h5dir"
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*"; }
start=$(date +%s)

# Debian's torch and h5py (perf only; never needed by the tests).
if ! "$py" -c 'import torch, h5py' 2>/dev/null; then
  sudo=(); [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  log "installing python3-torch python3-h5py"
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq python3-torch python3-h5py >/dev/null
fi
[[ -x $build/apps/retexo_mpi ]] || { echo "compare.sh: no $build/apps/retexo_mpi (build first)" >&2; exit 1; }

# The same placement for both sides: one process whose $threads OpenMP threads may use every
# core.  Open MPI binds a lone rank to one core by default, so its threads would share it.
# Both sides wait passively between parallel regions: libgomp's default spinning made retexo
# 10-15x slower whenever other jobs shared the cores (cora RETEXO GCN 9-12 s against 0.8 s at
# load 9), while the peer waits passively anyway.  OMP_WAIT_POLICY=active to change both.
export OMP_NUM_THREADS=$threads
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export OMPI_MCA_hwloc_base_binding_policy=none
export RETEXO_BUILD_DIR=$build
run=$root/mpi_scripts/retexo_run.sh
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cpus=$(mpirun -np 1 sh -c 'grep Cpus_allowed_list /proc/self/status' 2>/dev/null | awk '{print $2}') || cpus=unknown
log "retexo rank may run on CPUs $cpus; peer: python $("$py" -c 'import torch; print(torch.__version__)')"

present=()
for ds in $datasets; do
  if [[ ! -d $dsdir/$ds ]]; then log "skipping $ds (no $dsdir/$ds)"; continue; fi
  present+=("$ds")
  [[ -f $h5dir/$ds.h5 ]] || "$build/apps/retexo_convert" --ogb "$dsdir/$ds" --split random-paper \
    --out "$h5dir/$ds.h5" >/dev/null
done

loads=()
gemm=full # the peer measures torch.mm's throughput once (reference BLAS, a few seconds)
for ds in "${present[@]}"; do
  for mm in $models; do
    mode=${mm%%:*} model=${mm##*:}
    preset=$root/perf/configs/$ds-$model.cfg
    [[ -f $preset ]] || preset=$root/perf/configs/$ds.cfg
    [[ $presets == perf && -f $preset ]] || preset=/dev/null
    # Both sides: every stage all its rounds; no cross-fitting (the peer does not implement it).
    mkdir -p "$out/cfg"
    { grep -Ev '^(patience|cross-fit) *=' "$preset" || true; printf 'patience = 0\ncross-fit = 1\n'; } \
      >"$out/cfg/$ds-$model.cfg"
    cfg=(--config "$out/cfg/$ds-$model.cfg")
    log "$ds $mode $model ($([[ $preset == /dev/null ]] && echo defaults || echo "${preset##*/}"))"
    for rep in $(seq 1 "$reps"); do
      base=$out/runs/$ds.$mode-$model
      if [[ ! -f $base.retexo.$rep.json ]]; then
        loads+=("$(cut -d' ' -f1 /proc/loadavg)")
        "$run" -np 1 --data "$h5dir/$ds.h5" --mode "$mode" --model "$model" "${cfg[@]}" --epochs "$epochs" \
          --rounds "$rounds" --log-every 100000 --metrics-out "$base.retexo.$rep.json" >"$base.retexo.$rep.log" 2>&1 ||
          log "retexo failed: see $base.retexo.$rep.log"
      fi
      if [[ ! -f $base.peer.$rep.json ]]; then
        GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=68719476736 "$py" "$root/perf/peer/peer.py" --data "$h5dir/$ds.h5" --mode "$mode" \
          --model "$model" "${cfg[@]}" --epochs "$epochs" --rounds "$rounds" --threads "$threads" \
          --gemm-bench "$gemm" --json-out "$base.peer.$rep.json" >/dev/null 2>"$base.peer.$rep.log" ||
          log "peer failed: see $base.peer.$rep.log"
        gemm=onednn
      fi
      slowest=$("$py" - "$base" "$rep" <<'EOF' || echo 0
import json, sys
b, r = sys.argv[1], sys.argv[2]
t, slowest = [], 0.0
for side in ("retexo", "peer"):
    try:
        j = json.load(open(f"{b}.{side}.{r}.json"))
        t.append(f"{side} {j['time_s']['total']:.2f} s (test {j['accuracy']['test']:.3f})")
        slowest = max(slowest, j["time_s"]["total"])
    except (OSError, ValueError, KeyError):
        t.append(f"{side} -")
print("    run", r + ":", ", ".join(t), file=sys.stderr)
print(int(slowest))
EOF
)
      # a long run varies little: one is enough (keeps the script near 30 min)
      if (( slowest > long_s )); then log "    (one run only: above ${long_s} s)"; break; fi
    done
  done
done

"$py" - "$out/meta.json" "$((  $(date +%s) - start ))" "$threads" "$reps" "$epochs" "$rounds" "$cpus" \
  "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" "${present[*]}" "$models" "${loads[*]}" \
  "$presets" <<'EOF'
import json, os, statistics, sys
p, dur, th, reps, ep, ro, cpus, head, ds, models, loads, presets = sys.argv[1:]
ld = [float(x) for x in loads.split()]
old = json.load(open(p)) if os.path.exists(p) else {}  # an earlier call measured the cells kept
ld += old.get("load_samples", [])
dur = int(dur) + old.get("duration_s", 0)
union = lambda a, b: b + [x for x in a if x not in b]  # the cells of both calls
ds = " ".join(union(old.get("datasets", []), ds.split()))
models = " ".join(union(old.get("models", []), models.split()))
load = f"min {min(ld):.2f}, median {statistics.median(ld):.2f}, max {max(ld):.2f}" if ld else ""
json.dump({"duration_s": int(dur), "threads": int(th), "reps": int(reps), "epochs": int(ep), "rounds": int(ro),
           "retexo_cpus": cpus, "head": head, "datasets": ds.split(), "models": models.split(), "load": load,
           "load_samples": ld, "presets": presets},
          open(p, "w"))
EOF
"$py" "$root/perf/peer/summarize.py" "$out" >/dev/null
log "done in $(( ($(date +%s) - start) / 60 )) min: $out/peer.md"
