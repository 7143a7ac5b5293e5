#!/usr/bin/env bash
# Clean shutdown: `pipescope validate` (or `pipescope calibrate` in its link phase) is killed while its
# MPI job runs (SIG = KILL, TERM or INT). Expected: 5 s later no process of the job is alive and no temporary
# directory of pipescope is left.
# Usage: signal_test.sh <pipescope> <scratch dir> <SIG> [validate|calibrate]
set -u
bin=$1 dir=$2 sig=$3 cmd=${4:-validate}
rm -rf "$dir" && mkdir -p "$dir/tmp" || exit 1
export TMPDIR=$dir/tmp  # the job's temporary directory (and Open MPI's session directory) land here
if [ "$cmd" = calibrate ]; then
  started="link benchmarks"
  "$bin" calibrate --out "$dir/p.yaml" -n 1000000 --no-progress >"$dir/log" 2>&1 &
else
  started="measuring"
  "$bin" validate --dp 1 --pp 2 --tp 1 --iterations 1000000 --warmup 1 --watchdog 600 >"$dir/log" 2>&1 &
fi
pid=$!
for _ in $(seq 1 300); do grep -q "$started" "$dir/log" && break; sleep 0.1; done
if ! grep -q "$started" "$dir/log"; then
  echo "FAIL: the measured job did not start"; cat "$dir/log"; kill -KILL "$pid"; exit 1
fi
sleep 1
job() { ps -eo pid=,args= | grep -F "$dir/tmp/" | grep -v grep; }
before=$(job | wc -l)
kill -"$sig" "$pid"
wait "$pid"
rc=$?
sleep 5
left=$(job)
dirs=$(find "$dir/tmp" -maxdepth 1 -name 'pipescope-*')
echo "$cmd, signal $sig: exit code $rc; job processes before: $before, 5 s after: $(echo -n "$left" | grep -c .)"
echo "temporary directories left: ${dirs:-none}"
tail -2 "$dir/log"
if [ -n "$left" ]; then
  echo "FAIL: job processes alive"; echo "$left"
  for p in $(echo "$left" | awk '{print $1}'); do kill -KILL "$p"; done  # only this test's job
  exit 1
fi
[ "$before" -ge 3 ] || { echo "FAIL: expected mpirun and 2 ranks running, saw $before"; exit 1; }
[ -z "$dirs" ] || { echo "FAIL: temporary directory left"; exit 1; }
case $sig in
  INT) [ "$rc" -eq 130 ] || { echo "FAIL: exit code $rc, expected 130"; exit 1; } ;;
  TERM) [ "$rc" -eq 143 ] || { echo "FAIL: exit code $rc, expected 143"; exit 1; } ;;
esac
grep -q "interrupted by signal\|$started" "$dir/log" || exit 1
echo PASS
