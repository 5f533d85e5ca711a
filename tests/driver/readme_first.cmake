# README's first program, its marked blocks (<!-- test: first -->) verbatim, for one UPC++ release,
# in shells started with env -i, the settings for a machine without a GPU:
# - a newcomer's shell (only HOME and PATH): the settings' defaults, checked (PREFIX the clone's
#   ./install, NVSHMEM_HOME the quickstart's, UPCXX_INSTALL a UPC++ under ~/opt, CUDA_HOME
#   /usr/local/cuda, LD_LIBRARY_PATH the stub's folder alone);
# - a shell after `module load` (UPCXX_INSTALL, CUDA_HOME and LD_LIBRARY_PATH already set): the
#   blocks must keep the first two and put the stub's folder before the third; a new shell in
#   ~/first that sources the saved env.sh must get the same values; then, in that shell, the program
#   is built with CMake and with the upcxx wrapper, and run on 2 ranks, which must fail together
#   (fail_together.cmake).
# Stand-ins for what the newcomer has: a clone whose ./install is the test prefix (the quickstart's);
# a HOME whose ~/.cache/upcxx-extra-nvshmem holds the cache's NVSHMEM (a link), and whose ~/opt
# holds UPC++ built with CUDA (a link to the test layout); the layout's CUDA home (headers,
# cudart, a driver stub in lib64/stubs) as the module's CUDA_HOME. The blocks of docs/install.md's
# "Without CMake" (first/build-upcxx.sh, first/run-upcxx.sh) join README's.
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
set(home "${BIN}/home")
set(clone "${BIN}/clone")
# settings(OUT SCRIPT ENV...): the variables after SCRIPT ran in bash under env -i HOME PATH ENV...
set(vars "PREFIX NVSHMEM_HOME UPCXX_INSTALL CUDA_HOME LD_LIBRARY_PATH")
function(settings out script)
  execute_process(COMMAND env -i "HOME=${home}" "PATH=$ENV{PATH}" ${ARGN} bash -ec
                          "${script}\nfor v in ${vars}; do printf '%s=%s\\n' $v \"\${!v-<unset>}\"; done"
                  WORKING_DIRECTORY "${clone}" RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE o)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "README's settings blocks failed (exit ${rc}):\n${o}")
  endif()
  set(${out} "${o}" PARENT_SCOPE)
endfunction()
function(expect what got)
  foreach(want IN LISTS ARGN)
    string(FIND "${got}" "${want}\n" at)
    if(at LESS 0)
      message(FATAL_ERROR "README's settings, ${what}: want ${want}, got:\n${got}")
    endif()
  endforeach()
  message(STATUS "README's settings, ${what}: as expected")
endfunction()
set(blocks ". '${b}/settings.sh'; . '${b}/no-gpu.sh'; . '${b}/folder.sh'")
settings(got "${blocks}")
expect("a newcomer's shell" "${got}" "PREFIX=${clone}/install"
       "NVSHMEM_HOME=${home}/.cache/upcxx-extra-nvshmem/nvshmem/${NVSHMEM_DEFAULT}/nvidia/nvshmem"
       "CUDA_HOME=/usr/local/cuda" "LD_LIBRARY_PATH=${home}/cuda-stub")
string(REGEX MATCH "UPCXX_INSTALL=([^\n]*)" m "${got}")
if(NOT CMAKE_MATCH_1 MATCHES "^${home}/opt/" OR NOT EXISTS "${CMAKE_MATCH_1}/bin/upcxx-meta")
  message(FATAL_ERROR "README's settings: the default UPCXX_INSTALL '${CMAKE_MATCH_1}' is no UPC++ under ~/opt")
endif()
# After `module load`: the module's values are kept, the stub goes first.
file(MAKE_DIRECTORY "${BIN}/module-lib")
set(module "UPCXX_INSTALL=${UPCXX_ROOT}/upcxx-${RELEASE}" "CUDA_HOME=${UPCXX_ROOT}/cuda-home"
           "LD_LIBRARY_PATH=${BIN}/module-lib")
set(kept "UPCXX_INSTALL=${UPCXX_ROOT}/upcxx-${RELEASE}" "CUDA_HOME=${UPCXX_ROOT}/cuda-home"
         "LD_LIBRARY_PATH=${home}/cuda-stub:${BIN}/module-lib" "PREFIX=${clone}/install")
settings(got "${blocks}" ${module})
expect("after module load" "${got}" ${kept})
settings(got "cd ~/first && . ./env.sh")
expect("a new shell sourcing ~/first/env.sh" "${got}" ${kept})
foreach(how cmake upcxx)
  set(log "${BIN}/run-${how}.log")
  execute_process(COMMAND env -i "HOME=${home}" "PATH=$ENV{PATH}" ${module} bash "${CMAKE_CURRENT_LIST_DIR}/newcomer.sh"
                          "${clone}" "${b}" ${how} "${log}"
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
