#!/usr/bin/env bash
# mpi_scripts/local_cluster.sh: hosts in network namespaces, retexo_mpi across them over TCP,
# shaped links, and nothing left behind (also when the command fails).
# Usage: local_cluster_test.sh SOURCE_DIR APPS_DIR
set -u
src=$1
apps=$2
cluster=$src/mpi_scripts/local_cluster.sh
if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: needs root (network namespaces)"; exit 0; fi
for tool in ip tc mpirun unshare; do
  command -v $tool >/dev/null || { echo "SKIPPED: $tool not installed"; exit 0; }
done
export RETEXO_CLUSTER=rxt$$ RETEXO_CLUSTER_NET=77
RETEXO_CLUSTER=${RETEXO_CLUSTER:0:8}
tmp=$(mktemp -d)
trap '"$cluster" down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
failures=0
check() { # check DESCRIPTION command...: the command succeeds
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}
namespaces() { ip netns list | awk '{print $1}' | grep -cE "^$RETEXO_CLUSTER-(h[0-9]+|sw)$"; }
sum_column() { "$cluster" counters | awk -v c="$1" 'NR > 1 { s += $c } END { printf "%.0f\n", s }'; }
metric() { # metric FILE EXPR: EXPR of the run r in a metrics file
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); r=j['runs'][0] if 'runs' in j else j; print($2)" "$1"
}

# Bad input: clear errors, nothing made.
out=$("$cluster" up 0 2>&1)
check "up 0 is refused, naming the count" grep -q "host count '0'" <<<"$out"
out=$(RETEXO_CLUSTER=Bad_Name "$cluster" up 2 2>&1)
check "a bad cluster name is refused" grep -q "RETEXO_CLUSTER='Bad_Name'" <<<"$out"
out=$("$cluster" shape 10mbit 2>&1)
check "shape without a cluster names the missing cluster" grep -q "no cluster '$RETEXO_CLUSTER'" <<<"$out"
check "nothing made by refused commands" test "$(namespaces)" -eq 0

"$apps/retexo_generate" --out "$tmp/g.h5" --nodes 3000 --features 32 --classes 4 --avg-degree 8 --seed 1 >/dev/null
"$cluster" up 3 >/dev/null
check "up 3 makes three hosts and a switch" test "$(namespaces)" -eq 4
out=$("$cluster" up 3 2>&1)
check "a second up is refused" grep -q "already up" <<<"$out"
names=$("$cluster" run hostname | sort -u | tr '\n' ' ')
check "one rank per host, each under its host's name ($names)" \
  test "$names" == "$RETEXO_CLUSTER-h1 $RETEXO_CLUSTER-h2 $RETEXO_CLUSTER-h3 "

# retexo_mpi across the hosts: the links carry at least the ledger's bytes (payload) and at
# most 10% more (TCP/IP headers, the launch), every host sends.
run_retexo() { # metrics.json [extra options]
  local json=$1
  shift
  "$cluster" run "$apps/retexo_mpi" --data "$tmp/g.h5" --partition random --mode retexo --rounds 20 --hidden 64 \
    --log-every 1000 --metrics-out "$json" "$@" >"$tmp/run.log" 2>&1
}
tx0=$(sum_column 3)
check "retexo_mpi runs across 3 hosts" run_retexo "$tmp/m.json"
tx1=$(sum_column 3)
ledger=$(metric "$tmp/m.json" "r['bytes']['total']")
echo "ledger $ledger bytes, links sent $((tx1 - tx0)) bytes"
check "links carried the ledger's bytes and at most 10% + 200 kB more" \
  python3 -c "import sys; l, w = int(sys.argv[1]), int(sys.argv[2]); sys.exit(not (l <= w <= 1.1 * l + 2e5))" "$ledger" "$((tx1 - tx0))"
check "every host sent" bash -c "\"$cluster\" counters | awk 'NR > 1 && \$3 < 100000 { bad = 1 } END { exit bad }'"

# Shaping: a tbf on both ends of every link; a run cannot be faster than its busiest host's
# bytes at the rate (a lower bound, not a timing expectation).
"$cluster" shape 10mbit
check "host 2's link is shaped" bash -c "ip netns exec $RETEXO_CLUSTER-h2 tc qdisc show dev eth0 | grep -q 'tbf.*rate 10Mbit'"
check "switch port 3 is shaped" bash -c "ip netns exec $RETEXO_CLUSTER-sw tc qdisc show dev p3 | grep -q 'tbf.*rate 10Mbit'"
start=$(date +%s.%N)
check "retexo_mpi runs over 10 Mb/s links" run_retexo "$tmp/m2.json" --seed 2
end=$(date +%s.%N)
busiest=$(metric "$tmp/m2.json" "r['max_rank_bytes']")
check "the shaped run took at least its busiest rank's $busiest bytes at 10 Mb/s" \
  python3 -c "import sys; sys.exit(not (float(sys.argv[2]) - float(sys.argv[1]) >= float(sys.argv[3]) * 8 / 10e6))" "$start" "$end" "$busiest"
