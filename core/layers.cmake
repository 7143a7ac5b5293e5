# The layers of core/, bottom to top, and the check that keeps their direction. Used by core/CMakeLists.txt at
# configure time and, as a script, by the tests (tests/CMakeLists.txt):
#   cmake -DCORE_DIR=<a core folder> -P core/layers.cmake
set(pipescope_core_layers util ir model lower cost memory plan)

# Stops with the file, the line and the layers when a file of core/<layer> includes a header of a layer above it
# (or of a folder that is not a layer).
function(pipescope_check_layer core_dir layer)
  list(FIND pipescope_core_layers ${layer} rank)
  if(rank LESS 0)
    message(FATAL_ERROR "core/${layer}: not a layer of core (${pipescope_core_layers})")
  endif()
  file(GLOB files RELATIVE ${core_dir}/${layer} ${core_dir}/${layer}/*.h ${core_dir}/${layer}/*.cc)
  foreach(f IN LISTS files)
    file(STRINGS ${core_dir}/${layer}/${f} includes REGEX "^#include \"core/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^#include \"core/([a-z_]+)/.*" "\\1" used "${line}")
      list(FIND pipescope_core_layers "${used}" used_rank)
      if(used_rank LESS 0 OR used_rank GREATER rank)
        string(REPLACE ";" " -> " stack "${pipescope_core_layers}")
        # NOTICE prints the line whole (a FATAL_ERROR's text is re-wrapped), so the file and the include stay greppable.
        message(NOTICE "error: core/${layer}/${f}: ${line}: core/${layer} may use only itself and the layers below it "
                       "(${stack}; core/README.md)")
        message(FATAL_ERROR "core/${layer}: an include points up the layers")
      endif()
    endforeach()
  endforeach()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND CORE_DIR)
  get_filename_component(CORE_DIR ${CORE_DIR} ABSOLUTE)
  if(NOT IS_DIRECTORY ${CORE_DIR}/util)
    message(FATAL_ERROR "${CORE_DIR}: not a core folder (no util/ in it)")
  endif()
  foreach(layer IN LISTS pipescope_core_layers)
    if(IS_DIRECTORY ${CORE_DIR}/${layer})
      pipescope_check_layer(${CORE_DIR} ${layer})
    endif()
  endforeach()
  message(STATUS "${CORE_DIR}: every include points down")
endif()
