# runtime_expect.cmake for GPU tests: PROBE (a list) runs first; its exit code 77 means this machine cannot run
# the test (no CUDA + NCCL build, too few GPUs), which prints "SKIP: ..." (the test's SKIP_REGULAR_EXPRESSION)
# and stops. Otherwise CMD runs and is checked as in runtime_expect.cmake.
execute_process(COMMAND ${PROBE} RESULT_VARIABLE probe_rc OUTPUT_VARIABLE probe_out ERROR_VARIABLE probe_out)
if(probe_rc EQUAL 77)
  message("${probe_out}")
  return()
endif()
if(NOT probe_rc EQUAL 0)
  message(FATAL_ERROR "GPU probe failed (exit code ${probe_rc}):\n${probe_out}")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/runtime_expect.cmake)
