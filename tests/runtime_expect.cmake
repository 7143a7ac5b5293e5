# Runs CMD (a list) and checks how it ends: EXPECT_FAIL=ON wants a non-zero exit code, and every regex of
# REGEX (a list) must match the combined stdout + stderr. For runtime tests that must fail loudly (a rank's
# error, the watchdog) rather than hang or pass: CTest's PASS_REGULAR_EXPRESSION alone ignores the exit code.
# EXPECT_RC=N wants exactly that exit code (the documented codes of cli/README.md).
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(DEFINED EXPECT_RC AND NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "expected exit code ${EXPECT_RC}, got ${rc}")
endif()
if(EXPECT_FAIL AND rc EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit code, got 0")
endif()
if(NOT EXPECT_FAIL AND NOT DEFINED EXPECT_RC AND NOT rc EQUAL 0)
  message(FATAL_ERROR "expected exit code 0, got ${rc}")
endif()
foreach(re IN LISTS REGEX)
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "output does not match '${re}'")
  endif()
endforeach()
message("exit code ${rc} as expected; output matches")
