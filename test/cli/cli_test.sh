#!/usr/bin/env bash
# Command-line behaviour of the retexo tools: --help, exit codes, error messages that name
# the file or option, and no half-written output after a failure.
# Usage: cli_test.sh APPS_DIR MPIEXEC DATASETS_DIR
set -u
apps=$1
mpiexec=$2
datasets=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect CODE REGEX -- command...: exit status CODE and REGEX found in stdout+stderr.
expect() {
  local code=$1 regex=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code ]] || ! grep -qE -- "$regex" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (expected $code), output:"
    sed 's/^/    /' <<<"$out" | head -20
    echo "    (expected to match: $regex)"
    failures=$((failures + 1))
  else
    echo "ok: $*"
  fi
}
absent() {
  if [[ -e $1 ]]; then echo "FAIL: $1 exists after a failed run"; failures=$((failures + 1)); fi
}

for tool in retexo_generate retexo_convert retexo_partition retexo_shard; do
  expect 0 "Usage: $tool" "$apps/$tool" --help
  expect 0 "$tool \(retexo\) [0-9]+\.[0-9]+" "$apps/$tool" --version
  expect 2 "unrecognised option|unrecognized option" "$apps/$tool" --no-such-option
  expect 2 "unexpected argument 'stray' \\(options start with --\\)" "$apps/$tool" stray
done
expect 0 "Usage: mpirun -np P retexo_mpi" "$apps/retexo_mpi" --help

# generate
expect 2 "--out.*(required|missing)" "$apps/retexo_generate"
expect 1 "--homophily must be in \[0, 1\]" "$apps/retexo_generate" --out "$tmp/g.h5" --homophily 2
absent "$tmp/g.h5"
expect 1 "--classes must be at least 2, got 1" "$apps/retexo_generate" --out "$tmp/g.h5" --classes 1
absent "$tmp/g.h5"
expect 1 "--classes must be at most --nodes \(3\), got 4" "$apps/retexo_generate" --out "$tmp/g.h5" --nodes 3 --classes 4
absent "$tmp/g.h5"
expect 2 "nodes" "$apps/retexo_generate" --out "$tmp/g.h5" --nodes abc
expect 1 "--feature-signal must be a finite number >= 0, got inf" "$apps/retexo_generate" --out "$tmp/g.h5" --feature-signal inf
expect 1 "--power-law must be 0 \(off\) or a finite exponent > 2, got nan" "$apps/retexo_generate" --out "$tmp/g.h5" --power-law nan
absent "$tmp/g.h5"
expect 2 "--seed: '-1' is not a seed" "$apps/retexo_generate" --out "$tmp/g.h5" --seed -1
expect 2 "--seed: '18446744073709551616' is not a seed" "$apps/retexo_generate" --out "$tmp/g.h5" --seed 18446744073709551616
absent "$tmp/g.h5"
expect 1 "cannot create HDF5 file" "$apps/retexo_generate" --out "$tmp/nodir/g.h5" --nodes 100
expect 0 "wrote .*g.h5: 2000 nodes" "$apps/retexo_generate" --out "$tmp/g.h5" --nodes 2000 --features 8 --classes 3 --seed 5

# convert
expect 1 "nonexistent: not a directory" "$apps/retexo_convert" --ogb "$tmp/nonexistent" --out "$tmp/c.h5"
absent "$tmp/c.h5"
mkdir -p "$tmp/badogb/raw"
expect 1 "num-node-list.csv.gz: missing" "$apps/retexo_convert" --ogb "$tmp/badogb" --out "$tmp/c.h5"
absent "$tmp/c.h5"
expect 1 "--directed must be true or false" "$apps/retexo_convert" --ogb "$tmp/badogb" --out "$tmp/c.h5" --directed maybe
expect 1 "--split and --random-split exclude each other" "$apps/retexo_convert" --ogb "$tmp/badogb" --out "$tmp/c.h5" --split s --random-split 1
expect 1 "--num-valid needs --random-split" "$apps/retexo_convert" --ogb "$tmp/badogb" --out "$tmp/c.h5" --num-valid 10
expect 1 "--num-classes must be at least 2, got 0" "$apps/retexo_convert" --ogb "$tmp/badogb" --out "$tmp/c.h5" --num-classes 0
expect 1 "--out $tmp/badogb/raw/x.h5 is inside the input directory --ogb" "$apps/retexo_convert" --ogb "$tmp/badogb" --out "$tmp/badogb/raw/x.h5"
# The OGB binary layout (raw/data.npz), written by Python's zipfile as numpy would write it.
if command -v python3 >/dev/null; then
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  python3 "$here/make_npz_dataset.py" "$tmp/npz"
  expect 0 "6 nodes, 5 edge lines -> 10 CSR in-edges.*2 features \(dense.*2 classes \(2 nodes unlabelled\), split s 2/1/1" "$apps/retexo_convert" --ogb "$tmp/npz" --out "$tmp/npz.h5"
  python3 "$here/make_npz_dataset.py" "$tmp/npz-nan" --nan-train
  expect 1 "train.csv.gz: node 1 has no label \(NaN in .*node-label.npz\)" "$apps/retexo_convert" --ogb "$tmp/npz-nan" --out "$tmp/npz-nan.h5"
  absent "$tmp/npz-nan.h5"
else
  echo "SKIPPED: binary-layout check (no python3)"
fi

# partition
expect 1 "missing.h5: cannot open" "$apps/retexo_partition" --graph "$tmp/missing.h5" --parts 2 --out "$tmp/p"
absent "$tmp/p/manifest.json"
expect 2 "unknown partition method 'spectral'" "$apps/retexo_partition" --graph "$tmp/g.h5" --parts 2 --method spectral --out "$tmp/p"
expect 1 "--parts must be positive" "$apps/retexo_partition" --graph "$tmp/g.h5" --parts 0 --out "$tmp/p"
"$apps/retexo_partition" --graph "$tmp/g.h5" --parts 0 --out "$tmp/p" 2>&1 | grep -q "MPI_ABORT\|aborting" &&
  { echo "FAIL: an option error of retexo_partition aborts the job"; failures=$((failures + 1)); }
