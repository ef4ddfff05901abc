#!/usr/bin/env bash
# A cluster of N hosts on one machine: each host is a network namespace with one link (a veth
# pair) to a switch (a Linux bridge in a namespace of its own), addresses 10.213.0.1..N/24.
# retexo_mpi runs across them with Open MPI over TCP only, so every byte between ranks on
# different hosts crosses a real socket and a (shaped) link.  Needs root and iproute2.
#
#   mpi_scripts/local_cluster.sh up N              make hosts 1..N (at most 200)
#   mpi_scripts/local_cluster.sh shape RATE        every link RATE each way (tc tbf, e.g. 100mbit)
#   mpi_scripts/local_cluster.sh shape off         remove the shaping
#   mpi_scripts/local_cluster.sh run [-np P] [--] COMMAND [ARGS...]
#                                                  mpirun -np P (default N) COMMAND from host 1,
#                                                  one host after another (--map-by node);
#                                                  mpirun options may precede COMMAND
#   mpi_scripts/local_cluster.sh run --own-data SRC DST [-np P] [--] COMMAND [ARGS...]
#                                                  the same, each rank in a mount namespace of
#                                                  its own where DST shows only SRC/h<i>, its
#                                                  host's directory, and SRC is hidden: data
#                                                  residency (an owner's data never visible to
#                                                  another host's processes)
#   mpi_scripts/local_cluster.sh counters          bytes each host sent and received on its link
#   mpi_scripts/local_cluster.sh status            hosts, addresses, shaping
#   mpi_scripts/local_cluster.sh down              delete everything `up` made
#   mpi_scripts/local_cluster.sh with N [RATE] -- COMMAND...
#                                                  up N, shape RATE, COMMAND, down, also when
#                                                  COMMAND fails or is interrupted
#
# RETEXO_CLUSTER names the cluster (default retexo): namespaces NAME-h1..NAME-hN and NAME-sw,
# state under /run/retexo-cluster/NAME, so several clusters can coexist.  The subnet is
# 10.213.K.0/24 with K = RETEXO_CLUSTER_NET (default 0).
#
# Latency is not shaped: this kernel has no netem, so links add only the queueing delay of
# their rate; perf/ adds latency in its emulated model only.  Hosts share the machine's CPUs
# and filesystem (so every host sees the same paths); only their network is separate.
set -Eeuo pipefail

name=${RETEXO_CLUSTER:-retexo}
net=${RETEXO_CLUSTER_NET:-0}
state=/run/retexo-cluster/$name
sw=$name-sw
die() { echo "local_cluster.sh: $*" >&2; exit 1; }
[[ $name =~ ^[a-z0-9]{1,8}$ ]] || die "RETEXO_CLUSTER='$name': use 1-8 lower-case letters or digits (interface names are short)"
[[ $net =~ ^[0-9]+$ ]] && (( net <= 255 )) || die "RETEXO_CLUSTER_NET='$net': not a number in 0..255"
subnet=10.213.$net

hosts() { cat "$state/hosts" 2>/dev/null || echo 0; }
need_up() { [[ -f $state/hosts ]] || die "no cluster '$name' (run: $0 up N)"; }
in_host() { local i=$1; shift; ip netns exec "$name-h$i" "$@"; }

