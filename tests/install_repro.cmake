# `cmake --install` into a fresh prefix, then the installed pipescope run from / (no scenarios/ there, no
# source tree: an installed binary reads <prefix>/share/pipescope): `repro terapipe` works. BUILD, PREFIX.
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${PREFIX}" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install: exit ${rc}\n${out}")
endif()
foreach(f bin/pipescope bin/pipescope-rank bin/pipescope-linkbench share/pipescope/scenarios/default.yaml
          share/pipescope/scenarios/terapipe/setting-10.yaml share/pipescope/calib/profiles)
  if(NOT EXISTS "${PREFIX}/${f}")
    message(FATAL_ERROR "not installed: ${PREFIX}/${f}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=PIPESCOPE_DATA_DIR "${PREFIX}/bin/pipescope" repro terapipe
                WORKING_DIRECTORY / RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "installed pipescope repro terapipe from /: exit ${rc}\n${err}")
endif()
if(NOT out MATCHES "10 \\| +16 +16 \\|" OR NOT out MATCHES "MAPE")
  message(FATAL_ERROR "repro terapipe's table is missing")
endif()
if(NOT out MATCHES "${PREFIX}/share/pipescope/scenarios/terapipe")
  message(FATAL_ERROR "the installed pipescope did not read its own share/pipescope/scenarios")
endif()
message("installed pipescope repro terapipe from /: ok")