printf '0\n1\n' >"$tmp/short.txt"
expect 1 "short.txt: 2 lines, but the graph has 2000 nodes" "$apps/retexo_partition" --graph "$tmp/g.h5" --parts 2 --method given --assignment "$tmp/short.txt" --out "$tmp/p"
absent "$tmp/p/manifest.json"
expect 0 "wrote .*tiny.h5: 2 nodes" "$apps/retexo_generate" --out "$tmp/tiny.h5" --nodes 2 --classes 2 --avg-degree 1
expect 1 "partition 2 of 3 is empty" "$apps/retexo_partition" --graph "$tmp/tiny.h5" --parts 3 --method blocks --out "$tmp/p"
absent "$tmp/p/manifest.json"
expect 0 "edge cut" "$apps/retexo_partition" --graph "$tmp/g.h5" --parts 2 --method metis --out "$tmp/p2"
expect 0 "edge cut" "$apps/retexo_partition" --graph "$tmp/g.h5" --parts 3 --method random --out "$tmp/p3"
expect 0 "balance" "$apps/retexo_partition" --graph "$tmp/g.h5" --parts 2 --method given --assignment "$tmp/p2/assignment.txt" --out "$tmp/p2b"
if ! cmp -s "$tmp/p2/assignment.txt" "$tmp/p2b/assignment.txt"; then echo "FAIL: given assignment did not round-trip"; failures=$((failures + 1)); fi
# Under mpirun each rank reads its slice and writes its own part: the same partitions as one
# process makes (assignment, manifest), and every rank fails together on bad input.
for m in random metis blocks; do
  "$apps/retexo_partition" --graph "$tmp/g.h5" --parts 3 --method $m --out "$tmp/s-$m" >/dev/null
  expect 0 "into 3 parts with $m.* on 3 ranks" "$mpiexec" -n 3 "$apps/retexo_partition" --graph "$tmp/g.h5" --method $m --out "$tmp/d-$m"
  cmp -s "$tmp/s-$m/assignment.txt" "$tmp/d-$m/assignment.txt" || { echo "FAIL: mpirun retexo_partition --method $m: another assignment"; failures=$((failures + 1)); }
  cmp -s <(grep -v '"source"' "$tmp/s-$m/manifest.json") <(grep -v '"source"' "$tmp/d-$m/manifest.json") || { echo "FAIL: mpirun retexo_partition --method $m: another manifest"; failures=$((failures + 1)); }
done
ls "$tmp/d-random" | grep -q piece && { echo "FAIL: assignment pieces left behind"; failures=$((failures + 1)); }
expect_mpi_early() { local out; out=$(timeout 60 "$@" 2>&1); local rc=$?; if [[ $rc -eq 0 || $rc -eq 124 ]] || ! grep -qE -- "$regex" <<<"$out"; then echo "FAIL: $*"; failures=$((failures + 1)); else echo "ok: $*"; fi; }
regex="--parts 5: with mpirun -np 2 each rank writes one part" expect_mpi_early "$mpiexec" -n 2 "$apps/retexo_partition" --graph "$tmp/g.h5" --parts 5 --out "$tmp/d5"
regex="short.txt: 2 lines, but the graph has 2000 nodes" expect_mpi_early "$mpiexec" -n 2 "$apps/retexo_partition" --graph "$tmp/g.h5" --method given --assignment "$tmp/short.txt" --out "$tmp/d5"
absent "$tmp/d5/manifest.json"

# retexo_mpi: wrong rank count, missing data; every rank exits non-zero, never hangs.
expect_mpi() {
  local code=$1 regex=$2
  shift 2
  local out rc
  out=$(timeout 120 "$@" 2>&1)
  rc=$?
  # forbid=REGEX: output that must not appear (an error every rank raises together ends the
  # job without MPI_Abort).
  if [[ $rc -ne $code ]] || ! grep -qE -- "$regex" <<<"$out" || { [[ -n ${forbid:-} ]] && grep -qE -- "$forbid" <<<"$out"; }; then
    echo "FAIL: $* -> exit $rc (expected $code), output:"; sed 's/^/    /' <<<"$out" | head -20
    failures=$((failures + 1))
  else
    echo "ok: $*"
  fi
}
expect_mpi 1 "holds 3 partitions but the job has 2 ranks" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/p3"
expect_mpi 1 "nothere.h5: cannot open" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/nothere.h5"
expect 0 "hash [0-9a-f]{16}" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/p2" --mode stats
expect 0 "hash [0-9a-f]{16}" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/g.h5" --partition metis --mode stats

