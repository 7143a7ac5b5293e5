# A new user's first hour: outputs a script can rely on, help that says what runs, data found from any
# directory. Included from tests/CMakeLists.txt.
set(fh_bin $<TARGET_FILE:pipescope>)
set(fh_dir ${CMAKE_CURRENT_BINARY_DIR}/first_hour)
file(MAKE_DIRECTORY ${fh_dir})
set(fh_files ${CMAKE_CURRENT_SOURCE_DIR}/expect_files.cmake)
set(fh_expect ${CMAKE_CURRENT_SOURCE_DIR}/runtime_expect.cmake)

# --compare with --json and --trace writes both: every variant's report, every variant's trace (exit 0, nothing
# written before).
add_test(NAME cli_compare_writes_json_and_trace
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};simulate;--compare;gpipe,1f1b;--json;${fh_dir}/c.json;--trace;${fh_dir}/c.trace.json"
                 "-DFILES=${fh_dir}/c.json;${fh_dir}/c.trace.json"
                 "-DFILE_REGEX=\"schema\": \"pipescope.compare/1\";\"schedule\": \"gpipe\";\"schedule\": \"1f1b\";\"traceEvents\":;gpipe node0;1f1b node0"
                 -P ${fh_files})
# --json - is stdout (it wrote a file named "-"); the table moves to stderr so stdout is one JSON document.
add_test(NAME cli_simulate_json_stdout
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};simulate;--json;-" -DWORKDIR=${fh_dir}
                 "-DSTDOUT_REGEX=^{\n  \"schema\": \"pipescope.simulate/2\",;\"tokens_per_s\": [0-9.e+]+,;\n}\n$"
                 "-DSTDOUT_NOT_REGEX=iteration time" "-DSTDERR_REGEX=iteration time +0\\.4" -P ${fh_files})
# show --worker out of range: an error naming the range (it printed nothing and exited 0).
add_test(NAME cli_show_worker_out_of_range
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};show;--lowered;--worker;99" -DEXPECT_RC=1
                 "-DREGEX=error: --worker 99: this scenario has workers 0\\.\\.7" -P ${fh_expect})
# show --lowered wraps its programs (lines of ~2,900 characters before).
add_test(NAME cli_show_lowered_wrapped
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};show;--lowered" -DMAX_LINE=100
                 "-DSTDOUT_REGEX=w0: 0F0 ;\n    [a-z0-9];w7: ;check: ok" -P ${fh_files})
# repro finds its scenarios from any directory (exit 1: relative data paths).
add_test(NAME cli_repro_from_another_directory
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};repro;terapipe;--settings;10" -DWORKDIR=${fh_dir}
                 "-DSTDOUT_REGEX=10 \\| +16 +16 \\|" -P ${fh_files})
# --compare names v (interleaved runs with v = 2 without saying so) and warns when a sliced schedule has k = 1.
add_test(NAME cli_compare_shows_v_and_warns_k1
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};simulate;--compare;1f1b,interleaved,seq1f1b"
                 "-DSTDOUT_REGEX=schedule +v +iteration_s;1f1b +1 +0\\.;interleaved +2 +0\\.;seq1f1b +1 +0\\."
                 "-DSTDERR_REGEX=warning: seq1f1b with one slice per micro-batch .schedule.seq_slices = 1." -P ${fh_files})
# validate --help lists the registry's schedules (it omitted seq1f1b).
add_test(NAME cli_validate_help_lists_schedules
         COMMAND ${CMAKE_COMMAND} -DBIN=${fh_bin} -P ${CMAKE_CURRENT_SOURCE_DIR}/help_lists_schedules.cmake)
# pipescope-linkbench --help: CLI11's help, exit 0, no MPI_ABORT banner; a bad flag is exit 1.
add_test(NAME linkbench_help
         COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:pipescope-linkbench>;--help"
                 "-DSTDOUT_REGEX=Usage: .*-b,--minbytes;-o,--ops" "-DSTDERR_NOT_REGEX=MPI_ABORT" -P ${fh_files})
add_test(NAME linkbench_bad_flag
         COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:pipescope-linkbench>;-o;sendrecv,nosuchop" -DEXPECT_RC=1
                 "-DSTDERR_REGEX=unknown operation 'nosuchop'" "-DSTDERR_NOT_REGEX=MPI_ABORT" -P ${fh_files})
# scenarios/README.md's schema block simulates as full-schema.yaml (it said global_batch: 16).
add_test(NAME scenarios_readme_schema
         COMMAND ${CMAKE_COMMAND} -DBIN=${fh_bin} -DSRC=${PROJECT_SOURCE_DIR} -DDIR=${fh_dir}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/readme_schema.cmake)
