#!/usr/bin/env bash
# The Slurm templates mpi_scripts/retexo.sbatch and partition.sbatch on a real Slurm cluster:
# munged, slurmctld and two slurmd (nodes n1 and n2, one CPU each) started on this host in a
# private temporary directory, jobs submitted with sbatch as a user would.  Checks: a training
# job completes; USR1 stops it with a checkpoint and the resubmitted job resumes to the
# uninterrupted run's model bit for bit; scancel and a rank killed on n2 end the whole job within
# seconds; partition.sbatch's parts train.  Every daemon is stopped by its pid when the test ends.
# Usage: slurm_test.sh SOURCE_DIR APPS_DIR [DATASETS_DIR]  (needs root, Slurm and munge)
set -u
src=$1
apps=$2
datasets=${3:-}

skip() { echo "SKIPPED: $*"; exit 0; }
[[ $(id -u) -eq 0 ]] || skip "needs root (runs munged, slurmctld and slurmd)"
for cmd in munged slurmctld slurmd sbatch srun sinfo squeue scontrol scancel; do
  command -v "$cmd" >/dev/null || skip "$cmd not found (cmake/install-deps.sh installs Slurm and munge)"
done

failures=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
show() { sed 's/^/    /' "$@" | tail -n 25; } # the end of a log, indented

# --- the cluster ---------------------------------------------------------------------------
tmp=$(mktemp -d /tmp/retexo-slurm.XXXXXX)
chmod 711 "$tmp" # munged wants every directory above its socket searchable by all
jobs=$tmp/jobs   # sbatch runs here: the job logs (%x_%j.log) land here

