#!/usr/bin/env bash
# Run a command in a memory cgroup of its own (cgroup v1 or v2), limited to LIMIT, and write
# its peak resident set (KiB), wall, user and system seconds to REPORT.<rank> (one line; rank
# from Open MPI's environment, else 0).
#   mpirun -np P perf/mem_limit.sh LIMIT REPORT command...   # LIMIT: bytes, or with K/M/G
# Needs root; without a memory controller it refuses rather than run unlimited.
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 LIMIT REPORT command..." >&2; exit 2; }
limit=$1 report=$2
shift 2
case $limit in
  *G) bytes=$((${limit%G} * 1024 * 1024 * 1024)) ;;
  *M) bytes=$((${limit%M} * 1024 * 1024)) ;;
  *K) bytes=$((${limit%K} * 1024)) ;;
  *[!0-9]*|'') echo "$0: LIMIT must be a number of bytes with an optional K, M or G, got '$limit'" >&2; exit 2 ;;
  *) bytes=$limit ;;
esac
rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}
name=retexo-mem-$$-$rank
# A rank that mpirun kills (another rank failed) cannot remove its cgroup: remove those of
# earlier runs whose script is gone (rmdir removes only an empty cgroup).
for old in /sys/fs/cgroup/memory/retexo-mem-* /sys/fs/cgroup/retexo-mem-*; do
  [[ -d $old ]] || continue
  pid=${old##*/retexo-mem-}
  kill -0 "${pid%-*}" 2>/dev/null || rmdir "$old" 2>/dev/null || true
done
if [[ -d /sys/fs/cgroup/memory ]]; then # v1
  cg=/sys/fs/cgroup/memory/$name
  mkdir "$cg"
  echo "$bytes" >"$cg/memory.limit_in_bytes"
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then # v2
  cg=/sys/fs/cgroup/$name
  mkdir "$cg"
  echo "$bytes" >"$cg/memory.max"
  echo 0 >"$cg/memory.swap.max" 2>/dev/null || true
else
  echo "$0: no memory cgroup controller here" >&2
  exit 1
fi
# A singleton MPI process leaves its helper daemon in the cgroup for a moment after it exits:
# wait for the cgroup to empty (up to 5 s) rather than leave it behind.
cleanup() {
  local _
  for _ in $(seq 50); do
    rmdir "$cg" 2>/dev/null && return
    sleep 0.1
  done
  echo "$0: could not remove $cg" >&2
}
trap cleanup EXIT
rc=0
# The command runs in the cgroup (a subshell joins it first); /usr/bin/time reports its peak RSS.
(echo $BASHPID >"$cg/cgroup.procs" && exec /usr/bin/time -f '%M %e %U %S' -o "$report.$rank" "$@") || rc=$?
if [[ -f $cg/memory.failcnt && $(cat "$cg/memory.failcnt") -gt 0 && $rc -ne 0 ]]; then
  echo "$0: rank $rank hit the memory limit ($limit)" >&2
fi
exit $rc