# retexo_mpi training runs on a small graph.
expect 0 "wrote" "$apps/retexo_generate" --out "$tmp/small.h5" --nodes 600 --features 12 --classes 3 --avg-degree 6 --seed 2
small=(--data "$tmp/small.h5" --rounds 4,3,3 --epochs 3 --hidden 16 --std-hidden 16 --log-every 1)
expect_mpi 2 "--mode: unknown mode 'fast' \(expected retexo, standard, bns or stats\)" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode fast
expect_mpi 2 "--seed: '-1' is not a seed" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --seed -1
expect_mpi 1 "--rounds: 2 values for 3 stages" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/small.h5" --rounds 1,2
expect_mpi 1 "--patience: 2 values for 3 stages" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/small.h5" --patience 1,2
expect_mpi 1 "--patience: stage 1 must be >= 0, got -1" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --patience 5,-1,0
expect_mpi 1 "--layers must be at least 1, got 0" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode standard --layers 0
expect_mpi 2 "--exchange-precision: unknown exchange precision 'fp8' \(expected fp32, bf16 or int8\)" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --exchange-precision fp8
expect_mpi 2 "--norm: unknown normalisation 'batch' \(expected layer or none\)" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --norm batch
expect_mpi 2 "--lr-schedule: unknown learning-rate schedule 'cosine' \(expected constant or linear\)" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --lr-schedule constant,constant,cosine
expect_mpi 2 "--select: unknown selection 'f1' \(expected accuracy or loss\)" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --select f1
expect_mpi 2 "--model: unknown model 'gin'" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --model gin
expect_mpi 2 "unexpected argument 'mode=standard'" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" mode=standard
expect_mpi 2 "--data: empty path" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "" --rounds 2
forbid="MPI_ABORT|aborting the job" expect_mpi 1 "--cross-fit 100000: the graph has [0-9]+ training nodes, fewer than the folds" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --cross-fit 100000
expect 0 "wrote" "$apps/retexo_generate" --out "$tmp/two.h5" --nodes 2 --features 3 --classes 2 --avg-degree 1 --seed 1
forbid="MPI_ABORT|aborting the job" expect_mpi 1 "3 parts for a graph of 2 nodes would leave a part empty" "$mpiexec" -n 3 "$apps/retexo_mpi" --data "$tmp/two.h5" --partition scotch
expect_mpi 1 "--kill-rank 5: the job has 2 ranks \(0-1\)" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --kill-rank 5
expect_mpi 1 "--mode: stats runs alone" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode stats,retexo
expect_mpi 1 "--checkpoint-dir and --resume apply to --mode retexo only" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode standard --checkpoint-dir "$tmp/ck"
expect_mpi 1 "--resume needs --checkpoint-dir" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode retexo --resume
expect_mpi 1 "--config: cannot open" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --config "$tmp/none.cfg"
# Option values the library checks before loading, named as given.
expect_mpi 1 "--heads must be at least 1, got 0" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --model gat --heads 0
expect_mpi 1 "--heads must be at least 1, got 0" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode standard --model gat --heads 0
expect_mpi 1 "--weight-decay: stage 0 must be >= 0, got -1" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --weight-decay -1
expect_mpi 1 "--std-lr must be positive, got -1" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode standard --std-lr -1
expect_mpi 1 "--std-dropout must be in \[0, 1\), got 1" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode standard --std-dropout 1
# ... whether their mode runs or not; how they go with the model, only where it runs.
expect_mpi 1 "--std-lr must be positive, got nan" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode retexo --std-lr nan
expect_mpi 1 "--bns-p must be in \(0, 1\], got 2" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode standard --bns-p 2
expect_mpi 1 "--search-dropout: every rate must be in \[0, 1\), got 1" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode standard --search-dropout 0.5,1
expect_mpi 0 "accuracy test" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/small.h5" --epochs 2 --mode standard --model gat --heads 3 --std-hidden 48
expect_mpi 1 "--stages must be in \[1, 1000\], got 1000000000" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/small.h5" --stages 1000000000
expect_mpi 1 "--cross-fit 100000: the graph has [0-9]+ training nodes, fewer than the folds" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --cross-fit 100000
expect_mpi 1 "--config $tmp: is a directory" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --config "$tmp"
# A config file's bad line names the file; a section of the defaults table is no option.
printf '[sage]\nsearch-weight-decay = 0\n' >"$tmp/section.cfg"
expect_mpi 1 "--config $tmp/section.cfg: unrecognised option 'sage.search-weight-decay'" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --config "$tmp/section.cfg"
printf 'lr 0.1\n' >"$tmp/noeq.cfg"
expect_mpi 1 "--config $tmp/noeq.cfg: .*lr 0.1" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --config "$tmp/noeq.cfg"
expect_mpi 2 "--rounds: '4,3,' ends without a value" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/small.h5" --rounds 4,3,
expect_mpi 2 "--lr: '0.1x' is not a valid value \\(see retexo_mpi --help\\)" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/small.h5" --lr 0.01,0.1x,0.01
expect_mpi 1 "--mode retexo,retexo: retexo is named twice" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode retexo,retexo
expect_mpi 1 "--stop-after-stage 9: there are 3 stages" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --stop-after-stage 9 --checkpoint-dir "$tmp/ck9"
expect_mpi 1 "--stop-after-stage needs --checkpoint-dir" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --stop-after-stage 1
expect_mpi 2 "label-head" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --label-head maybe
expect_mpi 1 "--max-hours must be >= 0, got nan" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --max-hours nan
# A model no machine holds is refused before it is allocated (not SIGKILLed by the kernel).
forbid="MPI_ABORT|aborting the job" expect_mpi 1 "--hidden 1000000000: RETEXO's stage 1 \(1000000000 inputs, 3 classes, [0-9]+ rows on this rank\) needs at least [0-9.]+ GB on rank [01], but [0-9.]+ GB of memory is available to the 2 ranks (on its node|in its memory cgroup [^ ]+)" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/small.h5" --hidden 1000000000
forbid="MPI_ABORT|aborting the job" expect_mpi 1 "--layers 100000000 and --std-hidden 256: the standard gcn model \(12 features, 3 classes, 600 rows on this rank\) needs at least" "$mpiexec" -n 1 "$apps/retexo_mpi" --data "$tmp/small.h5" --mode standard --layers 100000000
# Outputs are checked before any work: a missing directory, a directory, the input, each other.
out=$(timeout 120 "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --metrics-out "$tmp/nodir/m.json" 2>&1)
if [[ $? -eq 0 ]] || ! grep -q -- "--metrics-out $tmp/nodir/m.json: the directory $tmp/nodir does not exist" <<<"$out" ||
  grep -q "retexo   stage" <<<"$out"; then
  echo "FAIL: --metrics-out in a missing directory is not refused before training:"; sed 's/^/    /' <<<"$out" | head
  failures=$((failures + 1))
fi
mkdir -p "$tmp/adir"
expect_mpi 1 "--predict-out $tmp/adir: is a directory, not a file" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --predict-out "$tmp/adir"
ls "$tmp"/adir.tmp.* >/dev/null 2>&1 && { echo "FAIL: a temporary predictions file is left"; failures=$((failures + 1)); }
cp "$tmp/small.h5" "$tmp/victim.h5"
expect_mpi 1 "--save-model and --data name the same path" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/victim.h5" --rounds 2 --save-model "$tmp/victim.h5"
cmp -s "$tmp/small.h5" "$tmp/victim.h5" || { echo "FAIL: --save-model overwrote its input"; failures=$((failures + 1)); }
expect_mpi 1 "--metrics-out and --predict-out name the same path" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --metrics-out "$tmp/same" --predict-out "$tmp/same"
# Nor into a directory it reads, nor over its --config file.
expect_mpi 1 "--save-model .*/p2/part1.h5: inside --data .*/p2, which the run reads" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/p2" --rounds 2 --save-model "$tmp/p2/part1.h5"
printf 'epochs = 2\n' >"$tmp/run2.cfg"
expect_mpi 1 "--metrics-out and --config name the same path" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --config "$tmp/run2.cfg" --metrics-out "$tmp/run2.cfg"
expect 0 "^epochs = 2$" cat "$tmp/run2.cfg"
# Mini-batches of GAT and SAGE-pool with a rank (or the job) left without rows in a step.
for m in gat sage-pool; do
  for np in 1 2; do
    expect 0 "bytes total" "$mpiexec" -n $np "$apps/retexo_mpi" "${small[@]}" --model $m --heads 2 --batch-size 1 --mode retexo
  done
done
# Without --checkpoint-dir, SIGTERM ends a run at once.
start=$SECONDS
timeout -k 30 2 "$apps/retexo_mpi" --data "$tmp/small.h5" --hidden 16 --mode standard --epochs 1000000 >/dev/null 2>&1
rc=$?
if [[ $rc -ne 124 ]] || ((SECONDS - start > 20)); then
  echo "FAIL: SIGTERM without --checkpoint-dir: exit $rc after $((SECONDS - start)) s"; failures=$((failures + 1))
fi
expect 0 "oneDNN: 2\.[0-9]+\.[0-9]+" "$apps/retexo_mpi" --version
expect 0 "bytes total" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode both --metrics-out "$tmp/m.json" \
  --save-model "$tmp/model.h5" --predict-out "$tmp/pred.h5"
expect 0 "bytes total" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --select loss --lr-schedule linear,constant,constant \
  --metrics-out "$tmp/ml.json"
grep -q '"valid_loss"' "$tmp/ml.json" || { echo "FAIL: --select loss: no valid_loss in the history"; failures=$((failures + 1)); }
for key in '"mode": "both"' '"runs"' '"accuracy"' '"bytes"' '"halo_forward"' '"time_s"' '"stages"' '"ranks": 2'; do
  grep -q "$key" "$tmp/m.json" || { echo "FAIL: metrics JSON lacks $key"; failures=$((failures + 1)); }
done
# The per-stage defaults used are in the metrics, as lists (train::default_stages).
python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))
c = (m["runs"][0] if "runs" in m else m)["config"]
assert c["dropout"] == [0.5, 0.5, 0.8] and c["patience"] == [50, 50, 0], (c["dropout"], c["patience"])' "$tmp/m.json" ||
  { echo "FAIL: metrics config lacks the default dropout and patience per stage"; failures=$((failures + 1)); }
