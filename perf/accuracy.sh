#!/usr/bin/env bash
# Accuracy table of RETEXO and the standard trainer on the shared datasets (split
# random-paper), mean +- std over seeds, written as markdown and JSON.
#   perf/accuracy.sh [OUT_DIR]        (env: DATASETS, MODELS, SEEDS, NP, DATASET_DIR, MODE, RETEXO_PRESET)
# RANDOM_SPLIT="K V T" instead draws a new split for every seed, as the RETEXO paper's
# prototype does (PyG Planetoid(split='random'): K train nodes per class, V valid, T test;
# retexo_convert --random-split SEED), so the mean is over splits as well as seeds.
# PRESETS=none runs every trainer with retexo_mpi's defaults (no --config); EXTRA="..." adds
# options to every run (e.g. EXTRA="--normalize-features").
# Hyperparameters: mpi_scripts/presets/<dataset>-<model>.cfg when it exists, else
# <dataset>.cfg (chosen on validation accuracy, never on test); 2 layers / stages, hidden
# 256, 200 epochs / rounds per stage, one process.  RETEXO uses <dataset>-<model>-retexo.cfg
# instead where one exists (its own features or stage count), in a run of its own;
# RETEXO_PRESET=logits picks <dataset>-<model>-logits.cfg (the fully distributed variant):
#   RETEXO_PRESET=logits MODE=retexo DATASETS="cora citeseer" MODELS=gcn perf/accuracy.sh OUT
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/perf/results/accuracy}
datasets=${DATASETS:-"cora citeseer chameleon amazon-computers facebook"}
models=${MODELS:-"gcn sage gat"}
seeds=${SEEDS:-"1 2 3 4 5"}
np=${NP:-1}
dsdir=${DATASET_DIR:-$root/../shared/datasets}
build=${RETEXO_BUILD_DIR:-$root/build}
mkdir -p "$out"
split=${RANDOM_SPLIT:-}
if [[ -n $split ]]; then
  read -r per_class num_valid num_test <<<"$split"
  [[ -n ${num_test:-} ]] || { echo "accuracy.sh: RANDOM_SPLIT must be 'K V T', got '$split'" >&2; exit 1; }
fi
# run_one MODE CONFIG JSON: one run of retexo_mpi, skipped when JSON exists (uses $graph, $m, $s).
run_one() {
  [[ -f $3 ]] && return 0
  local cfg=()
  [[ ${PRESETS:-} == none ]] || cfg=(--config "$2")
  # shellcheck disable=SC2086 # EXTRA is a list of options
  "$root/mpi_scripts/retexo_run.sh" -np "$np" --data "$graph" --mode "$1" --model "$m" --seed "$s" \
    "${cfg[@]}" ${EXTRA:-} --log-every 1000 --metrics-out "$3" >/dev/null
  echo "done $ds $m $s $1"
}
for ds in $datasets; do
  graph=$out/$ds.h5
  [[ -n $split || -f $graph ]] || "$build/apps/retexo_convert" --ogb "$dsdir/$ds" --split random-paper --out "$graph" >/dev/null
  for m in $models; do
    for s in $seeds; do
      if [[ -n $split ]]; then
        graph=$out/$ds-split$s.h5
        [[ -f $graph ]] || "$build/apps/retexo_convert" --ogb "$dsdir/$ds" --random-split "$s" --train-per-class "$per_class" \
          --num-valid "$num_valid" --num-test "$num_test" --out "$graph" >/dev/null
      fi
      cfg=$root/mpi_scripts/presets/$ds-$m.cfg
      [[ -f $cfg ]] || cfg=$root/mpi_scripts/presets/$ds.cfg
      # A RETEXO-only preset (features, stages) runs the two trainers apart.
      rcfg=$root/mpi_scripts/presets/$ds-$m-${RETEXO_PRESET:-retexo}.cfg
      mode=${MODE:-both}
      if [[ -f $rcfg && $mode != standard && ${PRESETS:-} != none ]]; then
        run_one retexo "$rcfg" "$out/$ds-$m-$s.retexo.json"
        if [[ $mode == both ]]; then run_one standard "$cfg" "$out/$ds-$m-$s.json"; fi
      else
        run_one "$mode" "$cfg" "$out/$ds-$m-$s.json"
      fi
    done
  done
done
/usr/bin/python3 "$root/perf/summarize_accuracy.py" "$out" > "$out/accuracy.md"
cat "$out/accuracy.md"