down() {
  local namespaces pids
  # Every namespace of this cluster (also those of an `up` that failed half-way).
  namespaces=$(ip netns list | awk '{print $1}' | grep -E "^$name-(h[0-9]+|sw)$" || true)
  # Processes still running in a host (an interrupted mpirun and its ranks): TERM, then KILL
  # after 2 s; a deleted namespace would not stop them.
  pids=$(for ns in $namespaces; do ip netns pids "$ns" 2>/dev/null || true; done)
  if [[ -n $pids ]]; then
    kill -TERM $pids 2>/dev/null || true
    for _ in {1..20}; do
      pids=$(for p in $pids; do kill -0 "$p" 2>/dev/null && echo "$p" || true; done)
      [[ -z $pids ]] && break
      sleep 0.1
    done
    [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
  fi
  for ns in $namespaces; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$state"
}

up() {
  local n=$1 i
  [[ $n =~ ^[0-9]+$ ]] && (( n >= 1 && n <= 200 )) || die "up: host count '$n' is not in 1..200"
  [[ $(id -u) -eq 0 ]] || die "up: needs root (network namespaces)"
  [[ ! -e $state ]] || die "cluster '$name' is already up (run: $0 down)"
  command -v mpirun >/dev/null || die "up: mpirun not found (apt-get install openmpi-bin)"
  mkdir -p "$state"
  trap 'down' ERR
  ip netns add "$sw"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  ip -n "$sw" link set lo up
  for ((i = 1; i <= n; i++)); do
    ip netns add "$name-h$i"
    # Host end eth0 inside the host; switch end pI on the bridge.
    ip link add "$name-h$i" type veth peer name "$name-p$i"
    ip link set "$name-h$i" netns "$name-h$i"
    ip link set "$name-p$i" netns "$sw"
    in_host "$i" ip link set "$name-h$i" name eth0
    in_host "$i" ip addr add "$subnet.$i/24" dev eth0
    in_host "$i" ip link set eth0 up
    in_host "$i" ip link set lo up
    ip -n "$sw" link set "$name-p$i" name "p$i"
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
  done
  # Open MPI's launcher: "agent HOST COMMAND" runs COMMAND in the namespace of the host with
  # that address, under its own host name (Open MPI tells hosts apart by name).
  cat >"$state/agent" <<EOF
#!/bin/sh
# plm_rsh_agent for cluster '$name': agent [options] HOST COMMAND...
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1; shift
i=\${host##*.}
exec ip netns exec "$name-h\$i" unshare --uts sh -c "hostname $name-h\$i; \$*"
EOF
  chmod 755 "$state/agent"
  echo "$n" >"$state/hosts"
  echo none >"$state/rate"
  trap - ERR
  echo "cluster '$name': $n hosts $subnet.1..$subnet.$n (namespaces $name-h1..$name-h$n, switch $sw)"
}

check_rate() {
  [[ $1 == off || $1 =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit)$ ]] || die "shape: rate '$1' is not like 10gbit, 100mbit, 500kbit or off"
}

shape() {
  local rate=$1 n i
  check_rate "$rate"
  need_up
  n=$(hosts)
  if [[ $rate == off ]]; then
    for ((i = 1; i <= n; i++)); do
      in_host "$i" tc qdisc del dev eth0 root 2>/dev/null || true
      ip netns exec "$sw" tc qdisc del dev "p$i" root 2>/dev/null || true
    done
    echo none >"$state/rate"
    return
  fi
  # tbf: the bucket holds at least one full-rate millisecond and 64 KiB (a GSO frame at 10 Gb/s
  # is 64 KiB); the queue holds 200 ms of traffic.  Each link is shaped both ways, as a
  # full-duplex NIC: egress of the host's eth0 and of its switch port.
  local bits
  bits=$(awk -v r="$rate" 'BEGIN { n = r + 0; u = substr(r, length(n "") + 1);
    m = (u ~ /^g/) ? 1e9 : (u ~ /^m/) ? 1e6 : (u ~ /^k/) ? 1e3 : 1; printf "%.0f", n * m }')
  local burst=$(( bits / 8 / 1000 > 65536 ? bits / 8 / 1000 : 65536 ))
  for ((i = 1; i <= n; i++)); do
    in_host "$i" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 200ms
    ip netns exec "$sw" tc qdisc replace dev "p$i" root tbf rate "$rate" burst "$burst" latency 200ms
  done
  echo "$rate" >"$state/rate"
}

counters() {
  local n i
  need_up
  n=$(hosts)
  printf 'host\taddress\ttx_bytes\trx_bytes\n'
  for ((i = 1; i <= n; i++)); do
    printf 'h%d\t%s\t%s\t%s\n' "$i" "$subnet.$i" "$(in_host "$i" cat /sys/class/net/eth0/statistics/tx_bytes)" \
      "$(in_host "$i" cat /sys/class/net/eth0/statistics/rx_bytes)"
  done
}

# own-data SRC DST COMMAND...: in a new mount namespace, DST becomes SRC/h<i> (i from this
# host's name) and SRC an empty directory, then COMMAND runs there.
own_data() {
  local src=$1 dst=$2 i
  shift 2
  [[ $(hostname) =~ ^$name-h([0-9]+)$ ]] || die "own-data: not on a host of cluster '$name' (hostname $(hostname))"
  i=${BASH_REMATCH[1]}
  [[ -d $src/h$i ]] || die "own-data: $src/h$i: no directory for host $i"
  exec unshare --mount --propagation private sh -c \
    'mount --bind "$1/h$3" "$2" && mount -t tmpfs -o size=64k,mode=0755 retexo-hidden "$1" && shift 3 && exec "$@"' \
    own-data "$src" "$dst" "$i" "$@"
}

run() {
  local n np hostlist i own=()
  need_up
  n=$(hosts)
  np=$n
  if [[ ${1:-} == --own-data ]]; then
    [[ $# -ge 3 && -d $2 && -d $3 ]] || die "run --own-data SRC DST: both must be directories"
    local src dst
    src=$(cd "$2" && pwd) dst=$(cd "$3" && pwd)
    [[ $dst/ != "$src"/* && $src/ != "$dst"/* ]] || die "run --own-data: SRC and DST must not contain each other"
    own=("$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")" own-data "$src" "$dst")
    shift 3
  fi
  if [[ ${1:-} == -np || ${1:-} == -n ]]; then np=$2; shift 2; fi
  [[ ${1:-} == -- ]] && shift
  [[ $# -gt 0 ]] || die "run: no command"
  [[ $np =~ ^[0-9]+$ ]] && (( np >= 1 )) || die "run: -np '$np' is not a positive number"
  # One slot per host per ceil(np / n) ranks, filled host after host.
  local slots=$(( (np + n - 1) / n ))
  hostlist=
  for ((i = 1; i <= n; i++)); do hostlist+=${hostlist:+,}$subnet.$i:$slots; done
  local env=()
  [[ $(id -u) -eq 0 ]] && env+=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
  # - btl tcp,self: no shared memory between ranks, even two on one host (all bytes on sockets);
  # - yield_when_idle: a rank waiting for data gives its core to the kernel's packet processing
  #   (with busy-waiting ranks a 1-byte round trip took 7.5 ms instead of 0.03 ms on 2 cores);
  # - bind-to none: every host's ranks may use every CPU (hosts share the machine's cores);
  # - OMP_NUM_THREADS defaults to 1 (hosts share the machine's cores);
  # - the all-reduce: ring from 64 KiB on 3 ranks and more (mpi_scripts/allreduce.rules, as
  #   retexo_run.sh; OMPI_MCA_coll_tuned_use_dynamic_rules=0 turns it off).
  env+=(OMPI_MCA_mpi_yield_when_idle=1 "OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}")
  in_host 1 env "${env[@]}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name-h1" \
    mpirun -np "$np" --host "$hostlist" --map-by node --bind-to none --oversubscribe \
    --mca plm_rsh_agent "$state/agent" --mca btl tcp,self \
    --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" \
    --mca coll_tuned_use_dynamic_rules "${OMPI_MCA_coll_tuned_use_dynamic_rules:-1}" \
    --mca coll_tuned_dynamic_rules_filename "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/allreduce.rules" \
    -x OMP_NUM_THREADS -x OMPI_MCA_mpi_yield_when_idle -x "RETEXO_CLUSTER=$name" "${own[@]}" "$@"
}

status() {
  need_up
  echo "cluster '$name': $(hosts) hosts on $subnet.0/24, links shaped: $(cat "$state/rate")"
  counters
}

cmd=${1:-}
[[ $# -gt 0 ]] && shift
case $cmd in
  up) [[ $# -eq 1 ]] || die "usage: $0 up N"; up "$1" ;;
  down) down ;;
  shape) [[ $# -eq 1 ]] || die "usage: $0 shape RATE|off (latency cannot be shaped here: no netem)"; shape "$1" ;;
  counters) counters ;;
  status) status ;;
  run) run "$@" ;;
  own-data) [[ $# -ge 3 ]] || die "usage: $0 own-data SRC DST COMMAND..."; own_data "$@" ;;
  with)
    [[ $# -ge 3 ]] || die "usage: $0 with N [RATE] -- COMMAND..."
    n=$1; shift
    rate=off
    if [[ $1 != -- ]]; then rate=$1; shift; fi
    [[ ${1:-} == -- ]] || die "with: expected -- before the command"
    shift
    check_rate "$rate"
    up "$n"
    trap 'down' EXIT
    trap 'exit 130' INT TERM
    shape "$rate"
    # Waited for in the background: INT/TERM then reach the traps at once, and `down` stops
    # the command's processes in the hosts.
    "$@" &
    wait $!
    ;;
  *) die "usage: $0 up N | shape RATE|off | run [--own-data SRC DST] [-np P] [--] COMMAND... | counters | status | down | with N [RATE] -- COMMAND..." ;;
esac
