#!/usr/bin/env bash
# Reliability probes: bad input of every class must end with its documented exit code and a message
# naming the problem, fast and small; never a crash, a hang or a silent acceptance. One case per ctest test:
#   probe.sh <pipescope> <source dir> <scratch dir> <case>
# Each case writes <scratch>/<case>.result: class, exit code, wall seconds, peak RSS (KB), verdict; `probe.sh
# ... table` prints them all, `probe.sh x x <scratch> summary` the per-class table of tests/reliability/README.md.
set -u
bin=$1 src=$2 work=$3 case=$4
mkdir -p "$work"
cd "$work" || exit 1
if [ "$case" != table ] && [ "$case" != summary ]; then
  rm -rf "$case" && mkdir "$case" && cd "$case" || exit 1  # each case its own files (ctest runs them in parallel)
fi
base=$src/tests/reliability/inputs/base.yaml

# The base scenario with one line replaced: with OLD NEW OUT.
with() { sed "s|$1|$2|" "$base" >"$3"; }
# A scenario of the given shape (pp dp v global_batch seq_slices seq_len kind) on 8-GPU nodes.
shape() {
  cat >"$1" <<YAML
model: {layers: $(($2 * $4)), hidden: 64, heads: 4, vocab: 128, seq_len: $7}
cluster:
  nodes: $((($2 * $3 + 7) / 8))
  gpus_per_node: 8
  device: {preset: A100-SXM4-80GB}
  intra_node: {fabric: nvswitch, nvlink_bw_GBps: 300, nvlink_latency_us: 1}
  network: {nic_bw_Gbps: 200, nic_latency_us: 5}
parallel: {dp: $3, pp: $2, tp: 1, v: $4, micro_batch_size: 1, global_batch: $5}
schedule: {kind: $8, seq_slices: $6}
YAML
}

# A two-stage scenario on one node whose schedule is the file s.csv: csv_scenario OUT.
csv_scenario() {
  sed 's|nodes: 2|nodes: 1|; s|pp: 4, tp: 1, micro_batch_size: 1, global_batch: 8|pp: 2, tp: 1, micro_batch_size: 1, global_batch: 2|
       s|schedule: {kind: 1f1b}|schedule: {kind: file, file: s.csv}|' "$base" >"$1"
}

# run CLASS RC REGEX [--ulimit KB] -- ARGS...: runs pipescope ARGS, checks the exit code and the output.
run() {
  local cls=$1 want=$2 re=$3
  shift 3
  local lim=""
  if [ "$1" = --ulimit ]; then lim=$2; shift 2; fi
  [ "$1" = -- ] && shift
  local out=$case.out tm=$case.time
  (
    [ -n "$lim" ] && ulimit -v "$lim"
    exec timeout -s KILL 60 /usr/bin/time -f "%e %M" -o "$tm" "$bin" "$@"
  ) >"$out" 2>&1 </dev/null
  local rc=$?
  local wall=NA rss=NA
  [ -s "$tm" ] && read -r wall rss < <(tail -1 "$tm")
  sed -i '/^Command exited with non-zero status/d' "$out"
  cat "$out"
  local verdict=ok
  if [ "$rc" -eq 137 ]; then verdict=hang; elif [ "$rc" -gt 128 ] || grep -q "Command terminated by signal" "$tm" 2>/dev/null; then
    verdict=crash
  elif [ "$rc" -eq 0 ] && [ "$want" != 0 ]; then verdict=silent; elif [ "$rc" -ne "$want" ]; then verdict=wrong-code; fi
  if [ "$verdict" = ok ] && ! grep -Eq -- "$re" "$out"; then verdict=unclear; fi
  # A refusal must be small (docs/limits.md): peak RSS under 200 MB (0: no bound, e.g. under ASan's shadow memory).
  local max_kb=${PIPESCOPE_PROBE_MAX_KB:-204800}
  if [ "$verdict" = ok ] && [ "$max_kb" -gt 0 ] && [ "$rss" != NA ] && [ "$rss" -gt "$max_kb" ]; then verdict=heavy; fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$cls" "$case" "$rc" "$wall" "$rss" "$verdict" >"../$case.result"
  echo "case $case ($cls): exit $rc (expected $want), ${wall} s, ${rss} KB peak: $verdict"
  [ "$verdict" = ok ]
}

