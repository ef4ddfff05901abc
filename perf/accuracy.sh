#!/usr/bin/env bash
# Accuracy of RETEXO against the standard trainer on the shared datasets, both with
# retexo_mpi's defaults (no preset), one process, mean +- std over seeds, written as markdown
# (OUT/accuracy.md) beside one metrics JSON per run.
#   perf/accuracy.sh [OUT_DIR]     (env: DATASETS, MODELS, SEEDS, MODE, RANDOM_SPLIT, EXTRA, DATASET_DIR)
# Split: the fixed `random-paper` split of ../shared/datasets, or with RANDOM_SPLIT="K V T" a
# new split for every seed (retexo_convert --random-split SEED: K train nodes per class, V
# valid, T test, as PyG Planetoid(split='random') draws them), so the mean is over splits as
# well as seeds: the RETEXO paper's protocol with its own counts ("40 280 2148" on cora,
# "56 336 2655" on citeseer), few labels with "5 500 1000".  MODE=retexo|standard runs one
# trainer (default: both, each in a run of its own).  EXTRA="..." adds options to every run,
# e.g. EXTRA="--normalize-features" or EXTRA="--variant logits" with MODE=retexo.
# Each run also leaves which test nodes it got right (OUT/*.test.json, from --predict-out), so
# the summary gives RETEXO's gap a 95% interval over seeds and test nodes (python3-numpy
# and python3-h5py, from cmake/install-deps.sh --perf; without them the gap has no interval).
#   RANDOM_SPLIT="5 500 1000" EXTRA="--normalize-features" DATASETS=cora MODELS=gcn SEEDS=1 perf/accuracy.sh OUT
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/perf/results/accuracy}
datasets=${DATASETS:-"cora citeseer chameleon amazon-computers facebook"}
models=${MODELS:-"gcn sage gat"}
seeds=${SEEDS:-"1 2 3 4 5"}
dsdir=${DATASET_DIR:-$root/../shared/datasets}
build=${RETEXO_BUILD_DIR:-$root/build}
mkdir -p "$out"
split=${RANDOM_SPLIT:-}
if [[ -n $split ]]; then
  read -r per_class num_valid num_test <<<"$split"
  [[ -n ${num_test:-} ]] || { echo "accuracy.sh: RANDOM_SPLIT must be 'K V T', got '$split'" >&2; exit 1; }
fi
modes=${MODE:-"retexo standard"}
for ds in $datasets; do
  for m in $models; do
    for s in $seeds; do
      graph=$out/$ds.h5
      if [[ -n $split ]]; then
        graph=$out/$ds-split$s.h5
        [[ -f $graph ]] || "$build/apps/retexo_convert" --ogb "$dsdir/$ds" --random-split "$s" --train-per-class "$per_class" \
          --num-valid "$num_valid" --num-test "$num_test" --out "$graph" >/dev/null
      else
        [[ -f $graph ]] || "$build/apps/retexo_convert" --ogb "$dsdir/$ds" --split random-paper --out "$graph" >/dev/null
      fi
      for mode in $modes; do
        json=$out/$ds-$m-$s.$mode.json
        [[ -f $json ]] && continue
        pred=$out/$ds-$m-$s.$mode.predictions.h5
        # shellcheck disable=SC2086 # EXTRA is a list of options
        "$root/mpi_scripts/retexo_run.sh" -np 1 --data "$graph" --mode "$mode" --model "$m" --seed "$s" \
          ${EXTRA:-} --log-every 1000 --predict-out "$pred" --metrics-out "$json" >/dev/null
        /usr/bin/python3 "$root/perf/summarize_accuracy.py" --test-outcomes "$graph" "$pred" "$json" "${json%.json}.test.json" ||
          echo "accuracy.sh: no test outcomes for $json (python3-numpy and python3-h5py are needed)" >&2
        rm -f "$pred"
        echo "done $ds $m $s $mode"
      done
    done
  done
done
/usr/bin/python3 "$root/perf/summarize_accuracy.py" "$out" > "$out/accuracy.md"
cat "$out/accuracy.md"
