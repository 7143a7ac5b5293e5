# `pipescope calibrate` input errors and output handling, run by ctest, one case per test so that each
# calibration has its own time limit (a sanitized calibration of the tiny shape takes 35 s on a quiet 2-core machine):
#   cmake -DBIN=<pipescope> -DDIR=<scratch> -DCASE=bad_input|tiny|refused -P calib_cli.cmake
# bad_input: --hidden 0 is a bad-input error (exit 1). tiny: a tiny shape with --context-steps 0 runs to a profile or
# a refusal (exit 0 or 5), never a signal. refused: a refused calibration (injected noise) writes nothing. No
# temporary file is left next to --out in any case.
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
if(CASE STREQUAL "bad_input")
  execute_process(COMMAND ${BIN} calibrate --hidden 0 --no-links --out ${DIR}/h0.yaml RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 1 OR NOT err MATCHES "--hidden: must be >= 1, got 0")
    message(FATAL_ERROR "--hidden 0: exit ${rc}, stderr: ${err}")
  endif()
elseif(CASE STREQUAL "tiny")
  execute_process(COMMAND ${BIN} calibrate --hidden 32 --heads 4 --seq-len 16 --vocab 64 --quick --no-links
                          --context-steps 0 --no-progress --out ${DIR}/tiny.yaml RESULT_VARIABLE rc ERROR_VARIABLE err
                          OUTPUT_QUIET)
  if(NOT (rc EQUAL 0 OR rc EQUAL 5))
    message(FATAL_ERROR "tiny shape, --context-steps 0: exit ${rc} (a signal?), stderr: ${err}")
  endif()
  if(rc EQUAL 0 AND NOT EXISTS ${DIR}/tiny.yaml)
    message(FATAL_ERROR "exit 0 but no profile")
  endif()
elseif(CASE STREQUAL "refused")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env PIPESCOPE_CALIB_INJECT_NOISE=1.5
                          ${BIN} calibrate --hidden 32 --heads 4 --seq-len 16 --vocab 64 --quick --no-links
                          --context-steps 0 --no-progress --out ${DIR}/noisy.yaml
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 5 OR NOT err MATCHES "calibration refused" OR NOT err MATCHES "layers\\[0\\]" OR EXISTS ${DIR}/noisy.yaml)
    message(FATAL_ERROR "injected noise: exit ${rc}, stderr: ${err}")
  endif()
else()
  message(FATAL_ERROR "CASE must be bad_input, tiny or refused, got '${CASE}'")
endif()
file(GLOB left ${DIR}/*.tmp.* ${DIR}/.*.tmp-*)
if(left)
  message(FATAL_ERROR "temporary files left: ${left}")
endif()
