# Fails when a tracked file outside docs/ cites the notes folder "spec" that sits beside the repository but
# is not part of it (the project's own docs are docs/). The pattern is written spec[/] so this file does not
# match itself. Without git or outside a git checkout it prints SKIP (the test's SKIP_REGULAR_EXPRESSION).
find_program(GIT git)
if(NOT GIT OR NOT EXISTS "${SRC}/.git")
  message("SKIP: no git checkout at ${SRC}")
  return()
endif()
execute_process(COMMAND "${GIT}" -C "${SRC}" grep -n -I -e "spec[/]" -- . ":(exclude)docs"
                RESULT_VARIABLE rc OUTPUT_VARIABLE hits ERROR_VARIABLE err)
if(rc EQUAL 1)
  return()  # git grep: nothing found
elseif(rc EQUAL 0)
  message(FATAL_ERROR "references to the spec folder outside the repository; point them at docs/:\n${hits}")
else()
  message(FATAL_ERROR "git grep failed (${rc}): ${err}")
endif()