# The load's time and bytes: the graph file's rows went to their ranks (setup bytes).
python3 -c 'import json, sys
l = json.load(open(sys.argv[1]))["load"]
assert l["time_s"] > 0 and l["bytes"]["setup"] > 0 and l["bytes"]["total"] >= l["max_rank_bytes"] > 0, l' "$tmp/m.json" ||
  { echo "FAIL: metrics lack the load time and bytes"; failures=$((failures + 1)); }
for f in model.h5 pred.h5; do [[ -s $tmp/$f ]] || { echo "FAIL: $f not written"; failures=$((failures + 1)); }; done
if ls "$tmp" | grep -q "\.tmp\."; then echo "FAIL: temporary files left behind"; failures=$((failures + 1)); fi
# A checkpoint damaged on one rank: every rank exits non-zero, naming the file, and never
# hangs (expect_mpi's timeout); a previous file that is not one does not block --resume.
h5py_python=
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import h5py' 2>/dev/null; then h5py_python=$py; break; fi
done
if [[ -n $h5py_python ]]; then
  ck=(--mode retexo --checkpoint-dir "$tmp/ck-bad")
  expect 0 "stopped after .* with a checkpoint in" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --mode retexo \
    --checkpoint-dir "$tmp/ck-ok" --stop-after-stage 1
  for edit in stage=99 stage=1 stage=-1 step=1000 seq=1 best_stage=50; do
    rm -rf "$tmp/ck-bad" && cp -r "$tmp/ck-ok" "$tmp/ck-bad"
    "$h5py_python" -c 'import h5py, sys; h5py.File(sys.argv[1], "r+").attrs[sys.argv[2]] = int(sys.argv[3])' \
      "$tmp/ck-bad/ckpt.rank1.h5" "${edit%%=*}" "${edit#*=}"
    expect_mpi 1 "ck-bad/ckpt.rank1.h5" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" "${ck[@]}" --resume
  done
  rm -rf "$tmp/ck-bad" && cp -r "$tmp/ck-ok" "$tmp/ck-bad"
  "$h5py_python" -c 'import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    h = f["inputs/h"][:1]
    del f["inputs/h"]
    f["inputs/h"] = h' "$tmp/ck-bad/ckpt.rank1.h5"
  expect_mpi 1 "ck-bad/ckpt.rank1.h5: inputs/h is 1 x" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" "${ck[@]}" --resume
  rm -rf "$tmp/ck-bad" && cp -r "$tmp/ck-ok" "$tmp/ck-bad"
  rm "$tmp/ck-bad/ckpt.rank1.h5_prev" && mkdir "$tmp/ck-bad/ckpt.rank1.h5_prev"
  expect 0 "bytes total" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" "${ck[@]}" --resume
else
  echo "SKIPPED: damaged-checkpoint checks (no python3 with h5py)"
