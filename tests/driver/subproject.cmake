# One CMake project of the repository (tests/c, tests/cxx, ...) as a step of the test suite:
#   cmake -DSRC=<dir> -DBIN=<dir> [-DOPTIONS=<a|b>] [-DTARGETS=<t|u>] [-DJOBS=N] [-DCTEST_ARGS=<a|b>]
#         -DMODE=build|test -P subproject.cmake
# build: configure (OPTIONS: -D... arguments) and build (TARGETS, else all) from a fresh BIN;
# test:  ctest in BIN, output on failure (CTEST_ARGS: more ctest arguments, e.g. -R name).
# The environment (UPCXX_INSTALL, UPCXX_THREADMODE, ...) is the caller's: the suite sets it per step.
cmake_minimum_required(VERSION 3.20)
foreach(v SRC BIN MODE)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "subproject.cmake: ${v} is not set")
  endif()
endforeach()
if(NOT JOBS)
  set(JOBS 2)
endif()
# The suite joins each list with "|".
foreach(v OPTIONS TARGETS CTEST_ARGS)
  string(REPLACE "|" ";" ${v} "${${v}}")
endforeach()
if(MODE STREQUAL "build")
  file(REMOVE_RECURSE "${BIN}")
  execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SRC}" -B "${BIN}" ${OPTIONS} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configure of ${SRC} failed (${rc})")
  endif()
  set(targets)
  if(TARGETS)
    set(targets --target ${TARGETS})
  endif()
  execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BIN}" -j ${JOBS} ${targets} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "build of ${SRC} failed (${rc})")
  endif()
elseif(MODE STREQUAL "test")
  # UXN_SUBPROJECT_VERBOSE=1 (the GPU host): every test's output, not only a failing one's.
  if("$ENV{UXN_SUBPROJECT_VERBOSE}" STREQUAL "1")
    list(APPEND CTEST_ARGS -V)
  endif()
  # UXN_SUBPROJECT_CTEST_ARGS: more ctest arguments for every sub-project (e.g. "-R bench").
  if(NOT "$ENV{UXN_SUBPROJECT_CTEST_ARGS}" STREQUAL "")
    separate_arguments(more UNIX_COMMAND "$ENV{UXN_SUBPROJECT_CTEST_ARGS}")
    list(APPEND CTEST_ARGS ${more})
  endif()
  execute_process(COMMAND "${CMAKE_CTEST_COMMAND}" --test-dir "${BIN}" --output-on-failure --no-tests=error ${CTEST_ARGS}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ctest in ${BIN} failed (${rc})")
  endif()
else()
  message(FATAL_ERROR "subproject.cmake: MODE must be build or test, not '${MODE}'")
endif()
