#!/usr/bin/env bash
# The scripts under mpi_scripts/ are valid shell, and every option they pass to a retexo
# tool exists in that tool's --help.
# Usage: scripts_test.sh SOURCE_DIR APPS_DIR
set -u
src=$1
apps=$2
failures=0
for f in "$src"/mpi_scripts/*.sh "$src"/mpi_scripts/*.sbatch; do
  if ! bash -n "$f"; then echo "FAIL: $f is not valid shell"; failures=$((failures + 1)); else echo "ok: bash -n $f"; fi
  # Every --option on lines that call or configure a retexo tool.
  for tool in retexo_mpi retexo_convert retexo_partition retexo_generate; do
    help=$("$apps/$tool" --help 2>&1)
    opts=$(grep -E "^\s*(--|$tool|\"\\\$RETEXO_MPI\"|srun|mpirun|  --)" "$f" | grep -v '^\s*#' |
           { if [[ $tool == retexo_mpi ]]; then grep -vE "retexo_(convert|partition|generate)"; else grep "$tool"; fi; } |
           grep -oE -- "--[a-z][a-z0-9-]+" | sort -u)
    for o in $opts; do
      case $o in --mpi|--kill-on-bad-exit|--host|--bind-to|--mca|--oversubscribe|--cpu-bind|--map-by|--signal|--job-name|--nodes|--ntasks|--ntasks-per-node|--cpus-per-task|--time|--output) continue ;; esac
      if ! grep -qE -- "$o( |,|=|$)" <<<"$help"; then
        echo "FAIL: $f passes $o, which $tool --help does not list"; failures=$((failures + 1))
      fi
    done
  done
done
# perf/ workload configuration files: every key is a retexo_mpi option.
help=$("$apps/retexo_mpi" --help 2>&1)
for f in "$src"/perf/configs/*.cfg; do
  for key in $(grep -vE '^\s*(#|$)' "$f" | cut -d= -f1 | tr -d ' '); do
    if ! grep -qE -- "--$key( |,|$)" <<<"$help"; then
      echo "FAIL: $f sets $key, which retexo_mpi --help does not list"; failures=$((failures + 1))
    fi
  done
  echo "ok: keys of $f"
done
# The defaults table: every key is a retexo_mpi option (last-stage-X: X is), every section a
# --model name whose keys are options, and where --help shows a default, it is the table's.
models=" $(sed -nE 's/^ *--model arg \(=[^)]*\) *//p' <<<"$help" | tr -d '|') "
section=""
while IFS='=' read -r key value; do
  key=$(tr -d ' ' <<<"$key"); value=$(tr -d ' ' <<<"$value")
  if [[ $key =~ ^\[(.+)\]$ ]]; then
    section=${BASH_REMATCH[1]}
    [[ $models == *" $section "* ]] || { echo "FAIL: data/defaults.cfg has a section [$section], not a --model of retexo_mpi --help ($models)"; failures=$((failures + 1)); }
    continue
  fi
  [[ $key == last-stage-* ]] && continue
  if [[ -n $section ]]; then
    grep -qE -- "--$key( |$)" <<<"$help" || { echo "FAIL: data/defaults.cfg's [$section] has $key, which retexo_mpi --help does not list"; failures=$((failures + 1)); }
    continue
  fi
  line=$(grep -E -- "--$key( |$)" <<<"$help") || { echo "FAIL: data/defaults.cfg has $key, which retexo_mpi --help does not list"; failures=$((failures + 1)); continue; }
  shown=$(sed -nE 's/.*\(=([^)]*)\).*/\1/p' <<<"$line")
  # the same text, or the same number (a typed option prints 5e-4 as 0.0005)
  if [[ -n $shown && $shown != "$value" ]] && ! awk -v a="$shown" -v b="$value" 'BEGIN { exit !(a + 0 == b + 0 && a ~ /^[-0-9.e]+$/) }'; then
    echo "FAIL: retexo_mpi --help shows --$key (=$shown), data/defaults.cfg says $value"; failures=$((failures + 1))
  fi