fi
# Owner shards: two owners write theirs from their own rows (each lists only the edges that
# touch its nodes, the shared edge by one of them), and the ranks train from them; bad rows
# are refused naming the file and line, and nothing is written.
printf '0,0,train,1,0\n1,1,train,0,1\n2,0,valid,1,1\n' >"$tmp/n0.csv"
printf '3,1,test,0,1\n4,,none,1,0\n5,0,test,0.5,0.5\n' >"$tmp/n1.csv"
printf '0,1\n1,2\n2,3\n' >"$tmp/e0.csv"
printf '3,4\n4,5\n5,0\n' >"$tmp/e1.csv"
mkdir -p "$tmp/owners"
expect 0 "wrote .*shard0.h5: 3 nodes, 2 features \(dense\), 3 edges" "$apps/retexo_shard" --nodes "$tmp/n0.csv" --edges "$tmp/e0.csv" --num-classes 2 --out "$tmp/owners/shard0.h5"
expect 0 "wrote .*shard1.h5: 3 nodes" "$apps/retexo_shard" --nodes "$tmp/n1.csv" --edges "$tmp/e1.csv" --num-classes 2 --out "$tmp/owners/shard1.h5"
expect 0 "bytes total" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/owners" --rounds 3 --hidden 8 --mode both --epochs 2
expect_mpi 1 "holds .*shard1.h5, more shards than the job's 1 ranks" "$mpiexec" -n 1 "$apps/retexo_mpi" --data "$tmp/owners" --rounds 3
expect_mpi 1 "shard2.h5 is missing" "$mpiexec" -n 3 "$apps/retexo_mpi" --data "$tmp/owners" --mode stats
# A self loop in an owner's edges is dropped on loading, as retexo_convert drops it: the same
# 12 in-edges; a node listed twice is refused.
mkdir -p "$tmp/owners-loop" && cp "$tmp/owners/shard1.h5" "$tmp/owners-loop/"
printf '0,1\n1,2\n2,2\n2,3\n' >"$tmp/e0-loop.csv"
expect 0 "wrote" "$apps/retexo_shard" --nodes "$tmp/n0.csv" --edges "$tmp/e0-loop.csv" --num-classes 2 --out "$tmp/owners-loop/shard0.h5"
expect 0 " all +6 +[0-9]+ +12 " "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/owners-loop" --mode stats
printf '0,0,train,1,0\n1,1,train,0,1\n0,0,valid,1,1\n' >"$tmp/twice.csv"
expect 1 "twice.csv: node 0 is listed twice" "$apps/retexo_shard" --nodes "$tmp/twice.csv" --edges "$tmp/e0.csv" --num-classes 2 --out "$tmp/bad.h5"
printf '0,0,train,1,0\n1,1,valid,0\n' >"$tmp/bad.csv"
expect 1 "bad.csv:2: 1 features, the first line has 2" "$apps/retexo_shard" --nodes "$tmp/bad.csv" --edges "$tmp/e0.csv" --num-classes 2 --out "$tmp/bad.h5"
absent "$tmp/bad.h5"
printf '0,,train,1,0\n' >"$tmp/nolabel.csv"
expect 1 "nolabel.csv:1: a node in the train split needs a label" "$apps/retexo_shard" --nodes "$tmp/nolabel.csv" --edges "$tmp/e0.csv" --num-classes 2 --out "$tmp/bad.h5"
printf '0,0,holdout,1,0\n' >"$tmp/split.csv"
expect 1 "split.csv:1: split 'holdout' is not train, valid, test or none" "$apps/retexo_shard" --nodes "$tmp/split.csv" --edges "$tmp/e0.csv" --num-classes 2 --out "$tmp/bad.h5"
printf '0,1,2\n' >"$tmp/edge3.csv"
expect 1 "edge3.csv:1: expected src,dst" "$apps/retexo_shard" --nodes "$tmp/n0.csv" --edges "$tmp/edge3.csv" --num-classes 2 --out "$tmp/bad.h5"
expect 1 "give --nodes, --edges and --num-classes" "$apps/retexo_shard" --nodes "$tmp/n0.csv" --out "$tmp/bad.h5"
expect 1 "--nodes is for an owner's rows, not with --graph" "$apps/retexo_shard" --graph "$tmp/small.h5" --parts 2 --nodes "$tmp/n0.csv" --out "$tmp/o2"
absent "$tmp/bad.h5"
expect 0 "wrote 2 owner shards" "$apps/retexo_shard" --graph "$tmp/small.h5" --parts 2 --method metis --out "$tmp/o2"
expect 0 "hash [0-9a-f]{16}" "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/o2" --mode stats
# --skip is on by default, --skip=false turns it off, and it is off by default where it cannot
# apply (the logits variant's GAT); asked for there, it is refused.  A later SAGE stage reads the
# node's own embedding only without --skip, or with --own-embedding.  --neighbour-offset is off
# by default and applies to sage only.
config_of() { /usr/bin/python3 -c "import json, sys; c = json.load(open(sys.argv[1]))['config']; print(c['skip'], c['own-embedding'], c['neighbour-offset'])" "$1"; }
for args in "True False False:--model sage" "False True False:--model sage --skip=false" \
  "True True False:--model sage --own-embedding" "False True False:--variant logits --model gat --heads 2" \
  "True False True:--model sage --neighbour-offset" "True False False:--model gcn --neighbour-offset"; do
  want=${args%%:*}
  read -ra extra <<<"${args#*:}"
  rm -f "$tmp/skip.json"
  "$mpiexec" -n 1 "$apps/retexo_mpi" "${small[@]}" --mode retexo "${extra[@]}" --metrics-out "$tmp/skip.json" >/dev/null 2>&1
  got=$(config_of "$tmp/skip.json" 2>/dev/null)
  if [[ $got != "$want" ]]; then echo "FAIL: skip, own-embedding, neighbour-offset with '${extra[*]}' are '$got', expected $want"; failures=$((failures + 1)); else echo "ok: skip, own-embedding, neighbour-offset $want with '${extra[*]}'"; fi
