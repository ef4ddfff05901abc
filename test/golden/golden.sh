#!/usr/bin/env bash
# Golden outputs for refactors: run a fixed matrix of retexo_mpi jobs with one build and keep
# what they write (metrics JSON, saved model, predictions), then run the same matrix with
# another build and require the same bits, wall times aside.
#
#   test/golden/golden.sh record  DIR [BUILD_DIR]   # outputs of BUILD_DIR (default build/) into DIR
#   test/golden/golden.sh compare DIR [BUILD_DIR]   # run again into DIR/candidate, compare with DIR
#   GOLDEN_ONLY=REGEX ...                           # only the runs whose names match (record and
#                                                   # compare with the same REGEX), e.g. 'standard|bns|both'
#
# The matrix: cora and citeseer x gcn/sage/sage-pool/gat x hidden/logits x fp32/bf16/int8
# x np 1 and 3 x transductive/inductive; --exchange-columns (gcn, sage); --deterministic;
# the standard and BNS trainers; per-stage options, mini-batches, patience, loss selection,
# no overlap; a partitioned directory of a generated graph; runs stopped (after a stage, and
# inside one by the wall-time limit) and resumed from their checkpoints.  About 40 min on
# 2 cores.  Needs ../shared/datasets (or RETEXO_DATASETS); installs Debian's python3-h5py.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
usage() {
  echo "usage: $0 record|compare DIR [BUILD_DIR]" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
build=$(cd "${3:-$root/build}" && pwd)
datasets=${RETEXO_DATASETS:-$root/../shared/datasets}
[[ -d $datasets/cora && -d $datasets/citeseer ]] || { echo "$0: no datasets in $datasets" >&2; exit 1; }
py=/usr/bin/python3
"$root/cmake/install-deps.sh" --golden
case $action in
  record) out=$dir ;;
  compare) out=$dir/candidate ;;
  *) usage ;;
esac
[[ $action == compare && ! -f $dir/runs.txt ]] && { echo "$0: $dir holds no recorded golden set" >&2; exit 1; }
rm -rf "$out/data" "$out/runs"
mkdir -p "$out/data" "$out/runs"

if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=2
B=$build/apps

# The data, made with the build under test (the tools are part of what is compared).
(
  cd "$out/data"
  for d in cora citeseer; do
    "$B/retexo_convert" --ogb "$datasets/$d" --split random-paper --features dense --out $d.h5 >/dev/null
  done
  "$B/retexo_generate" --out csbm.h5 --nodes 3000 --classes 5 --features 24 --avg-degree 8 --seed 3 >/dev/null
  "$B/retexo_partition" --graph csbm.h5 --parts 3 --method metis --out csbm3 >/dev/null
)

# run NAME NP ARGS...: one job in runs/NAME (paths relative, so the recorded configuration
# is the same wherever DIR is).
runs=()
wanted() { [[ -z ${GOLDEN_ONLY:-} || $1 =~ $GOLDEN_ONLY ]]; }
run() {
  local name=$1 np=$2
  shift 2
  wanted "$name" || return 0
  runs+=("$name")
  mkdir -p "$out/runs/$name"
  (
    cd "$out/runs/$name"
    if ! mpirun -np "$np" --bind-to none "$B/retexo_mpi" "$@" --log-every 1000 >log.txt 2>&1; then
      echo "$0: $name failed:" >&2
      tail -5 log.txt >&2
      exit 1
    fi
  )
}
outputs=(--metrics-out metrics.json --save-model model.h5 --predict-out pred.h5)
small=(--rounds 4,3,3 --hidden 16 --heads 2 --lr 0.01 --dropout 0.5)

for d in cora citeseer; do
  for model in gcn sage sage-pool gat; do
    for variant in hidden logits; do
      for prec in fp32 bf16 int8; do
        for np in 1 3; do
          for setting in transductive inductive; do
            extra=()
            [[ $setting == inductive ]] && extra=(--inductive)
            run "$d-$model-$variant-$prec-np$np-$setting" $np --data ../../data/$d.h5 --partition random \
              --model $model --variant $variant --exchange-precision $prec --mode retexo "${small[@]}" "${extra[@]}" "${outputs[@]}"
          done
        done
      done
    done
  done
  for model in gcn sage; do
    for prec in fp32 bf16 int8; do
      for setting in transductive inductive; do
        extra=()
        [[ $setting == inductive ]] && extra=(--inductive)
        run "$d-$model-columns-$prec-np3-$setting" 3 --data ../../data/$d.h5 --partition metis --model $model \
          --exchange-precision $prec --exchange-columns 100 --mode retexo "${small[@]}" "${extra[@]}" "${outputs[@]}"
      done
    done
  done