# Every shipped scenario is one file: two files named megatron-39.1b disagreed on recomputation.
add_test(NAME scenarios_unique_names
         COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -P ${CMAKE_CURRENT_SOURCE_DIR}/scenario_names.cmake)
# A repro table whose scenario files are missing is bad input (1), like any missing file; its rows said 2
# (schedule rejected) before. Each table exits with the code of its first failed row (cli/exit_code.cc).
foreach(paper seq1f1b megatron)
  add_test(NAME cli_repro_${paper}_missing_dir_is_input
           COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};repro;${paper};--dir;${fh_dir}/no-such-dir" -DEXPECT_RC=1
                   "-DREGEX=error: [^\n]*no-such-dir/[^\n]*cannot open scenario file" -P ${fh_expect})
  set_tests_properties(cli_repro_${paper}_missing_dir_is_input PROPERTIES LABELS cli TIMEOUT 120)
endforeach()
# A table or CSV that cannot be written to standard output is an environment error (3), as for simulate: sweep,
# show and --compare exited 0 with their output lost (cli/main.cc stdout_written).
foreach(cmd "show" "sweep --vary parallel.micro_batch_size=1,2" "simulate --compare gpipe,1f1b")
  string(REGEX REPLACE "[^a-z]+" "_" tag "${cmd}")
  add_test(NAME cli_stdout_full_${tag}
           COMMAND ${CMAKE_COMMAND} "-DCMD=sh;-c;${fh_bin} ${cmd} > /dev/full" -DEXPECT_RC=3
                   "-DREGEX=error: standard output: write failed" -P ${fh_expect})
  set_tests_properties(cli_stdout_full_${tag} PROPERTIES LABELS cli TIMEOUT 120)
endforeach()
# An output may not overwrite an input the command read (the scenario became the JSON report, exit 0).
add_test(NAME cli_output_not_the_input
         COMMAND ${CMAKE_COMMAND}
                 "-DCMD=sh;-c;cp ${PROJECT_SOURCE_DIR}/scenarios/default.yaml ${fh_dir}/in.yaml && ${fh_bin} simulate ${fh_dir}/in.yaml --json ${fh_dir}/in.yaml"
                 -DEXPECT_RC=1 "-DREGEX=error: --json [^ ]*in.yaml: the input file [^ ]*in.yaml \\(an output must not overwrite it\\)"
                 -P ${fh_expect})
set_tests_properties(cli_output_not_the_input PROPERTIES LABELS cli TIMEOUT 120)
# validate --slices with a schedule of whole sequences was dropped without a word ("1 slice(s)").
add_test(NAME cli_validate_slices_need_a_slicing_schedule
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};validate;--pp;2;--layers;4;--hidden;32;--heads;4;--slices;4"
                 -DEXPECT_RC=1 "-DREGEX=1f1b runs whole sequences: --slices needs a slicing schedule" -P ${fh_expect})
set_tests_properties(cli_validate_slices_need_a_slicing_schedule PROPERTIES LABELS cli TIMEOUT 120)
# repro's tables own standard output: --json - is refused before anything runs (it wrote a file named "-").
add_test(NAME cli_repro_json_stdout_refused
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};repro;seq1f1b;--json;-" -DEXPECT_RC=1 -DWORKDIR=${fh_dir}
                 "-DREGEX=--json -: standard output carries the table" -P ${fh_expect})
set_tests_properties(cli_repro_json_stdout_refused PROPERTIES LABELS cli TIMEOUT 120)
set_tests_properties(cli_compare_writes_json_and_trace cli_simulate_json_stdout cli_show_worker_out_of_range
                     cli_show_lowered_wrapped cli_repro_from_another_directory cli_compare_shows_v_and_warns_k1
                     cli_validate_help_lists_schedules linkbench_help linkbench_bad_flag scenarios_readme_schema
                     scenarios_unique_names PROPERTIES LABELS cli TIMEOUT 120)
# The notebooks' figures go to the build tree unless asked: a run overwrote the committed notebooks/figures.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  add_test(NAME notebooks_default_output
           COMMAND ${CMAKE_COMMAND} -E env --unset=PIPESCOPE_NB_OUT ${Python3_EXECUTABLE} -c
                   "import sys, types; sys.modules.setdefault('pandas', types.ModuleType('pandas')); sys.path.insert(0, '${PROJECT_SOURCE_DIR}/notebooks'); import pipescope_nb as p; f = (p.NOTEBOOKS / 'figures').resolve(); d = p.DEFAULT_OUT.resolve(); assert f != d and f not in d.parents, d; print('figures default to', d)")
  set_tests_properties(notebooks_default_output PROPERTIES LABELS notebooks TIMEOUT 30)