done
expect_mpi 1 "--skip with --variant logits needs gcn or sage" "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --variant logits --model gat --heads 2 --skip
# The axes searched by default are the model's in data/defaults.cfg: GCN and GAT stages search
# LayerNorm, GraphSAGE stages weight decay 0 too; --norm or --weight-decay alone is the value
# used; an axis given is searched for every model.
axes_of() { /usr/bin/python3 -c "import json, sys; c = json.load(open(sys.argv[1]))['config']; print(','.join(c['search-norm']) + '/' + ','.join(map(str, c['search-weight-decay'])))" "$1"; }
for args in "none,layer/0.0005,0.005:" "none,layer/0.0005,0.005:--model gat --heads 2" "/0.0005,0.005:--norm layer" \
  "/0.0,0.0005,0.005:--model sage" "layer,none/0.0,0.0005,0.005:--model sage --search-norm layer,none" \
  "/:--model sage --weight-decay 1e-3" "none,layer/0.01,0.0:--search-weight-decay 1e-2,0"; do
  want=${args%%:*}
  read -ra extra <<<"${args#*:}"
  rm -f "$tmp/norm.json"
  "$mpiexec" -n 1 "$apps/retexo_mpi" "${small[@]}" --mode retexo "${extra[@]}" --metrics-out "$tmp/norm.json" >/dev/null 2>&1
  got=$(axes_of "$tmp/norm.json" 2>/dev/null || echo "no metrics")
  if [[ $got != "$want" ]]; then echo "FAIL: search-norm/search-weight-decay with '${extra[*]}' are '$got', expected '$want'"; failures=$((failures + 1)); else echo "ok: search axes '$want' with '${extra[*]}'"; fi
done
# A config file gives defaults; the command line wins.
printf 'mode = standard\nepochs = 2\nstd-hidden = 8\n' >"$tmp/run.cfg"
expect 0 "standard epoch    2" "$mpiexec" -n 1 "$apps/retexo_mpi" --data "$tmp/small.h5" --config "$tmp/run.cfg" --log-every 1
expect 0 "retexo   stage 0" "$mpiexec" -n 1 "$apps/retexo_mpi" --data "$tmp/small.h5" --config "$tmp/run.cfg" --mode retexo --rounds 2 --log-every 1
# Identical accuracies at 1 and 4 ranks with --deterministic.
acc() { "$mpiexec" -n "$1" "$apps/retexo_mpi" "${small[@]}" --mode both --deterministic 2>&1 | grep "^accuracy"; }
a1=$(acc 1)
a4=$(acc 4)
if [[ -z $a1 || "$a1" != "$a4" ]]; then
  echo "FAIL: accuracies differ between 1 and 4 ranks:"; echo "$a1"; echo "$a4"; failures=$((failures + 1))
else
  echo "ok: identical accuracies at 1 and 4 ranks"
fi

# A rank that dies mid-stage ends the job within seconds, naming the rank; never a hang.
start=$(date +%s)
out=$(timeout 120 "$mpiexec" -n 3 "$apps/retexo_mpi" --data "$tmp/small.h5" --rounds 50 --kill-rank 1 --kill-at-round 3 2>&1)
rc=$?
took=$(( $(date +%s) - start ))
if [[ $rc -eq 0 || $rc -eq 124 || $took -gt 60 ]] || ! grep -qE "rank 1 .*(signal 9|Killed)" <<<"$out"; then
  echo "FAIL: killed rank: exit $rc after ${took}s:"; sed 's/^/    /' <<<"$out" | head -15; failures=$((failures + 1))
else
  echo "ok: a killed rank ends the job in ${took}s with exit $rc"
fi
# Two runs with the same seed and rank count: identical metrics (timings aside) and model files.
for i in 1 2; do
  "$mpiexec" -n 2 "$apps/retexo_mpi" "${small[@]}" --save-model "$tmp/det$i.h5" --metrics-out "$tmp/det$i.json" >/dev/null 2>&1
done
if ! cmp -s "$tmp/det1.h5" "$tmp/det2.h5"; then echo "FAIL: model files of two identical runs differ"; failures=$((failures + 1)); else echo "ok: identical model files"; fi
# Metrics without measurements of time and memory, and without output paths.
strip_times() {
  python3 -c 'import json, sys
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in ("time_s", "emulated_time_s", "peak_rss_bytes", "metrics-out", "save-model")}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x
print(json.dumps(strip(json.load(open(sys.argv[1]))), indent=1, sort_keys=True))' "$1"
}
if ! diff <(strip_times "$tmp/det1.json") <(strip_times "$tmp/det2.json") >/dev/null; then
  echo "FAIL: metrics of two identical runs differ:"; diff <(strip_times "$tmp/det1.json") <(strip_times "$tmp/det2.json") | head; failures=$((failures + 1))
else
  echo "ok: identical metrics"
fi