# stop_daemons: TERM to each daemon by the pid in its pid file (all at once: each takes ~2 s to
# exit), KILL to any still running after 5 s.
stop_daemons() {
  local name pid pids=() alive=()
  for name in slurmd.n1 slurmd.n2 slurmctld munged; do
    pid=$(cat "$tmp/run/$name.pid" 2>/dev/null) || continue
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "${name%.*}" ]] && kill -TERM "$pid" && pids+=("$pid")
  done
  for _ in {1..50}; do
    alive=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    [[ ${#alive[@]} -eq 0 ]] && return
    sleep 0.1
  done
  kill -KILL "${alive[@]}"
}
# On any exit: cancel the jobs (no step may outlive its slurmd), stop the daemons, remove $tmp.
cleanup() {
  if [[ -e $tmp/run/slurmctld.pid ]]; then
    scancel --quiet --user=root 2>/dev/null
    for _ in {1..50}; do [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break; sleep 0.2; done
  fi
  stop_daemons
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_port_base: P such that P, P+1, P+2 are not listening (below the ephemeral port range).
free_port_base() {
  local listening base
  listening=" $(while read -r _ addr _ state _; do
    [[ $state == 0A ]] && printf '%d ' "$((16#${addr##*:}))"
  done < <(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null)) "
  for _ in {1..100}; do
    base=$((20000 + RANDOM % 12000))
    [[ $listening != *" $base "* && $listening != *" $((base + 1)) "* && $listening != *" $((base + 2)) "* ]] &&
      { echo "$base"; return; }
  done
  echo 29871
}

write_slurm_conf() {
  local port
  port=$(free_port_base)
  cat >"$tmp/slurm.conf" <<EOF
ClusterName=retexo-test
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/munge.socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool/%n
SlurmctldPidFile=$tmp/run/slurmctld.pid
SlurmdPidFile=$tmp/run/slurmd.%n.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
MpiDefault=pmix
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
SchedulerParameters=batch_sched_delay=0
# Each node its own TmpFS: pmix makes its step directory there, and a shared one collides.
TmpFS=$tmp/tmpfs/%n
NodeName=n1 NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$((port + 1)) CPUs=1
NodeName=n2 NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$((port + 2)) CPUs=1
PartitionName=test Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
}

# start_cluster: munged, slurmctld, slurmd n1 and n2; true once sinfo shows both nodes idle.
start_cluster() {
  mkdir -p "$tmp"/{munge,state,run,log,spool/n1,spool/n2,tmpfs/n1,tmpfs/n2} "$jobs"
  chmod 755 "$tmp/munge"
  head -c 1024 /dev/urandom >"$tmp/munge.key"
  chmod 400 "$tmp/munge.key"
  write_slurm_conf
  export SLURM_CONF=$tmp/slurm.conf
  {
    munged --socket="$tmp/munge/munge.socket" --key-file="$tmp/munge.key" --pid-file="$tmp/run/munged.pid" \
      --log-file="$tmp/log/munged.log" --seed-file="$tmp/munge/seed" &&
      slurmctld && slurmd -N n1 && slurmd -N n2
  } >"$tmp/log/start.log" 2>&1 || return 1
  for _ in {1..50}; do
    [[ $(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l) -eq 2 ]] && return 0
    sleep 0.2
  done
  return 1
}

# --- jobs ----------------------------------------------------------------------------------
# Resources as a user overrides the templates' #SBATCH lines on the command line.  --time stays
# above the template's --signal=USR1@300, which would otherwise fire at Slurm's first check.
resources=(--nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --time=30)

# train DATA OUT RETEXO_ARGS: submit retexo.sbatch; prints the job id.
train() {
  (cd "$jobs" && DATA=$1 OUT=$2 RETEXO_ARGS=$3 sbatch --parsable "${resources[@]}" "$src/mpi_scripts/retexo.sbatch")
}
job_log() { echo "$jobs/$1_$2.log"; } # job_log NAME ID
job_state() { scontrol show job -o "$1" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2; }

# ranks ID [TASK]: pids of the job's retexo_mpi processes (of task TASK only).
ranks() {
  local pid env
  for pid in $(pgrep -x retexo_mpi); do
    env=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null) || continue
    grep -qx "SLURM_JOB_ID=$1" <<<"$env" || continue
    [[ -z ${2:-} ]] || grep -qx "SLURM_PROCID=$2" <<<"$env" || continue
    echo "$pid"
  done
}

# wait_end ID SECONDS: wait until the job has ended and none of its ranks runs; prints the final
# state, false after SECONDS.
wait_end() {
  local end=$((SECONDS + $2)) state
  while true; do
    state=$(job_state "$1")
    if [[ -n $state && ! $state =~ ^(PENDING|CONFIGURING|RUNNING|COMPLETING|SUSPENDED)$ && -z $(ranks "$1") ]]; then
      echo "$state"
      return 0
    fi
    [[ $SECONDS -lt $end ]] || { echo "still ${state:-unknown} after $2 s"; return 1; }
    sleep 0.1
  done
}

# wait_log FILE REGEX SECONDS: wait until the job log FILE has a line matching REGEX.
wait_log() {
  local end=$((SECONDS + $3))
  until grep -qE -- "$2" "$1" 2>/dev/null; do
    [[ $SECONDS -lt $end ]] || return 1
    sleep 0.1
  done
}

now_ms() { echo $((${EPOCHREALTIME//[.,]/} / 1000)); }
since() { awk -v ms=$(($(now_ms) - $1)) 'BEGIN { printf "%.1f", ms / 1000 }'; } # since T0_MS: seconds

# --- checks --------------------------------------------------------------------------------
# a. A training job on a generated graph runs on both nodes and writes its metrics and model.
check_train() {
  local id state nodes
  id=$(train "$tmp/g2" "$tmp/a" "--rounds 10 --hidden 16 --log-every 5") || { fail "a: sbatch"; return; }
  state=$(wait_end "$id" 60)
  nodes=$(scontrol show job -o "$id" | grep -oE ' NodeList=[^ ]+' | cut -d= -f2)
  if [[ $state == COMPLETED && $nodes == "n[1-2]" && -s $tmp/a/model.h5 ]] && grep -q '"ranks": 2' "$tmp/a/metrics.json"; then
    ok "a: retexo.sbatch job $id on $nodes completed, wrote metrics.json (2 ranks) and model.h5"
  else
    fail "a: retexo.sbatch job $id: $state on '$nodes', outputs: $(ls "$tmp/a" 2>&1 | tr '\n' ' ')"
    show "$(job_log retexo "$id")"
  fi
}

# b. USR1 (scancel -s USR1 delivers it as Slurm's --signal=USR1@300 does) stops the job with a
# checkpoint; the same sbatch command resumes; the model and predictions equal an uninterrupted
# run's, byte for byte.  Emulated latency makes a round take ~20 ms: the signal lands mid-run.
check_checkpoint() {
  local opts="--rounds 40 --hidden 16 --log-every 10 --emulate-latency 0.002 --deterministic"
  local id log state
  id=$(train "$tmp/g2" "$tmp/b-ref" "$opts") || { fail "b: sbatch"; return; }
  state=$(wait_end "$id" 60)
  [[ $state == COMPLETED ]] || { fail "b: uninterrupted job $id: $state"; show "$(job_log retexo "$id")"; return; }

  id=$(train "$tmp/g2" "$tmp/b" "$opts") || { fail "b: sbatch"; return; }
  log=$(job_log retexo "$id")
  wait_log "$log" "stage 0( candidate 1/[0-9]+)? round +20 " 60 || { fail "b: job $id shows no training progress"; show "$log"; return; }
  scancel -s USR1 "$id"
  state=$(wait_end "$id" 30)
  if [[ $state == COMPLETED && ! -e $tmp/b/model.h5 && -s $tmp/b/checkpoint/ckpt.rank0.h5 &&
    -s $tmp/b/checkpoint/ckpt.rank1.h5 ]] && grep -q "with a checkpoint" "$log"; then
    ok "b: USR1 stopped job $id cleanly ($(grep -o 'stopped after [0-9]* rounds' "$log")), ckpt.rank0.h5 and ckpt.rank1.h5 written"
  else
    fail "b: USR1 to job $id: $state"; show "$log"; return
  fi

  id=$(train "$tmp/g2" "$tmp/b" "$opts") || { fail "b: sbatch (resubmission)"; return; }
  log=$(job_log retexo "$id")
  state=$(wait_end "$id" 60)
  # Resumed: it trained on to the end, and never printed stage 0's first round (of the
  # weight-decay search's first candidate).
  if [[ $state != COMPLETED ]] || grep -q "with a checkpoint" "$log" ||
    grep -qE "stage 0( candidate 1/[0-9]+)? round +1 " "$log"; then
    fail "b: resubmitted job $id did not resume to the end: $state"; show "$log"
  elif cmp "$tmp/b-ref/model.h5" "$tmp/b/model.h5" && cmp "$tmp/b-ref/predictions.h5" "$tmp/b/predictions.h5"; then
    ok "b: resubmitted job $id resumed; model.h5 and predictions.h5 identical to the uninterrupted run's"
  else
    fail "b: the resumed run's model or predictions differ from the uninterrupted run's"
  fi
}

# c. scancel, or task 1's rank (on n2) killed, ends the whole job within 15 s, and the job log
# says what happened.
check_stop() { # check_stop scancel|kill
  local id log t0 state secs pid said="CANCELLED"
  [[ $1 == kill ]] && said="n2: task 1: Killed"
  id=$(train "$tmp/g2" "$tmp/c-$1" "--rounds 5000 --hidden 16 --log-every 10 --emulate-latency 0.002") ||
    { fail "c: sbatch"; return; }
  log=$(job_log retexo "$id")
  wait_log "$log" "stage 0( candidate 1/[0-9]+)? round +20 " 60 || { fail "c: job $id shows no training progress"; show "$log"; return; }
  t0=$(now_ms)
  if [[ $1 == scancel ]]; then
    scancel "$id"
  else
    pid=$(ranks "$id" 1)
    if [[ -z $pid ]] || ! tr '\0' '\n' <"/proc/$pid/environ" | grep -qx SLURMD_NODENAME=n2; then
      fail "c: no rank of task 1 on n2 in job $id (pid '$pid')"; return
    fi
    kill -KILL "$pid"
  fi
  state=$(wait_end "$id" 30)
  secs=$(since "$t0")
  if [[ $state =~ ^(CANCELLED|FAILED)$ ]] && awk -v s="$secs" 'BEGIN { exit !(s < 15) }' && grep -q "$said" "$log"; then
    ok "c: $1 ended job $id and all its ranks in $secs s ($state; log: $(grep -m1 "$said" "$log"))"
  else
    fail "c: $1 of job $id: $state after $secs s (expected CANCELLED/FAILED within 15 s, '$said' in the log)"
    show "$log"
  fi
}

# A tiny dataset in the OGB raw layout (see DATASETS_DIR/FORMAT.md): 60 nodes on a ring with
# chords, 3 classes, 4 features, split "public".
write_tiny_ogb() {
  local d=$1 n=60
  mkdir -p "$d/raw" "$d/split/public"
  echo '{"name": "tiny", "directed": false, "num_classes": 3}' >"$d/meta.json"
  awk -v n=$n 'BEGIN { for (i = 0; i < n; i++) { print i "," (i + 1) % n; if (i % 2 == 0) print i "," (i + 3) % n } }' |
    gzip >"$d/raw/edge.csv.gz"
  awk -v n=$n 'BEGIN { for (i = 0; i < n; i++) { c = i % 3; print (c == 0) "," (c == 1) "," (c == 2) "," (i % 5) / 5 } }' |
    gzip >"$d/raw/node-feat.csv.gz"
  awk -v n=$n 'BEGIN { for (i = 0; i < n; i++) print i % 3 }' | gzip >"$d/raw/node-label.csv.gz"
  echo $n | gzip >"$d/raw/num-node-list.csv.gz"
  zcat "$d/raw/edge.csv.gz" | wc -l | gzip >"$d/raw/num-edge-list.csv.gz"
  seq 0 14 | gzip >"$d/split/public/train.csv.gz"
  seq 15 29 | gzip >"$d/split/public/valid.csv.gz"
  seq 30 59 | gzip >"$d/split/public/test.csv.gz"
}

# d. partition.sbatch converts and partitions a dataset (cora, else a tiny one); training on
# the parts it wrote completes.
check_partition() {
  local ogb=$datasets/cora id state out=$tmp/d/parts
  mkdir -p "$tmp/d"
  if [[ ! -d $ogb/raw ]]; then
    ogb=$tmp/d/tiny
    write_tiny_ogb "$ogb"
  fi
  id=$(cd "$jobs" && OGB=$ogb SPLIT=public PARTS=2 OUT=$out \
    sbatch --parsable --cpus-per-task=1 --time=30 "$src/mpi_scripts/partition.sbatch") || { fail "d: sbatch partition.sbatch"; return; }
  state=$(wait_end "$id" 120)
  if [[ $state == COMPLETED && -s $out.h5 && -s $out/part0.h5 && -s $out/part1.h5 ]] &&
    grep -q '"num_parts": 2' "$out/manifest.json"; then
    ok "d: partition.sbatch job $id wrote $(basename "$ogb") in 2 parts"
  else
    fail "d: partition.sbatch job $id: $state"; show "$(job_log retexo-partition "$id")"; return
  fi
  id=$(train "$out" "$tmp/d/train" "--rounds 5 --hidden 16 --log-every 5") || { fail "d: sbatch retexo.sbatch"; return; }
  state=$(wait_end "$id" 60)
  if [[ $state == COMPLETED && -s $tmp/d/train/metrics.json && -s $tmp/d/train/model.h5 ]]; then
    ok "d: retexo.sbatch job $id trained on partition.sbatch's parts"
  else
    fail "d: training job $id on the parts: $state"; show "$(job_log retexo "$id")"
  fi
}

# --- main ----------------------------------------------------------------------------------
# Nothing from a surrounding Slurm job may reach this cluster's commands.
for var in $(compgen -e); do [[ $var =~ ^(SLURM|SBATCH|SRUN|SALLOC)_ ]] && unset "$var"; done
t0=$(now_ms)
if ! start_cluster; then
  echo "FAIL: the Slurm cluster did not come up"
  for f in "$tmp"/log/*.log; do echo "  $f:"; show "$f"; done
  exit 1
fi
ok "cluster up in $(since "$t0") s: $(sinfo -h -N -o '%N %t' | tr '\n' ' ')"

# Job environment (sbatch exports it): the nodes share /dev/shm, where Open MPI's shared-memory
# transport crashed across them, hence TCP; ranks yield the 2 cores while they wait.
export OMPI_MCA_btl=tcp,self OMPI_MCA_mpi_yield_when_idle=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export RETEXO_MPI=$apps/retexo_mpi PATH=$apps:$PATH # partition.sbatch calls the tools by name

if ! "$apps/retexo_generate" --out "$tmp/g.h5" --nodes 2000 --features 16 --classes 4 --seed 1 >/dev/null ||
  ! "$apps/retexo_partition" --graph "$tmp/g.h5" --parts 2 --method random --out "$tmp/g2" >/dev/null; then
  echo "FAIL: generating the test graph"
  exit 1
fi

# timed CHECK [ARG]: run the check, then say how long it took.
timed() {
  local t0
  t0=$(now_ms)
  "$@"
  echo "   ($* took $(since "$t0") s)"
}
timed check_train
timed check_checkpoint
timed check_stop scancel
timed check_stop kill
timed check_partition

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
