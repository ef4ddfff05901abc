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
      case $o in --mpi|--cpu-bind|--map-by|--signal|--job-name|--nodes|--ntasks|--ntasks-per-node|--cpus-per-task|--time|--output) continue ;; esac
      if ! grep -qE -- "$o( |,|=|$)" <<<"$help"; then
        echo "FAIL: $f passes $o, which $tool --help does not list"; failures=$((failures + 1))
      fi
    done
  done
done
# Preset configuration files: every key is a retexo_mpi option.
help=$("$apps/retexo_mpi" --help 2>&1)
for f in "$src"/mpi_scripts/presets/*.cfg; do
  for key in $(grep -vE '^\s*(#|$)' "$f" | cut -d= -f1 | tr -d ' '); do
    if ! grep -qE -- "--$key( |,|$)" <<<"$help"; then
      echo "FAIL: $f sets $key, which retexo_mpi --help does not list"; failures=$((failures + 1))
    fi
  done
  echo "ok: keys of $f"
done
echo "$failures failure(s)"
[[ $failures -eq 0 ]]