# Placement: rank 0 warns on stderr, with the fix, when OpenMP threads are crowded onto CPUs
# (include/retexo/comm/placement.hpp); legitimate placements get no warning; the warning changes no output.
# expect_quiet REGEX -- command...: exit 0 and REGEX not in stdout+stderr.
expect_quiet() {
  local regex=$1
  shift
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne 0 ]] || grep -qE -- "$regex" <<<"$out"; then
    echo "FAIL: $* -> exit $rc, output:"; sed 's/^/    /' <<<"$out" | head -20
    echo "    (expected exit 0 and no match for: $regex)"
    failures=$((failures + 1))
  else
    echo "ok: $*"
  fi
}
if "$mpiexec" --version 2>&1 | grep -qE "Open MPI|OpenRTE|open-mpi"; then
  warn="retexo_mpi: (warning|note):"
  stats=("$apps/retexo_mpi" --data "$tmp/small.h5" --mode stats)
  expect 0 "retexo_mpi: warning: rank 0 runs 2 OpenMP threads on 1 CPU\(s\) \(affinity mask [0-9]+\): set OMP_NUM_THREADS=1, or start with mpi_scripts/retexo_run.sh" \
    env OMP_NUM_THREADS=2 "$mpiexec" -n 1 --bind-to core "${stats[@]}"
  expect_quiet "$warn" env OMP_NUM_THREADS=1 "$mpiexec" -n 1 --bind-to core "${stats[@]}"
  expect_quiet "$warn" env OMP_NUM_THREADS=1 "$mpiexec" -n 4 --bind-to none "${stats[@]}"
  if (( $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) >= 2 )); then
    # Issue #18: OMP_PROC_BIND with unbound ranks pins every rank's thread to the first core.
    expect 0 "retexo_mpi: warning: ranks 0,1 on host .* run 2 OpenMP threads in all on the same 1 CPU\(s\).*unset them" \
      env OMP_NUM_THREADS=1 OMP_PROC_BIND=close OMP_PLACES=cores "$mpiexec" -n 2 --bind-to none "${stats[@]}"
    expect_quiet "$warn" env OMP_NUM_THREADS=1 "$mpiexec" -n 2 --bind-to none "${stats[@]}"
    expect_quiet "$warn" env OMP_NUM_THREADS=2 "$mpiexec" -n 1 --bind-to none "${stats[@]}"
    # The default binding (one core per rank) with OMP_NUM_THREADS unset: a note that CPUs stay idle.
    expect 0 "retexo_mpi: note: the 1 rank\(s\) on host .* run 1 OpenMP thread\(s\) on 1 of its [0-9]+ CPUs" \
      env -u OMP_NUM_THREADS "$mpiexec" -n 1 --bind-to core "${stats[@]}"
    # Same threads, warned or not: identical model and metrics.
    for b in core none; do
      OMP_NUM_THREADS=2 "$mpiexec" -n 1 --bind-to $b "$apps/retexo_mpi" "${small[@]}" --deterministic \
        --save-model "$tmp/bind-$b.h5" --metrics-out "$tmp/bind-$b.json" >/dev/null 2>&1
    done
    if ! cmp -s "$tmp/bind-core.h5" "$tmp/bind-none.h5" ||
       ! diff <(strip_times "$tmp/bind-core.json") <(strip_times "$tmp/bind-none.json") >/dev/null; then
      echo "FAIL: a run with the placement warning wrote other outputs"; failures=$((failures + 1))
    else
      echo "ok: the placement warning changes no output"
    fi
  fi
else
  echo "SKIPPED: placement checks need Open MPI's mpiexec"
fi

if [[ -n $datasets && -d $datasets/cora ]]; then
  expect 0 "2708 nodes.*1433 features \(sparse, 1.268" "$apps/retexo_convert" --ogb "$datasets/cora" --split random-paper --out "$tmp/cora.h5"
  expect 0 "1433 features \(dense, 1.268" "$apps/retexo_convert" --ogb "$datasets/cora" --split random-paper --features dense --out "$tmp/cora-dense.h5"
  expect 2 "--features: unknown feature storage 'csr'" "$apps/retexo_convert" --ogb "$datasets/cora" --split random-paper --features csr --out "$tmp/cora-bad.h5"
  absent "$tmp/cora-bad.h5"
  expect 1 "choose a split with --split \(available: public random-paper\)" "$apps/retexo_convert" --ogb "$datasets/cora" --out "$tmp/cora2.h5"
  expect 0 "split random-7 280/280/2148" "$apps/retexo_convert" --ogb "$datasets/cora" --random-split 7 --train-per-class 40 --num-valid 280 --num-test 2148 --out "$tmp/cora3.h5"
  expect 1 "class 6 has 180 nodes, fewer than the 200" "$apps/retexo_convert" --ogb "$datasets/cora" --random-split 7 --train-per-class 200 --out "$tmp/cora4.h5"
  absent "$tmp/cora4.h5"
  expect 1 "--num-valid must be positive, got 0: retexo_mpi chooses its model on the validation nodes" "$apps/retexo_convert" --ogb "$datasets/cora" --random-split 1 --num-valid 0 --num-test 0 --out "$tmp/cora5.h5"
  absent "$tmp/cora5.h5"
  # No test nodes: trained and reported, the test accuracy shown as n/a (not 0.0000).
  expect 0 "split random-1 140/500/0" "$apps/retexo_convert" --ogb "$datasets/cora" --random-split 1 --num-valid 500 --num-test 0 --out "$tmp/cora6.h5"
  expect 0 "accuracy test +n/a +n/a" "$apps/retexo_mpi" --data "$tmp/cora6.h5" --mode both --stages 2 --rounds 5 --epochs 5 \
    --search-dropout 0.5 --search-weight-decay 5e-4 --metrics-out "$tmp/cora6.json"
  expect 0 "^140/500/0 140/500/0$" python3 -c 'import json, sys
print(*["{train}/{valid}/{test}".format(**r["nodes"]) for r in json.load(open(sys.argv[1]))["runs"]])' "$tmp/cora6.json"
else
  echo "SKIPPED: dataset checks (no $datasets/cora)"
fi

# A full disk: every output fails with exit 1 (no crash), leaving no file behind, nor a
# directory it made.  Needs root: a small tmpfs in a mount namespace of this test's own.
# full_disk SIZE COMMAND...: COMMAND with $tmp/full a SIZE tmpfs, then "left:<what is left>|".
full_disk() {
  local size=$1
  shift
  mkdir -p "$tmp/full"
  unshare -m sh -c 'mount -t tmpfs -o "size=$0" tmpfs "$1" || exit 99; d=$1; shift 2; timeout 120 "$@"; rc=$?
    echo "left:$(find "$d" -mindepth 1 | tr "\n" " ")|"; exit $rc' "$size" "$tmp/full" x "$@"
}
if [[ $EUID -eq 0 ]] && unshare -m true 2>/dev/null; then
  "$apps/retexo_generate" --out "$tmp/disk.h5" --nodes 3000 --features 64 --classes 4 --seed 3 >/dev/null
  # The sizes let the data's writes pass and their flush at close fail (an exit 0 with a file
  # of holes, before), or a write fail on one rank only (a hang in the collective close).
  expect 1 "^left:\|$" full_disk 256k "$apps/retexo_generate" --out "$tmp/full/g.h5" --nodes 3000 --features 64 --classes 4
  expect 1 "^left:\|$" full_disk 256k "$apps/retexo_partition" --graph "$tmp/disk.h5" --parts 2 --out "$tmp/full/p"
  expect 1 "^left:\|$" full_disk 640k "$apps/retexo_shard" --graph "$tmp/disk.h5" --parts 2 --out "$tmp/full/s/t"
  expect 1 "^left:\|$" full_disk 800k "$mpiexec" -n 2 "$apps/retexo_partition" --graph "$tmp/disk.h5" --out "$tmp/full/p"
  expect 1 "^left:\|$" full_disk 64k "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/disk.h5" --rounds 2 --stages 2 \
    --checkpoint-dir "$tmp/full"
  expect 1 "^left:\|$" full_disk 2m "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/disk.h5" --rounds 2 --stages 2 \
    --predict-out "$tmp/full/p.h5"
