# Fails when a tracked file outside docs/ cites `spec/`, a folder that is not part of the repository
# (the project's own docs are docs/). Skipped (exit 77) without git or outside a git checkout.
find_program(GIT git)
if(NOT GIT OR NOT EXISTS "${SRC}/.git")
  message("SKIP: no git checkout at ${SRC}")
  cmake_language(EXIT 77)
endif()
execute_process(COMMAND "${GIT}" -C "${SRC}" grep -n -I -e "spec/" --
                        . ":(exclude)docs" ":(exclude)tests/no_spec_refs.cmake"
                RESULT_VARIABLE rc OUTPUT_VARIABLE hits ERROR_VARIABLE err)
if(rc EQUAL 1)
  return()  # git grep: nothing found
elseif(rc EQUAL 0)
  message(FATAL_ERROR "references to spec/ (outside the repository); point them at docs/ instead:\n${hits}")
else()
  message(FATAL_ERROR "git grep failed (${rc}): ${err}")
endif()
