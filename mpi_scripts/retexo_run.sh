#!/usr/bin/env bash
# Local runner: mpirun -np N retexo_mpi [options...] with the settings a workstation needs.
#   mpi_scripts/retexo_run.sh [-np N] [retexo_mpi options...]
# - as root, Open MPI needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM); set only when running as root;
# - more ranks than cores needs oversubscription; enabled only when N > cores;
# - OMP_NUM_THREADS defaults to cores / N (at least 1) so ranks do not fight over cores;
# - binding: Open MPI's default binds each rank to ONE core (np <= 2) or socket, so a rank's
#   OpenMP threads would share that core (issue #16: citeseer standard trainer 10.6 s at 97%
#   CPU, 7.7 s unbound).  When N x threads = cores each rank gets its own `threads` CPUs
#   (--map-by slot:PE=threads); counted in hardware threads (--use-hwthread-cpus, --bind-to
#   hwthread) because `cores` (nproc) counts them: identical to --bind-to core without SMT, and
#   on SMT machines PE=threads still fits.  Only a job that fills the cores is bound: Open MPI
#   binds every job's ranks from the first core on, so two jobs that each left cores free (say
#   two -np 1 runs side by side) would share one core while another idled (each at half
#   speed).  Otherwise (cores left free, or oversubscribing) --bind-to none: every rank may use
#   every CPU and the kernel balances them.
#   retexo_mpi warns on stderr when it finds threads crowded onto shared CPUs anyway.
# - GLIBC_TUNABLES defaults to glibc.malloc.hugetlb=1 (large buffers get transparent huge
#   pages: far fewer page faults and TLB misses; 1.6x faster end to end at products scale),
#   with malloc's mmap and trim thresholds at 4 GiB and 64 GiB: a buffer freed in one epoch
#   is reused by the next instead of going back to the kernel and being faulted in again
#   (in a VM that hands free memory to its host, 5-10 s per GiB; docs/results.md).
# - the all-reduce: Open MPI's dynamic rules in mpi_scripts/allreduce.rules (ring from 64 KiB
#   on 3 ranks and more, its fixed decision otherwise): on 4 hosts over TCP RETEXO's gradient
#   all-reduces took 1.7x less time at 100 Mb/s and 1.35x at 1 Gb/s, the same in shared memory
#   (docs/results.md); OMPI_MCA_coll_tuned_use_dynamic_rules=0 turns it off.
# RETEXO_MPI overrides the binary (default: build/apps/retexo_mpi, else retexo_mpi on PATH).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
np=4
if [[ ${1:-} == -np || ${1:-} == -n ]]; then
  np=$2
  shift 2
fi
bin=${RETEXO_MPI:-}
if [[ -z $bin ]]; then
  if [[ -x ${RETEXO_BUILD_DIR:-$root/build}/apps/retexo_mpi ]]; then
    bin=${RETEXO_BUILD_DIR:-$root/build}/apps/retexo_mpi
  else
    bin=$(command -v retexo_mpi) || { echo "retexo_run.sh: retexo_mpi not found; build first (cmake/bootstrap.sh)" >&2; exit 1; }
  fi
fi
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)   # CPUs we may use (nproc obeys OMP_NUM_THREADS)
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
if (( np > cores )); then
  export OMPI_MCA_rmaps_base_oversubscribe=1
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( cores / np > 0 ? cores / np : 1 ))}
threads=$OMP_NUM_THREADS
[[ $threads =~ ^[1-9][0-9]*$ ]] || threads=1   # e.g. OMP_NUM_THREADS=4,2 (nested): no binding
if (( np * threads == cores )) && [[ $OMP_NUM_THREADS == "$threads" ]]; then
  bind=(--use-hwthread-cpus --map-by "slot:PE=$threads" --bind-to hwthread)
else
  bind=(--bind-to none)
fi
export GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=68719476736}
export OMPI_MCA_coll_tuned_use_dynamic_rules=${OMPI_MCA_coll_tuned_use_dynamic_rules:-1}
export OMPI_MCA_coll_tuned_dynamic_rules_filename=${OMPI_MCA_coll_tuned_dynamic_rules_filename:-$root/mpi_scripts/allreduce.rules}
exec mpirun -np "$np" "${bind[@]}" "$bin" "$@"