else
  echo "SKIPPED: full-disk checks (need root and unshare)"
fi

# The memory a model or a load may take is what the node has left, or less under a memory
# cgroup (as Slurm and containers set).
cgroup=()
if [[ $EUID -eq 0 && -w /sys/fs/cgroup/memory ]]; then
  cgroup=(/sys/fs/cgroup/memory/retexo-cli-$$ memory.limit_in_bytes)
elif [[ $EUID -eq 0 && " $(cat /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null) " == *" memory "* ]]; then
  cgroup=(/sys/fs/cgroup/retexo-cli-$$ memory.max)
fi
expect_limited() { # BYTES REGEX COMMAND...: expect exit 1 and REGEX, COMMAND in a cgroup limited to BYTES
  local bytes=$1 regex=$2
  shift 2
  if [[ ${#cgroup[@]} -eq 2 ]] && mkdir "${cgroup[0]}" 2>/dev/null; then
    if echo "$bytes" >"${cgroup[0]}/${cgroup[1]}"; then
      expect_mpi 1 "$regex" bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "${cgroup[0]}" "$@"
    else
      echo "SKIPPED: memory cgroup check (cannot set a limit in ${cgroup[0]})"
    fi
    for _ in $(seq 50); do rmdir "${cgroup[0]}" 2>/dev/null && break; sleep 0.1; done # once its processes are gone
  else
    echo "SKIPPED: memory cgroup check (needs root and a writable memory cgroup)"
  fi
}
expect_limited_each() { # BYTES REGEX COMMAND...: expect exit 1 and REGEX, COMMAND on 2 ranks, each in a cgroup of its own limited to BYTES
  local bytes=$1 regex=$2
  shift 2
  if [[ ${#cgroup[@]} -eq 2 ]] && mkdir "${cgroup[0]}" 2>/dev/null; then
    [[ ${cgroup[1]} != memory.max ]] || echo +memory >"${cgroup[0]}/cgroup.subtree_control"
    # shellcheck disable=SC2016 # expanded by the ranks' shells
    expect_mpi 1 "$regex" "$mpiexec" -n 2 bash -c 'g=$0/r$OMPI_COMM_WORLD_RANK && mkdir "$g" && echo "$1" >"$g/$2" &&
      echo $$ >"$g/cgroup.procs" && exec "${@:3}"' "${cgroup[0]}" "$bytes" "${cgroup[1]}" "$@"
    for _ in $(seq 50); do
      rmdir "${cgroup[0]}"/r* 2>/dev/null
      rmdir "${cgroup[0]}" 2>/dev/null && break
      sleep 0.1
    done
  else
    echo "SKIPPED: memory cgroup check (needs root and a writable memory cgroup)"
  fi
}
# Stage 1 of --hidden 30000 on 12 features needs 10.9 GB.
expect_limited 2000000000 "--hidden 30000: RETEXO's stage 1 .* needs at least 10.9 GB on rank 0, but [12]\.[0-9] GB of memory is available to it in its memory cgroup" \
  "$mpiexec" -n 1 "$apps/retexo_mpi" --data "$tmp/small.h5" --hidden 30000
# Two ranks in one cgroup share its room; two ranks each in a cgroup of its own have each its own.
expect_limited 2000000000 "--hidden 30000: RETEXO's stage 1 .* needs at least [0-9.]+ GB on rank [01], but [12]\.[0-9] GB of memory is available to the 2 ranks in its memory cgroup [^ ]+ \([0-9.]+ [MG]B each\)" \
  "$mpiexec" -n 2 "$apps/retexo_mpi" --data "$tmp/small.h5" --hidden 30000
expect_limited_each 2000000000 "--hidden 30000: RETEXO's stage 1 .* needs at least [0-9.]+ GB on rank [01], but [12]\.[0-9] GB of memory is available to it in its memory cgroup [^ ]+/r[01]$" \
  "$apps/retexo_mpi" --data "$tmp/small.h5" --hidden 30000
# 200,000 nodes of 300 dense features are 240 MB (before, the cgroup's OOM killer ended the load).
"$apps/retexo_generate" --out "$tmp/wide.h5" --nodes 200000 --features 300 --classes 3 --avg-degree 4 --seed 1 >/dev/null
expect_limited 200000000 "wide.h5: loading its 200000 nodes and [0-9]+ in-edges with 300 dense features each on 1 rank\(s\) \(--partition random\) needs at least 24[0-9] MB on rank 0, but 1[0-9][0-9] MB of memory is available to it" \
  "$mpiexec" -n 1 "$apps/retexo_mpi" --data "$tmp/wide.h5" --mode stats
# The same nodes in an owner shard.
"$apps/retexo_shard" --graph "$tmp/wide.h5" --parts 1 --method random --out "$tmp/wide-owners" >/dev/null
expect_limited 200000000 "wide-owners/shard0.h5: loading its 200000 nodes with 300 dense features each and [0-9]+ edges needs at least 24[0-9] MB on rank 0, but 1[0-9][0-9] MB of memory is available to it" \
  "$mpiexec" -n 1 "$apps/retexo_mpi" --data "$tmp/wide-owners" --mode stats
rm -rf "$tmp/wide.h5" "$tmp/wide-owners"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