endif()
# Command lines as one string (--launcher) keep quoted words whole; data files are found from any directory.
pipescope_add_test(test_shell_words SOURCES test_shell_words.cc DEPS pipescope_core LABELS core)
# Install: the programs and data into a fresh prefix; the installed pipescope runs `repro terapipe` from /. Label
# `install`: the sanitizer preset skips it (an install layout check, a minute of CI there; release runs it).
add_test(NAME install_repro_terapipe
         COMMAND ${CMAKE_COMMAND} -DBUILD=${PROJECT_BINARY_DIR} -DPREFIX=${fh_dir}/prefix -DCUDA=${PIPESCOPE_HAVE_CUDA}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/install_repro.cmake)
set_tests_properties(install_repro_terapipe PROPERTIES LABELS "cli;install" TIMEOUT 300)
# Traces: the checker (core/util/trace_check.h) over `simulate --trace` of shipped scenarios.
pipescope_add_test(test_traces SOURCES test_traces.cc DEPS pipescope_core pipescope_sim nlohmann_json::nlohmann_json LABELS sim)
add_dependencies(test_traces pipescope)
# Machine-readable outputs against docs/schemas/ (validate runs 2 MPI ranks).
pipescope_add_test(test_json_schemas SOURCES test_json_schemas.cc DEPS nlohmann_json::nlohmann_json LABELS cli)
add_dependencies(test_json_schemas pipescope pipescope-rank)
# The timeline's title names the scenario file, not the absolute path it was given by.
add_test(NAME cli_timeline_title_without_path
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};simulate;${PROJECT_SOURCE_DIR}/scenarios/default.yaml;--timeline;${fh_dir}/t.svg"
                 "-DFILES=${fh_dir}/t.svg" "-DFILE_REGEX=>pipescope simulate default.yaml<"
                 "-DFILE_NOT_REGEX=${PROJECT_SOURCE_DIR}" -P ${fh_files})
set_tests_properties(cli_timeline_title_without_path PROPERTIES LABELS cli TIMEOUT 60)
# `pipescope import megatron`: the library (the shipped 39.1B scenario from its launch) and the command.
pipescope_add_test(test_megatron_import SOURCES test_megatron_import.cc DEPS pipescope_core LABELS core)
# `pipescope import megatron --script`: a launch script's pretrain line, its variables expanded.
pipescope_add_test(test_launch_script SOURCES test_launch_script.cc DEPS pipescope_core LABELS core)
# `pipescope import torchtitan` and --emit torchtitan (core/model/torchtitan_config.h).
pipescope_add_test(test_torchtitan_config SOURCES test_torchtitan_config.cc DEPS pipescope_core LABELS core)
add_test(NAME cli_import_torchtitan_strict
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};import;torchtitan;${PROJECT_SOURCE_DIR}/scenarios/torchtitan/llama3_8b_pp.toml;--nodes;2;--strict;-o;${fh_dir}/tt.yaml"
                 -DEXPECT_RC=1 "-DSTDERR_REGEX=not modelled .1.:\n  activation_checkpoint.selective_ac_option = op;error: --strict: 0 unknown and 1 unmodelled"
                 "-DABSENT_FILES=${fh_dir}/tt.yaml" -P ${fh_files})
set_tests_properties(cli_import_torchtitan_strict PROPERTIES LABELS cli TIMEOUT 60)
add_test(NAME cli_import_megatron
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};import;megatron;-o;${fh_dir}/imported.yaml;--;--num-layers;24;--hidden-size;2048;--num-attention-heads;16;--seq-length;2048;--micro-batch-size;1;--global-batch-size;32;--tensor-model-parallel-size;2;--pipeline-model-parallel-size;4;--fp16;--no-such-flag;7"
                 "-DFILES=${fh_dir}/imported.yaml" "-DFILE_REGEX=parallel: {dp: 1, pp: 4, tp: 2, v: 1,;# unknown argument: --no-such-flag 7"
                 "-DSTDERR_REGEX=unknown arguments, not mapped .1.:\n  --no-such-flag 7" -P ${fh_files})
add_test(NAME cli_import_megatron_strict
         COMMAND ${CMAKE_COMMAND} "-DCMD=${fh_bin};import;megatron;--strict;-o;${fh_dir}/strict.yaml;--;--num-layers;24;--hidden-size;2048;--num-attention-heads;16;--seq-length;2048;--micro-batch-size;1;--global-batch-size;32;--recompute-granularity;full;--recompute-method;block"
                 -DEXPECT_RC=1 "-DSTDERR_REGEX=--recompute-method block: partial recomputation;error: --strict: 0 unknown and 1 unmodelled"
                 "-DABSENT_FILES=${fh_dir}/strict.yaml" -P ${fh_files})
set_tests_properties(cli_import_megatron cli_import_megatron_strict PROPERTIES LABELS cli TIMEOUT 60)
# Golden outputs: every README command and every shipped scenario (tests/golden.cmake).
include(${CMAKE_CURRENT_SOURCE_DIR}/golden.cmake)