done < <(grep -vE '^\s*(#|$)' "$src/data/defaults.cfg" | sed 's/#.*//')
echo "ok: data/defaults.cfg"
# Placement (issue #16): retexo_run.sh gives each rank its own cores for its threads, or no
# binding when oversubscribing; the Slurm template binds only where Slurm can and never exports
# OMP_PROC_BIND/OMP_PLACES (which pin every unbound rank's threads to the same cores).
run=$src/mpi_scripts/retexo_run.sh
sbatch=$src/mpi_scripts/retexo.sbatch
check() { # check DESCRIPTION command...: the command succeeds
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}
check "retexo_run.sh binds each rank to PE=threads cores" grep -qE -- '--map-by "slot:PE=\$threads"' "$run"
check "retexo_run.sh does not bind when oversubscribing" grep -qE -- '--bind-to none' "$run"
check "retexo_run.sh passes the binding to mpirun" grep -qE '^exec mpirun -np "\$np" "\$\{bind\[@\]\}"' "$run"
check "retexo.sbatch does not export OMP_PROC_BIND/OMP_PLACES" bash -c "! grep -qE '^\s*export .*OMP_(PROC_BIND|PLACES)' '$sbatch'"
check "retexo.sbatch passes --cpus-per-task and the conditional binding to srun" \
  grep -qE '^srun .*--cpus-per-task=.*cpu_bind\[@\]' "$sbatch"
check "retexo.sbatch's mpirun alternative maps slot:PE=N" grep -qE '^# mpirun --map-by slot:PE=' "$sbatch"
# Real runs: no placement warning from retexo_mpi, OMP_NUM_THREADS = cores / N (at least 1).
if command -v mpirun >/dev/null && mpirun --version 2>&1 | grep -qE "Open MPI|OpenRTE|open-mpi"; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$apps/retexo_generate" --out "$tmp/g.h5" --nodes 400 --features 8 --classes 3 --seed 1 >/dev/null
  cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  for np in 1 2 4; do
    threads=$(( cores / np > 0 ? cores / np : 1 ))
    out=$(env -u OMP_NUM_THREADS RETEXO_MPI="$apps/retexo_mpi" timeout 120 "$run" -np $np --data "$tmp/g.h5" --mode stats 2>&1)
    rc=$?
    if [[ $rc -ne 0 ]] || grep -qE "retexo_mpi: (warning|note)" <<<"$out" || ! grep -q "$np ranks x $threads threads" <<<"$out"; then
      echo "FAIL: retexo_run.sh -np $np: exit $rc, expected '$np ranks x $threads threads' and no placement warning:"
      sed 's/^/    /' <<<"$out" | head -10
      failures=$((failures + 1))
    else
      echo "ok: retexo_run.sh -np $np: $threads thread(s) per rank, no placement warning"
    fi
  done
  # A job that leaves cores free is not bound (Open MPI would put every such job on core 0).
  if (( cores >= 2 )); then
    printf '#!/bin/sh\ngrep Cpus_allowed_list /proc/self/status\n' >"$tmp/affinity.sh"
    chmod +x "$tmp/affinity.sh"
    mine=$(grep Cpus_allowed_list /proc/self/status)
    got=$(OMP_NUM_THREADS=1 RETEXO_MPI="$tmp/affinity.sh" timeout 60 "$run" -np 1 2>&1)
    check "retexo_run.sh -np 1 with 1 thread of $cores cores is not bound ($got; ours: $mine)" test "$got" = "$mine"
  fi
else
  echo "SKIPPED: retexo_run.sh runs need Open MPI's mpirun"
fi
# The README and docs: the C++ quick start is test/install/quickstart.cpp (which the install
# test builds and runs), every relative link points at a file that exists, and every
# retexo_mpi option the README names is in --help.
readme_cpp=$(awk '/^```cpp$/ {on = 1; next} /^```$/ {on = 0} on' "$src/README.md")
if [[ $readme_cpp != "$(cat "$src/test/install/quickstart.cpp")" ]]; then
  echo "FAIL: README.md's C++ quick start differs from test/install/quickstart.cpp"; failures=$((failures + 1))
else
  echo "ok: README.md's C++ quick start is test/install/quickstart.cpp"
fi
for doc in "$src"/README.md "$src"/docs/*.md; do
  for link in $(grep -oE '\]\([^)#]+' "$doc" | sed 's/^](//' | grep -vE '^(https?|mailto):'); do
    [[ -e $(dirname "$doc")/$link ]] || { echo "FAIL: $doc links to $link, which does not exist"; failures=$((failures + 1)); }
  done
done
for o in $(grep -oE -- "\`--[a-z][a-z0-9-]+" "$src/README.md" | tr -d '`' | sort -u); do
  grep -qE -- "$o( |,|=|$)" <<<"$help" || grep -qE -- "$o( |,|=|$)" <<<"$("$apps"/retexo_convert --help; "$apps"/retexo_partition --help)" ||
    { echo "FAIL: README.md names $o, which no tool's --help lists"; failures=$((failures + 1)); }
done
echo "$failures failure(s)"
[[ $failures -eq 0 ]]