done

for model in gcn sage sage-pool gat; do
  for np in 1 3; do
    run "cora-$model-deterministic-np$np" $np --data ../../data/cora.h5 --partition random --model $model \
      --deterministic --mode retexo "${small[@]}" "${outputs[@]}"
    for setting in transductive inductive; do
      extra=()
      [[ $setting == inductive ]] && extra=(--inductive)
      run "cora-$model-standard-np$np-$setting" $np --data ../../data/cora.h5 --partition random --model $model \
        --mode standard --epochs 5 --std-hidden 16 --heads 2 "${extra[@]}" "${outputs[@]}"
    done
    run "cora-$model-standard-deterministic-np$np" $np --data ../../data/cora.h5 --partition random \
      --model $model --mode standard --epochs 4 --std-hidden 16 --heads 2 --deterministic "${outputs[@]}"
  done
done
run cora-gcn-bns-np3 3 --data ../../data/cora.h5 --partition random --mode bns --bns-p 0.3 --epochs 5 \
  --std-hidden 16 "${outputs[@]}"
run cora-sage-both-np3 3 --data ../../data/cora.h5 --partition metis --mode retexo,standard,bns --model sage \
  --epochs 4 --eval-every 2 --std-lr 0.02 --std-dropout 0.2 --std-weight-decay 1e-3 --std-optimizer adamw \
  "${small[@]}" "${outputs[@]}"
run cora-gcn-options-np3 3 --data ../../data/cora.h5 --partition random --model gcn --stages 3 \
  --rounds 6,4,3 --hidden 16,12,8 --lr 0.01,0.02,0.005 --dropout 0.5,0.3,0 --weight-decay 5e-4,0,1e-3 \
  --optimizer adam,adamw,sgd --norm layer,none,layer --lr-schedule linear,constant,linear --select loss \
  --batch-size 100 --patience 2 --track-test --no-overlap --normalize-features "${outputs[@]}"
run cora-gat-options-np3 3 --data ../../data/cora.h5 --partition random --model gat --heads 4 --stages 2 --hidden 16,8 \
  --rounds 5 --batch-size 120 --select loss --norm none --no-overlap --deterministic --mode retexo "${outputs[@]}"
run cora-sagepool-logits3-np3 3 --data ../../data/cora.h5 --partition blocks --model sage-pool --variant logits \
  --stages 3 --rounds 3 --hidden 12 --mode retexo "${outputs[@]}"
run csbm3-gcn-dir-np3 3 --data ../../data/csbm3 --model gcn --mode both --epochs 5 "${small[@]}" \
  "${outputs[@]}"
run csbm3-gat-dir-np3-int8 3 --data ../../data/csbm3 --model gat --exchange-precision int8 --inductive \
  --mode retexo "${small[@]}" "${outputs[@]}"

# Checkpoints: stopped after stage 0, and inside stage 0 by the wall-time limit, then
# resumed; the resumed run's outputs are compared.
for model in gcn gat; do
  for how in stage round; do
    name=cora-$model-resume-$how-np3
    wanted "$name" || continue
    ck=(--data ../../data/cora.h5 --partition random --model $model --checkpoint-dir ckpt
      --checkpoint-every-min 0 --mode retexo "${small[@]}")
    [[ $how == stage ]] && first=(--stop-after-stage 0) || first=(--max-hours 1e-9)
    run "$name" 3 "${ck[@]}" "${first[@]}"
    mv "$out/runs/$name/log.txt" "$out/runs/$name/log-first.txt"
    runs=("${runs[@]:0:${#runs[@]}-1}")
    run "$name" 3 "${ck[@]}" --resume "${outputs[@]}"
  done
done

printf '%s\n' "${runs[@]}" >"$out/runs.txt"
echo "$action: ${#runs[@]} runs in $out/runs"
if [[ $action == compare ]]; then
  "$py" "$root/test/golden/compare.py" "$dir" "$out"
fi
