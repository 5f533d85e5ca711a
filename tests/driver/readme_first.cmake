# README's first program, its marked blocks (<!-- test: first -->) verbatim, for one UPC++ release,
# in a shell with nothing set but HOME and PATH (env -i), the settings for a machine without a GPU:
# built with CMake and with the upcxx wrapper, then run on 2 ranks, which must fail together
# (fail_together.cmake). Stand-ins for what the newcomer has: a clone whose ./install is the test
# prefix (the quickstart's); a HOME whose ~/.cache/upcxx-extra-nvshmem holds the cache's NVSHMEM
# (a link), and whose ~/opt holds UPC++ built with CUDA (a link to the test layout); the layout's
# CUDA home (headers, cudart, a driver stub in lib64/stubs) in place of the settings' toolkit,
# /usr/local/cuda. For a release other than 2023.9.0 the settings name it instead. The blocks of
# docs/install.md's "Without CMake" (first/build-upcxx.sh, first/run-upcxx.sh) join README's.
#   cmake -DROOT=<repo> -DBIN=<dir> -DPREFIX=<moved prefix> -DCACHE=<cache> -DUPCXX_ROOT=<layout>
#         -DRELEASE=<x.y.z> -DNVSHMEM_DEFAULT=<x.y.z> -P readme_first.cmake
cmake_minimum_required(VERSION 3.20)
if(NOT EXISTS "${UPCXX_ROOT}/upcxx-${RELEASE}/bin/upcxx-meta")
  message(FATAL_ERROR "no UPC++ ${RELEASE} in ${UPCXX_ROOT}")
endif()
if(NOT EXISTS "${CACHE}/nvshmem/${NVSHMEM_DEFAULT}/nvidia/nvshmem/lib/libnvshmem_host.so.3")
  message(FATAL_ERROR "no NVSHMEM ${NVSHMEM_DEFAULT} in the cache (the quickstart's)")
endif()
file(READ "${ROOT}/README.md" readme)
string(FIND "${readme}" "nvshmem/${NVSHMEM_DEFAULT}/nvidia/nvshmem" at)
if(at LESS 0)
  message(FATAL_ERROR "README's settings do not name NVSHMEM ${NVSHMEM_DEFAULT} (scripts/common.sh UXN_NVSHMEM_DEFAULT)")
endif()
file(REMOVE_RECURSE "${BIN}")
file(MAKE_DIRECTORY "${BIN}/clone" "${BIN}/home/.cache/upcxx-extra-nvshmem")
execute_process(COMMAND python3 "${ROOT}/scripts/readme-blocks.py" "${ROOT}/README.md" "${BIN}/blocks" COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND python3 "${ROOT}/scripts/readme-blocks.py" "${ROOT}/docs/install.md" "${BIN}/blocks" COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND cp -a "${PREFIX}" "${BIN}/clone/install" COMMAND_ERROR_IS_FATAL ANY)
file(CREATE_LINK "${CACHE}/nvshmem" "${BIN}/home/.cache/upcxx-extra-nvshmem/nvshmem" SYMBOLIC)
file(CREATE_LINK "${UPCXX_ROOT}" "${BIN}/home/opt" SYMBOLIC)
set(b "${BIN}/blocks/first")
file(READ "${b}/settings.sh" s)
file(READ "${b}/no-gpu.sh" stub)
foreach(want "UPCXX_INSTALL=$HOME/opt/upcxx-2023.9.0" "CUDA_HOME=/usr/local/cuda" "$CUDA_HOME/lib64/stubs/libcuda.so")
  string(FIND "${s}${stub}" "${want}" at)
  if(at LESS 0)
    message(FATAL_ERROR "README's settings do not say '${want}' (update tests/driver/readme_first.cmake with them)")
  endif()
endforeach()
string(REPLACE "upcxx-2023.9.0" "upcxx-${RELEASE}" s "${s}")
string(REPLACE "CUDA_HOME=/usr/local/cuda" "CUDA_HOME=${UPCXX_ROOT}/cuda-home" s "${s}")
file(WRITE "${b}/settings.sh" "${s}")
foreach(how cmake upcxx)
  set(log "${BIN}/run-${how}.log")
  execute_process(COMMAND env -i "HOME=${BIN}/home" "PATH=$ENV{PATH}" bash "${CMAKE_CURRENT_LIST_DIR}/newcomer.sh"
                          "${BIN}/clone" "${b}" ${how} "${log}"
                  RESULT_VARIABLE rc)
  if(NOT EXISTS "${log}")
    message(FATAL_ERROR "README first program (${how}, UPC++ ${RELEASE}): the build failed (exit ${rc})")
  endif()
  # The run's log, judged as fail_together.cmake judges a program it starts.
  execute_process(COMMAND "${CMAKE_COMMAND}" -DLOG=${log} "-DRC=${rc}" -DNP=2
                          "-DWHAT=README first program (${how}, UPC++ ${RELEASE})"
                          -P "${CMAKE_CURRENT_LIST_DIR}/fail_together.cmake"
                  COMMAND_ERROR_IS_FATAL ANY)
endforeach()