if [ "$case" = table ]; then
  printf 'class\tcase\texit\twall_s\tpeak_KB\tverdict\n'
  cat ./*.result 2>/dev/null | sort
  exit 0
fi
# The note's table: per class, the cases and how many crashed, hung, were silently accepted or otherwise wrong
# (wrong exit code, unclear message, over 200 MB), and the slowest refusal's wall time and the largest peak RSS.
if [ "$case" = summary ]; then
  cat ./*.result 2>/dev/null | sort | awk -F'\t' '
    { c = $1; n[c]++; v = $6
      if (v == "crash") cr[c]++; else if (v == "hang") h[c]++; else if (v == "silent") si[c]++; else if (v != "ok") o[c]++
      if ($4 != "NA" && $4 + 0 > w[c]) w[c] = $4 + 0
      if ($5 != "NA" && $5 + 0 > m[c]) m[c] = $5 + 0 }
    END { printf "class\tcases\tcrashes\thangs\tsilent\tother_wrong\tslowest_s\tpeak_MB\n"
          for (c in n) { printf "%s\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.0f\n", c, n[c], cr[c], h[c], si[c], o[c], w[c],
                                m[c] / 1024 | "sort"
                         N += n[c]; CR += cr[c]; H += h[c]; S += si[c]; O += o[c]; if (w[c] > W) W = w[c]; if (m[c] > M) M = m[c] }
          close("sort")
          printf "all\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.0f\n", N, CR, H, S, O, W, M / 1024 }'
  exit 0
fi

case $case in
  # ---- physical ranges (core/util/ranges.h)
  range_nvlink_latency_1e14)
    # It aborted inside SimGrid and left an empty --json file.
    with "nvlink_latency_us: 1}" "nvlink_latency_us: 1e14}" in.yaml
    run ranges 1 "cluster.intra_node.nvlink_latency_us: 100000000000000 is outside the plausible range \\[0, 1000000\\]" -- simulate in.yaml --json o.json || exit 1
    [ ! -e o.json ] || { echo "FAIL: o.json was written"; exit 1; } ;;
  range_nvlink_bw_tiny)
    with "nvlink_bw_GBps: 300" "nvlink_bw_GBps: 1e-300" in.yaml
    run ranges 1 "nvlink_bw_GBps: 1e-300 is outside the plausible range" -- simulate in.yaml ;;
  range_nvlink_bw_huge)
    with "nvlink_bw_GBps: 300" "nvlink_bw_GBps: 1e305" in.yaml
    run ranges 1 "nvlink_bw_GBps: 1e\+305 is outside the plausible range" -- simulate in.yaml ;;
  range_gemm_efficiency_tiny)
    with "preset: A100-SXM4-80GB}" "preset: A100-SXM4-80GB, gemm_efficiency: 1e-300}" in.yaml
    run ranges 1 "gemm_efficiency: 1e-300 is outside" -- simulate in.yaml ;;
  range_kernel_launch_huge)
    with "preset: A100-SXM4-80GB}" "preset: A100-SXM4-80GB, kernel_launch_us: 1e300}" in.yaml
    run ranges 1 "kernel_launch_us: 1e\+300 is outside" -- simulate in.yaml ;;
  range_optimizer_bytes_huge)
    { cat "$base"; echo "training: {optimizer_bytes_per_param: 1e300}"; } >in.yaml
    run ranges 1 "training.optimizer_bytes_per_param: 1e\+300 is outside the plausible range" -- simulate in.yaml ;;
  range_sm_count_huge)
    with "preset: A100-SXM4-80GB}" "preset: A100-SXM4-80GB, sm_count: 2000000000}" in.yaml
    run ranges 1 "cluster.device.sm_count: 2000000000 is outside the plausible range \\[1, 10000\\]" -- simulate in.yaml ;;
  range_grad_bucket_tiny)
    { cat "$base"; echo "training: {grad_bucket_MB: 1e-300}"; } >in.yaml
    run ranges 1 "training.grad_bucket_MB: 1e-300 is outside the plausible range" -- simulate in.yaml ;;
  range_fp8_without_bf16)
    # The refusal named the FP8 peak (present) instead of the missing bf16 one.
    sed "s|preset: A100-SXM4-80GB}|preset: H100-SXM, peak_tflops_bf16: 0}|" "$base" >in.yaml
    echo "training: {dtype: fp8}" >>in.yaml
    run ranges 1 "H100-SXM has no bf16 peak \\(peak_tflops_bf16 = 0\\)" -- simulate in.yaml ;;
  # ---- strict YAML types
  type_quoted_int)
    with "pp: 4," 'pp: "4",' in.yaml
    run types 1 'parallel.pp: expected an integer, got the quoted string "4"' -- simulate in.yaml ;;
  type_tagged_int)
    with "pp: 4," "pp: !foo 4," in.yaml
    run types 1 "parallel.pp: expected an integer, got a value tagged !foo" -- simulate in.yaml ;;
  # ---- input files
  file_unterminated_quote)
    printf 'name: "abc\nmodel: {preset: gpt3-1b}\n' >in.yaml
    run files 1 "in.yaml:1:7: \(syntax\): unterminated quoted string" -- simulate in.yaml ;;
  file_directory)
    mkdir -p adir
    run files 1 "adir: is a directory, not a scenario file" -- simulate adir ;;
  file_dev_zero)
    run files 1 "/dev/zero: is not a regular file" -- simulate /dev/zero ;;
  file_csv_dev_zero)
    # The measured-runs CSV skipped the input-file rules: repro vtrain --csv /dev/zero grew to 3.7 GB.
    run files 1 "/dev/zero: is not a regular file \\(a device, FIFO or socket\\), not a CSV file" -- repro vtrain \
      --csv /dev/zero ;;
  file_too_large)
    { cat "$base"; head -c 17000000 /dev/zero | tr '\0' '#'; } >big.yaml
    run files 1 "big.yaml: 17000[0-9]+ bytes: larger than the 16 MiB limit" -- simulate big.yaml ;;
  file_not_utf8)
    { printf 'name: "ab\xffc"\n'; cat "$base"; } >in.yaml
    run files 1 "in.yaml:1:10: invalid UTF-8 \\(byte 0xFF\\)" -- simulate in.yaml ;;
  file_nul_byte)
    # A NUL byte was taken into a quoted name without a word (elsewhere yaml-cpp misread what follows).
    { printf 'name: "a\0b"\n'; grep -v '^name:' "$base"; } >in.yaml
    run files 1 "in.yaml:1:9: a NUL byte \\(0x00\\)" -- simulate in.yaml ;;
  file_yaml_deep_nesting)
    # yaml-cpp's nesting limit said only "bad file".
    { cat "$base"; printf 'x: '; head -c 600 /dev/zero | tr '\0' '['; head -c 600 /dev/zero | tr '\0' ']'; echo; } >in.yaml
    run files 1 "in.yaml:.*lists or mappings nested more than [0-9]+ levels deep" -- simulate in.yaml ;;
  file_csv_bom)
    # A schedule CSV saved with a byte-order mark (as spreadsheets do): "no stage number" in its first cell.
    csv_scenario in.yaml
    printf '\xef\xbb\xbf0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n' >s.csv
    run files 0 "iteration time" -- simulate in.yaml ;;
  file_csv_number_too_large)
    csv_scenario in.yaml
    printf '0F0,0F1,,0B0,,0B1\n,99999999999F0,1B0,1F1,1B1\n' >s.csv
    run files 1 "s.csv: rank 1 \\(row 2, column 2\\): \"99999999999F0\": the stage number is over 1000000000" -- \
      simulate in.yaml ;;
  file_yaml_alias_recursive)
    # An alias to the node that holds it segfaulted simulate, search and sweep (a node that contains itself).
    { printf 'model: &m {preset: gpt3-1b, x: *m}\n'; grep -v '^model:' "$base"; } >in.yaml
    run files 1 "in.yaml:1:32: \\(syntax\\): this alias refers to a node that contains it" -- simulate in.yaml ;;
  file_yaml_alias_laughs)
    # Aliases of aliases ("billion laughs"): 600 bytes that stand for 43 million list items.
    { grep -v '^schedule:' "$base"
      printf 'schedule: {kind: terapipe, slice_tokens: [&a [1,1,1,1,1,1,1,1,1]'
      prev=a
      for n in b c d e f g h; do printf ', &%s [*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s]' $n $prev $prev $prev $prev $prev $prev $prev $prev $prev; prev=$n; done
      printf ']}\n'; } >in.yaml
    run files 1 "in.yaml:.*YAML aliases expand the document to more than 1000000 nodes" -- simulate in.yaml ;;
  file_values_14mb)
    # A flat list of 7 million values under the 16 MiB limit took 34 s and 3.5 GB to be refused.
    { grep -v '^schedule:' "$base"; printf 'schedule: {kind: terapipe, slice_tokens: ['
      yes '1,' | head -n 7000000 | tr -d '\n'; printf '1]}\n'; } >in.yaml
    run files 1 "in.yaml:.*the document has more than 1000000 values" -- simulate in.yaml ;;
  file_profile_truncated)
    head -n 12 "$src/calib/profiles/dgx-a100.analytic.yaml" >cut.yaml
    run profiles 1 "cut.yaml:.*complete: missing" -- simulate --profile cut.yaml ;;
  file_profile_layers_deleted)
    # A measured profile without its layers: section (it was accepted, iteration -0.7%).
    awk '/^layers:/{skip=1; next} /^[a-z]/{skip=0} !skip' "$src/fuzz/corpus/fuzz_profile/cpu-small.yaml" >nolayers.yaml
    run profiles 1 "--profile nolayers.yaml:.*layers: missing: the profile lists section layers" -- simulate "$base" \
      --profile nolayers.yaml ;;
  file_profile_bad_value)
    # A profile's bad value was blamed on the scenario file.
    sed 's/intra: {latency_us: 1, bw_GBps: 300/intra: {latency_us: 1, bw_GBps: -5/' \
      "$src/calib/profiles/dgx-a100.analytic.yaml" >badval.yaml
    run profiles 1 "--profile badval.yaml:26:35: links.intra.bw_GBps: must be > 0, got -5" -- simulate "$base" \
      --profile badval.yaml ;;
  file_slice_tokens_24mb)
    # A 24 MB slice_tokens list took 34 s and 5.9 GB to be rejected inside the YAML parser.
    { sed "s|schedule: {kind: 1f1b}|schedule: {kind: terapipe, slice_tokens: [|" "$base"
      head -c 24000000 /dev/zero | tr '\0' '1' | sed 's/1/1,/g' | head -c 24000000; echo "1]}"; } >st.yaml
    run files 1 "st.yaml: 24000[0-9]+ bytes: larger than the 16 MiB limit" -- simulate st.yaml ;;
  file_profile_optimizer_huge)
    # An optimizer step of 1e300 us per million parameters gave a 1e302-second iteration with exit 0.
    sed 's/^sections: \[device, links\]/sections: [device, links, optimizer_us_per_mparam]/
         s/^complete: true/optimizer_us_per_mparam: 1e300\ncomplete: true/' \
      "$src/calib/profiles/dgx-a100.analytic.yaml" >opt.yaml
    run profiles 1 "opt.yaml:[0-9]+:[0-9]+: optimizer_us_per_mparam: 1e\\+300 is outside the plausible range" -- \
      simulate "$base" --profile opt.yaml ;;
  file_profile_duplicate_key)
    # A key given twice: the second value was ignored without a word.
    awk '{print} /^  intra: \{latency_us/ && !d {print; d=1}' "$src/calib/profiles/dgx-a100.analytic.yaml" >dup.yaml
    run profiles 1 "dup.yaml:[0-9]+:[0-9]+: links.intra: duplicate key" -- simulate "$base" --profile dup.yaml ;;
  file_profile_section_deleted)
    grep -v "^links:\|^  inter:\|^  intra:" "$src/calib/profiles/dgx-a100.analytic.yaml" >nolinks.yaml
    run profiles 1 "nolinks.yaml:.*links: missing: the profile lists section links" -- simulate --profile nolinks.yaml ;;
  # ---- work estimate (core/plan/work_estimate.h)
  work_pp_10000)
    shape in.yaml 10000 1 1 10000 1 64 1f1b
    run work 1 "work estimate: .* schedule ops" -- simulate in.yaml ;;
  work_pp_100000)
    shape in.yaml 100000 1 1 100000 1 64 1f1b
    sed -i 's/layers: [0-9]*/layers: 10000/' in.yaml
    run work 1 "parallel.pp: pp \\* v = 100000 model chunks but the model has only 10000 layers" -- simulate in.yaml ;;
  work_dp_1000000)
    shape in.yaml 1 1000000 1 1000000 1 64 1f1b
    run work 1 "work estimate: .* schedule ops" -- simulate in.yaml ;;
  work_dp_32768_unfolded)
    shape in.yaml 1 32768 1 32768 1 64 1f1b
    run work 1 "over the limit of 1e\+07 ops .* collective member pairs .* --allow-large" -- simulate in.yaml ;;
  work_seq_slices_1000000)
    shape in.yaml 8 1 1 8 1000000 1000000 terapipe
    run work 1 "work estimate: .* schedule ops" -- simulate in.yaml ;;
  work_v_1000)
    shape in.yaml 8 1 1000 8000 1 64 interleaved
    run work 1 "work estimate: .* schedule ops" -- simulate in.yaml ;;
  work_global_batch_1e8)
    shape in.yaml 8 1 1 100000000 1 64 1f1b
    run work 1 "work estimate: .* schedule ops" -- simulate in.yaml ;;
  work_global_batch_1e9)
    shape in.yaml 8 1 1 1000000000 1 64 1f1b
    run work 1 "parallel.global_batch: 1000000000 is outside the plausible range" -- simulate in.yaml ;;
  work_allow_large_under_ulimit)
    shape in.yaml 1 65536 1 65536 1 64 1f1b
    run work 1 "memory available to this process" --ulimit 2000000 -- simulate in.yaml --allow-large ;;
  work_pp_10000_under_ulimit)
    shape in.yaml 10000 1 1 10000 1 64 1f1b
    run work 1 "work estimate" --ulimit 1000000 -- simulate in.yaml --allow-large ;;
  work_sweep_1e6_points)
    v=$(seq -s, 1 100)
    run work 1 "sweep: work estimate: 1e\+06 runs, about .* hours; over the limit of 1e\+04 runs .*--allow-large" -- \
      sweep "$base" --vary "parallel.global_batch=$v" --vary "model.layers=$v" --vary "model.hidden=$v" ;;
  work_sweep_hours)
    # 2000 points of about 6 s each (estimated; 2 s measured): under the count limit, over the time limit.
    shape in.yaml 64 8 1 20000 1 64 1f1b
    run work 1 "sweep: work estimate: 2e\+03 runs, about .* hours; over the limit of 1 hour .*--allow-large" -- \
      sweep in.yaml --vary "model.hidden=$(seq -s, 8 8 160)" --vary "model.heads=$(seq -s, 1 1 100)" ;;
  work_plan_tables)
    run work 1 "plan: work estimate: .* slice-time table cells, about .*; over the limit of 4e\+06 .*--allow-large" -- \
      plan "$src/scenarios/terapipe/setting-1.yaml" --grain 1 --max-micro-batch 1000 ;;
  work_plan_simulate)
    # --simulate's finest uniform slicing of a 1M-token sequence: 131072 slices per micro-batch.
    shape in.yaml 8 1 1 64 1 1048576 terapipe
    run work 1 "plan: work estimate: .*the largest point: 262144 slices: .* schedule ops.*--simulate" -- plan in.yaml --grain 65536 --simulate ;;
  work_calibrate_micro_batch_huge)
    # A micro-batch of a million sequences ran 40 s to 7.9 GB before the compute benchmarks gave up (exit 4).
    run work 1 "--micro-batch 1000000: one micro-batch of 1000000 x 2048 tokens needs about [0-9]+ GB of host memory" \
      -- calibrate --micro-batch 1,2,1000000 --out c.yaml ;;
  work_plan_max_batch)
    run work 1 "plan --max-batch: work estimate: 2.*e\+05 sequences per replica, .*Lower --memory-GB, or pass --allow-large" -- \
      plan "$src/scenarios/terapipe/setting-1.yaml" --max-batch --memory-GB 1e5 ;;
  work_search_batch_1e8)
    # dp 1 points with 1e8 micro-batches: stage 1 alone would build schedules of 1e9 ops.
    shape in.yaml 8 1 1 100000000 1 64 1f1b
    run work 1 "search: work estimate: .* configurations, about .*the largest" -- search in.yaml ;;
  # ---- outputs (core/util/atomic_file.h)
  out_same_path)
    run outputs 1 "--trace o.json: the same file as --json" -- simulate "$base" --json o.json --trace o.json ;;
  out_dev_full)
    run outputs 3 "--json /dev/full: write failed: No space left on device" -- simulate "$base" --json /dev/full ;;
  out_missing_dir)
    run outputs 1 "--json nodir/o.json: directory nodir does not exist" -- simulate "$base" --json nodir/o.json ;;
  out_failed_run_keeps_previous)
    # A failed run truncated the previous good output files (JSON, SVG) to 0 bytes.
    echo '{"previous": true}' >prev.json
    echo '<svg>previous</svg>' >prev.svg
    with "nvlink_latency_us: 1}" "nvlink_latency_us: 1e14}" in.yaml
    run outputs 1 "outside the plausible range" -- simulate in.yaml --json prev.json --timeline prev.svg || exit 1
    grep -q '"previous": true' prev.json || { echo "FAIL: prev.json was changed"; exit 1; }
    grep -q '<svg>previous</svg>' prev.svg || { echo "FAIL: prev.svg was changed"; exit 1; } ;;
  out_two_on_stdout)
    run outputs 1 "--trace -: standard output is already taken by --json" -- simulate "$base" --json - --trace - ;;
  out_calibrate_missing_dir)
    run outputs 1 "--out nodir/p.yaml: directory nodir does not exist" -- calibrate --no-links --out nodir/p.yaml ;;
  # ---- command-line values (CLI11 validators; main.cc maps CLI11's codes to 1)
  cli_import_parallel_overflow)
    # tp x pp = 2^32 overflowed int and import died of SIGFPE.
    run cli 1 "tp x pp x cp = 4294967296 GPUs is over" -- import megatron -- --num-layers 24 --hidden-size 2048 \
      --num-attention-heads 16 --seq-length 2048 --micro-batch-size 1 --global-batch-size 64 \
      --tensor-model-parallel-size 65536 --pipeline-model-parallel-size 65536 ;;
  cli_import_error_names_the_flag)
    # The loader's refusal pointed at "<import megatron>:4:42", a line of YAML the user never saw.
    run cli 1 "import megatron: --num-attention-heads \\(scenario key model.heads\\): model.hidden = 2048 is not divisible" \
      -- import megatron -- --num-layers 24 --hidden-size 2048 --num-attention-heads 15 --seq-length 2048 \
      --micro-batch-size 1 --global-batch-size 64 ;;
  cli_validate_pp_0)
    run cli 1 "--pp: Value 0 not in range" -- validate --pp 0 ;;
  cli_validate_pp_negative)
    run cli 1 "--pp: Value -2 not in range" -- validate --pp -2 ;;
  cli_validate_slices_0)
    run cli 1 "--slices: Value 0 not in range" -- validate --slices 0 ;;
  cli_calibrate_hidden_0)
    run cli 1 "--hidden: must be >= 1, got 0" -- calibrate --hidden 0 --no-links --out p.yaml ;;
  cli_plan_memory_0)
    run cli 1 "--memory-GB: value 0 not in range" -- plan "$base" --max-batch --memory-GB 0 ;;
  cli_plan_memory_nan)
    run cli 1 "--memory-GB: expected a finite number, got 'nan'" -- plan "$base" --max-batch --memory-GB nan ;;
  cli_plan_memory_inf)
    run cli 1 "--memory-GB: expected a finite number, got 'inf'" -- plan "$base" --max-batch --memory-GB inf ;;
  cli_show_worker_negative)
    run cli 1 "--worker: Value -1 not in range" -- show --worker -1 ;;
  cli_show_worker_too_large)
    run cli 1 "--worker 99: this scenario has workers 0..7" -- show --lowered --worker 99 ;;
  cli_timeline_width_nan)
    run cli 1 "--timeline-width: expected a finite number" -- simulate "$base" --timeline t.svg --timeline-width nan ;;
  cli_json_empty)
    # An empty file name read as "no --json": the run succeeded and wrote nothing.
    run cli 1 "--json: an empty value" -- simulate "$base" --json '' ;;
  cli_calibrate_analytic_empty)
    # An empty preset name started a full calibration instead of writing an analytic profile.
    run cli 1 "--analytic: an empty value" -- calibrate --analytic '' --out p.yaml ;;
  cli_timeline_png_upper_case)
    # T.PNG was written as SVG (the extension was matched case-sensitively).
    run cli 0 "" -- simulate "$base" --timeline T.PNG || exit 1
    [ "$(head -c 4 T.PNG | tail -c 3)" = PNG ] || { echo "FAIL: T.PNG is not a PNG"; head -c 60 T.PNG; exit 1; } ;;
  cli_timeline_png_too_wide)
    # Over cairo's 32767 pixels a side: "invalid value", exit 4.
    run cli 1 "the timeline is 100000 x [0-9]+ pixels, over PNG's limit of 32767 a side" -- simulate "$base" \
      --timeline t.png --timeline-width 100000 ;;
  cli_unknown_flag)
    run cli 1 "--no-such-flag" -- simulate --no-such-flag ;;
  # ---- exit codes of the other classes
  code_fail_on_oom)
    sed "s|^model: .*|model: {preset: gpt3-1b}|; s|preset: A100-SXM4-80GB}|preset: A100-SXM4-80GB, memory_GB: 1}|" \
      "$base" >in.yaml
    run codes 2 "--fail-on-oom: the memory model says a rank does not fit" -- simulate in.yaml --fail-on-oom ;;
  code_no_launcher)
    run codes 3 "--launcher: 'no-such-mpirun' not found in PATH" -- validate --launcher no-such-mpirun --pp 2 --dp 1 --tp 1 ;;
  code_launcher_fails)
    # A launcher or job that failed was an internal error (exit 4).
    printf '#!/bin/sh\necho "fake launcher: $*" >&2\nexit 1\n' >launcher.sh && chmod +x launcher.sh
    run codes 3 "the measured run failed \\(launcher exit code 1\\)" -- validate --launcher "$PWD/launcher.sh" --pp 2 \
      --dp 1 --tp 1 ;;
  code_launcher_killed)
    printf '#!/bin/sh\nkill -KILL $$\n' >launcher.sh && chmod +x launcher.sh
    run codes 3 "the measured run failed \\(launcher exit code 137\\)" -- validate --launcher "$PWD/launcher.sh" --pp 2 \
      --dp 1 --tp 1 ;;
  code_rank_killed)
    # Every rank killed (as the kernel's OOM killer would) under the real launcher.
    printf '#!/bin/sh\nkill -KILL $$\n' >rank.sh && chmod +x rank.sh
    run codes 3 "the measured run failed \\(launcher exit code [0-9]+\\)" -- validate --rank-exe "$PWD/rank.sh" --pp 2 \
      --dp 1 --tp 1 ;;
  code_calibrate_launcher_fails)
    printf '#!/bin/sh\nexit 1\n' >launcher.sh && chmod +x launcher.sh
    run codes 3 "the link benchmark job failed \\(exit 1\\)" -- calibrate --launcher "$PWD/launcher.sh" --out p.yaml ;;
  code_calibrate_step_factor_1)
    # The link sweep's flags were checked only inside the MPI job: a failed job, exit 4.
    run codes 1 "-f 1: the step factor must be a number > 1" -- calibrate -f 1 --out p.yaml ;;
  code_calibrate_min_over_max)
    run codes 1 "-b 1M: larger than -e 8" -- calibrate -b 1M -e 8 --out p.yaml ;;
  code_calibrate_no_gpu)
    # Only where there is no usable GPU (with one, this would calibrate it).
    if "$(dirname "$bin")/pipescope-cuda-check" cuda-f16 2>/dev/null; then echo "SKIP: a GPU is present"; exit 0; fi
    run codes 3 "--backend cuda-f16: (no usable GPU|this pipescope was built without CUDA)" -- calibrate --backend cuda-f16 \
      --out p.yaml ;;
  *)
    echo "unknown case $case"; exit 2 ;;
esac
