# The Spack recipe (spack/packages/upcxx-extra-nvshmem/package.py) against the project: its version,
# dependencies and CMake arguments, checked by spack/test_recipe.py with a stand-in of Spack's API
# (Spack itself is not installed here).
#   cmake -DROOT=<repository> -P spack_recipe.cmake
cmake_minimum_required(VERSION 3.20)
find_program(_python NAMES python3 python)
if(NOT _python)
  message("SKIPPED: no python3 on PATH (spack/test_recipe.py needs one)")
  return()
endif()
execute_process(COMMAND "${_python}" "${ROOT}/spack/test_recipe.py" RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "spack/test_recipe.py failed (exit ${_rc})")
endif()
