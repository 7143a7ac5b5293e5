#!/usr/bin/env bash
# No orphaned simulations: a command that runs its simulations in forked children (sweep, search,
# simulate --compare, repro, plan --simulate; sim/child_process.h) gets SIGTERM while they run. Expected: exit 143
# and, within 5 s, none of its children alive. A killed child can take seconds to hand back a large address space
# on a loaded machine, so the test waits for them to go rather than looking once.
# Usage: orphan_test.sh <pipescope> <source dir> <scratch dir> sweep|search|compare|repro|plan
set -u
bin=$1 src=$2 dir=$3 cmd=$4
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
# A pipeline of 64 stages and 16384 micro-batches: about 20 s per simulation, so a child that outlives the wait
# below was not killed.
cat >in.yaml <<YAML
model: {layers: 64, hidden: 64, heads: 4, vocab: 128, seq_len: 64}
cluster:
  nodes: 8
  gpus_per_node: 8
  device: {preset: A100-SXM4-80GB}
  intra_node: {fabric: nvswitch, nvlink_bw_GBps: 300, nvlink_latency_us: 1}
  network: {nic_bw_Gbps: 200, nic_latency_us: 5}
parallel: {dp: 1, pp: 64, tp: 1, micro_batch_size: 1, global_batch: 16384}
schedule: {kind: 1f1b}
YAML
case $cmd in
  sweep) args=(sweep in.yaml --vary "model.hidden=64,128,192,256" -j 2) ;;
  search) args=(search in.yaml --pp 64 --tp 1 --schedules 1f1b,gpipe --micro-batch-sizes 1 -j 2) ;;
  compare) args=(simulate in.yaml --compare 1f1b,gpipe) ;;
  repro) args=(repro terapipe --dir "$src/scenarios/terapipe") ;;
  plan) args=(plan "$src/scenarios/terapipe/setting-1.yaml" --simulate) ;;
  *) echo "unknown command $cmd"; exit 2 ;;
esac
"$bin" "${args[@]}" >log 2>&1 </dev/null &
pid=$!
descendants() {
  local p
  for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done
}
kids=""
for _ in $(seq 1 300); do
  kids=$(descendants "$pid")
  [ -n "$kids" ] && break
  sleep 0.1
done
if [ -z "$kids" ]; then
  echo "FAIL: no simulation child started"; cat log; kill -KILL "$pid"; exit 1
fi
sleep 0.5
kids=$(descendants "$pid")  # still running: this command's children at the moment of the signal
[ -n "$kids" ] || { echo "FAIL: the simulation children ended too soon for this test"; kill -KILL "$pid"; exit 1; }
kill -TERM "$pid"
wait "$pid"
rc=$?
# Alive: the process exists and is neither a zombie nor dead (a reaper may be slow to collect it).
alive() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
left=""
for _ in $(seq 1 50); do
  left=""
  for k in $kids; do alive "$k" && left="$left $k"; done
  [ -z "$left" ] && break
  sleep 0.1
done
echo "$cmd, SIGTERM: exit code $rc; children before: $(echo "$kids" | wc -w), still alive after up to 5 s: $(echo "$left" | wc -w)"
if [ -n "$left" ]; then
  echo "FAIL: simulation children left running:$left"
  for k in $left; do kill -KILL "$k" 2>/dev/null; done  # only this test's children
  exit 1
fi
[ "$rc" -eq 143 ] || { echo "FAIL: exit code $rc, expected 143"; tail -3 log; exit 1; }
echo PASS
