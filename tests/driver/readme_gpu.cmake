# README's first program on a GPU host: its blocks (<!-- test: first/... -->) built with CMake and
# with the upcxx wrapper (docs/install.md's blocks), in the blocks' folder (main.cpp,
# CMakeLists.txt), with UPCXX_INSTALL, NVSHMEM_HOME and CUDA_HOME from the environment and PREFIX
# the installed library; each run on 2 ranks must print every PE's "b holds PE <previous>'s bytes".
#   cmake -DROOT=<repo> -DBIN=<dir> -DPREFIX=<prefix> -P readme_gpu.cmake
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE "${BIN}")
execute_process(COMMAND python3 "${ROOT}/scripts/readme-blocks.py" "${ROOT}/README.md" "${BIN}" COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND python3 "${ROOT}/scripts/readme-blocks.py" "${ROOT}/docs/install.md" "${BIN}" COMMAND_ERROR_IS_FATAL ANY)
set(ENV{PREFIX} "${PREFIX}")
foreach(how cmake upcxx)
  execute_process(COMMAND bash -e "build-${how}.sh" WORKING_DIRECTORY "${BIN}/first" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "README first program (${how}): the build failed (${rc})")
  endif()
  execute_process(COMMAND bash "run-${how}.sh" WORKING_DIRECTORY "${BIN}/first" TIMEOUT 240
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0 OR NOT out MATCHES "PE 0: b holds PE 1's bytes" OR NOT out MATCHES "PE 1: b holds PE 0's bytes")
    message(FATAL_ERROR "README first program (${how}): exit ${rc}, not every PE holds the previous PE's bytes")
  endif()
endforeach()
