# Golden outputs (tests/golden/README.md): every `build/pipescope ...` command of the READMEs and `pipescope
# simulate` of every shipped scenario, each a test whose stdout must equal its golden file. They run in a scratch
# directory where build/, scenarios/ and calib/ point into the build and source trees, so the README's command
# lines run as written and the files they write stay out of the source tree. `ctest -R readme` runs the README
# commands, `ctest -R golden_scenario` the scenarios (label golden for both).
set(golden_dir ${CMAKE_CURRENT_SOURCE_DIR}/golden)
set(golden_cwd ${CMAKE_CURRENT_BINARY_DIR}/golden_cwd)
file(MAKE_DIRECTORY ${golden_cwd})
file(CREATE_LINK ${PROJECT_BINARY_DIR} ${golden_cwd}/build SYMBOLIC)
file(CREATE_LINK ${PROJECT_SOURCE_DIR}/scenarios ${golden_cwd}/scenarios SYMBOLIC)
file(CREATE_LINK ${PROJECT_SOURCE_DIR}/calib ${golden_cwd}/calib SYMBOLIC)
set(golden_run ${CMAKE_CURRENT_SOURCE_DIR}/golden_run.cmake)

# --- every shipped scenario
file(GLOB_RECURSE golden_scenarios RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/scenarios/*.yaml)
list(SORT golden_scenarios)
foreach(f IN LISTS golden_scenarios)
  string(REGEX REPLACE "^scenarios/(.*)\\.yaml$" "\\1" stem "${f}")
  string(REGEX REPLACE "[^A-Za-z0-9]" "_" tname "${stem}")
  add_test(NAME golden_scenario_${tname}
           COMMAND ${CMAKE_COMMAND} "-DCMD=build/pipescope simulate ${f}" -DWORKDIR=${golden_cwd}
                   -DGOLDEN=${golden_dir}/scenarios/${stem}.txt -P ${golden_run})
  set_tests_properties(golden_scenario_${tname} PROPERTIES LABELS golden TIMEOUT 120)
endforeach()

# --- every README command: lines starting with "build/pipescope " (comments after "  #" dropped)
file(READ ${golden_dir}/readme-skip.txt golden_skip)
set(golden_readmes README.md)
foreach(d bench calib cli core docs fuzz kernels notebooks runtime scenarios sim tests)
  if(EXISTS ${PROJECT_SOURCE_DIR}/${d}/README.md)
    list(APPEND golden_readmes ${d}/README.md)
  endif()
endforeach()
foreach(readme IN LISTS golden_readmes)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${readme})
  get_filename_component(folder ${readme} DIRECTORY)
  if(folder STREQUAL "")
    set(folder top)
  endif()
  file(STRINGS ${PROJECT_SOURCE_DIR}/${readme} lines REGEX "^build/pipescope ")
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    string(REGEX REPLACE "  +#.*$" "" cmd "${line}")
    string(REGEX REPLACE " +$" "" cmd "${cmd}")
    set(name readme_${folder}_${n})
    string(FIND "${golden_skip}" "${cmd}\t" skipped)
    if(skipped GREATER_EQUAL 0)
      continue()  # the reason is in readme-skip.txt
    endif()
    set(measured 0)
    if(cmd MATCHES "pipescope (validate|calibrate)")
      set(measured 1)
    endif()
    add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} "-DCMD=${cmd}" -DWORKDIR=${golden_cwd} -DMEASURED=${measured}
                                  -DGOLDEN=${golden_dir}/readme/${folder}-${n}.txt -P ${golden_run})
    set_tests_properties(${name} PROPERTIES LABELS "golden;readme" TIMEOUT 300)
    if(measured)  # timings: alone, like the other measured tests
      set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE ENVIRONMENT "${runtime_mpi_env}")
    endif()
    if(cmd MATCHES "calibrate .*--out cpu.yaml")
      set_tests_properties(${name} PROPERTIES FIXTURES_SETUP readme_cpu_profile)
    elseif(cmd MATCHES "--profile cpu.yaml")
      set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED readme_cpu_profile)
    endif()
  endforeach()
endforeach()