"$cluster" shape off
check "shape off removes the qdiscs" bash -c "! ip netns exec $RETEXO_CLUSTER-h1 tc qdisc show dev eth0 | grep -q tbf"
# A command left running in a host (an interrupted run) does not survive `down`.
ip netns exec "$RETEXO_CLUSTER-h2" sleep 600 &
sleeper=$!
sleep 0.2
"$cluster" down
check "down stops what still runs in a host" bash -c "! kill -0 $sleeper 2>/dev/null"
check "down deletes every namespace and the state" bash -c "test $(namespaces) -eq 0 && test ! -e /run/retexo-cluster/$RETEXO_CLUSTER"

# `with`: up, command, down, also when the command fails; the command's exit status.
"$cluster" with 2 100mbit -- "$cluster" run "$apps/retexo_mpi" --data "$tmp/g.h5" --no-such-option >"$tmp/with.log" 2>&1
rc=$?
check "with: a failing command's status comes back ($rc)" test "$rc" -ne 0
check "with: retexo_mpi's error is shown" grep -q "no-such-option" "$tmp/with.log"
check "with: nothing left after the failure" test "$(namespaces)" -eq 0
check "with: a working command succeeds" "$cluster" with 2 -- "$cluster" run hostname
check "with: nothing left after success" test "$(namespaces)" -eq 0

# with, interrupted: TERM ends it at once and takes everything down, its command included.
"$cluster" with 2 -- "$cluster" run sleep 600 >/dev/null 2>&1 &
with_pid=$!
for _ in {1..50}; do pgrep -f "^sleep 600$" >/dev/null && break; sleep 0.1; done
kill -TERM "$with_pid"
for _ in {1..50}; do kill -0 "$with_pid" 2>/dev/null || break; sleep 0.1; done
check "with: TERM ends it within 5 s" bash -c "! kill -0 $with_pid 2>/dev/null"
check "with: nothing left after TERM (namespaces, the command)" bash -c "test $(namespaces) -eq 0 && ! pgrep -f '^sleep 600$' >/dev/null"

# Data residency: two owners' shards, each host's ranks see only their own owner's directory
# (run --own-data), and training from them gives the partitioned directory's predictions.
"$apps/retexo_generate" --out "$tmp/r.h5" --nodes 2000 --features 16 --classes 3 --avg-degree 6 --seed 4 >/dev/null
"$apps/retexo_shard" --graph "$tmp/r.h5" --parts 2 --method metis --out "$tmp/shards" >/dev/null
"$apps/retexo_partition" --graph "$tmp/r.h5" --parts 2 --method metis --out "$tmp/parts" >/dev/null
mkdir -p "$tmp/owners/h1" "$tmp/owners/h2" "$tmp/mnt"
mv "$tmp/shards/shard0.h5" "$tmp/owners/h1/"
mv "$tmp/shards/shard1.h5" "$tmp/owners/h2/"
"$cluster" up 2 >/dev/null
seen=$("$cluster" run --own-data "$tmp/owners" "$tmp/mnt" sh -c "echo \$(hostname): \$(ls $tmp/mnt) / \$(ls $tmp/owners | wc -l)" | sort)
check "each host sees its own shard only, and no owner's directory ($seen)" \
  test "$seen" == "$RETEXO_CLUSTER-h1: shard0.h5 / 0"$'\n'"$RETEXO_CLUSTER-h2: shard1.h5 / 0"
train=(--mode both --rounds 10 --epochs 5 --hidden 32 --std-hidden 32 --deterministic --log-every 1000)
check "retexo_mpi trains from the owner shards, each rank reading its host's own" \
  "$cluster" run --own-data "$tmp/owners" "$tmp/mnt" "$apps/retexo_mpi" --data "$tmp/mnt" "${train[@]}" \
  --predict-out "$tmp/own-pred.h5" --metrics-out "$tmp/own.json"
check "the partitioned directory's run" "$cluster" run "$apps/retexo_mpi" --data "$tmp/parts" "${train[@]}" \
  --predict-out "$tmp/dir-pred.h5" --metrics-out "$tmp/dir.json" >/dev/null
check "owner shards and the partitioned directory give the same predictions, bit for bit" \
  cmp "$tmp/own-pred.h5" "$tmp/dir-pred.h5"
check "and the same accuracies" test "$(metric "$tmp/own.json" "r['accuracy']")" == "$(metric "$tmp/dir.json" "r['accuracy']")"
"$cluster" down

if [[ $failures -gt 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "all local_cluster checks passed"
