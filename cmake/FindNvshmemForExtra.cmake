# Finds NVSHMEM 3.x for programs that use upcxx-extra-nvshmem, and defines:
#
#   UpcxxExtraNvshmem::nvshmem         INTERFACE: NVSHMEM's headers, its host library
#                                      (libnvshmem_host.so.3), and the CUDA runtime and CCCL
#                                      include directories that <nvshmem.h> needs in a host-only
#                                      program (g++, the upcxx wrapper: no nvcc)
#   UpcxxExtraNvshmem::nvshmem_device  NVSHMEM's device library (libnvshmem_device.a), when the
#                                      NVSHMEM found has one
#   upcxx_extra_nvshmem_add_device_code(<target>)
#                                      for a target with its own NVSHMEM kernels (CUDA sources):
#                                      separable compilation (-rdc=true) and device-symbol
#                                      resolution, the device library, and a source that includes
#                                      <upcxx_extra/nvshmem/device_library.hpp> so that
#                                      upcxx::extra::nvshmem_init() initialises the device library
#
# Included by UpcxxExtraNvshmemConfig.cmake for the component `nvshmem`, and by this project's
# CMakeLists.txt when it is a subdirectory. Where NVSHMEM is looked for, in order:
#   1. NVSHMEM's own CMake package (NVSHMEMConfig.cmake: nvshmem::nvshmem_host,
#      nvshmem::nvshmem_device), hinted by NVSHMEM_HOME and NVSHMEM_DIR;
#   2. NVSHMEM_HOME (CMake variable, else environment variable): an NVSHMEM install (include/,
#      lib/) or a pip wheel's nvidia/nvshmem folder (whose lib/ may hold libnvshmem_host.so.3 only);
#   3. the nvidia-nvshmem-cu12/cu13 wheel that the python3 on PATH imports (nvidia.nvshmem).
# The CUDA runtime headers (cuda_runtime.h) and CCCL (nv/target; include/cccl in CUDA 13) come
# from UpcxxExtraNvshmem_CUDA_INCLUDE_DIR (cache), CUDAToolkit when the project found it, CUDA_HOME
# / CUDA_PATH / CUDAToolkit_ROOT, UPC++'s include directories (UPC++ built with CUDA names its
# CUDA), the CUDA wheels beside a pip NVSHMEM, then /usr/local/cuda.
#
# Sets NvshmemForExtra_FOUND, NvshmemForExtra_WHY (what was looked at, when not found),
# NvshmemForExtra_HOME, NvshmemForExtra_VERSION, NvshmemForExtra_DEVICE_LIBRARY.

set(NvshmemForExtra_FOUND FALSE)
set(NvshmemForExtra_WHY "")
set(NvshmemForExtra_HOME "")
set(NvshmemForExtra_VERSION "")
set(NvshmemForExtra_DEVICE_LIBRARY "")
set(_nfe_looked "")
set(_nfe_host "")      # a target or a file
set(_nfe_device "")    # a target or a file
set(_nfe_inc "")

if(DEFINED NVSHMEM_HOME AND NOT "${NVSHMEM_HOME}" STREQUAL "")
  set(_nfe_hint "${NVSHMEM_HOME}")
elseif(NOT "$ENV{NVSHMEM_HOME}" STREQUAL "")
  set(_nfe_hint "$ENV{NVSHMEM_HOME}")
else()
  set(_nfe_hint "")
endif()

# An NVSHMEM root (install or wheel folder): include/nvshmem.h and lib/libnvshmem_host.so[.3].
function(_nfe_check_root root out_inc out_host out_device)
  set(${out_inc} "" PARENT_SCOPE)
  set(${out_host} "" PARENT_SCOPE)
  set(${out_device} "" PARENT_SCOPE)
  if(NOT EXISTS "${root}/include/nvshmem.h")
    return()
  endif()
  foreach(_d lib lib64)
    foreach(_f libnvshmem_host.so.3 libnvshmem_host.so)
      if(EXISTS "${root}/${_d}/${_f}")
        set(${out_inc} "${root}/include" PARENT_SCOPE)
        set(${out_host} "${root}/${_d}/${_f}" PARENT_SCOPE)
        if(EXISTS "${root}/${_d}/libnvshmem_device.a")
          set(${out_device} "${root}/${_d}/libnvshmem_device.a" PARENT_SCOPE)
        endif()
        return()
      endif()
    endforeach()
  endforeach()
endfunction()

# 1. NVSHMEM's own CMake package.
if(NOT TARGET nvshmem::nvshmem_host)
  set(_nfe_hints "")
  if(_nfe_hint)
    list(APPEND _nfe_hints "${_nfe_hint}" "${_nfe_hint}/lib/cmake/nvshmem")
  endif()
  find_package(NVSHMEM CONFIG QUIET HINTS ${_nfe_hints})
endif()
if(TARGET nvshmem::nvshmem_host)
  set(_nfe_host nvshmem::nvshmem_host)
  if(TARGET nvshmem::nvshmem_device)
    set(_nfe_device nvshmem::nvshmem_device)
  endif()
  if(NVSHMEM_INCLUDE_DIR)
    set(_nfe_inc "${NVSHMEM_INCLUDE_DIR}")
  else()
    get_target_property(_nfe_inc nvshmem::nvshmem_host INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT _nfe_inc)
      set(_nfe_inc "")
    endif()
  endif()
  if(NVSHMEM_DIR)
    set(NvshmemForExtra_HOME "${NVSHMEM_DIR}")
  endif()
  list(APPEND _nfe_looked "NVSHMEM's CMake package: found (${NVSHMEM_DIR})")
else()
  if(_nfe_hint)
    list(APPEND _nfe_looked "NVSHMEM's CMake package (NVSHMEMConfig.cmake, by NVSHMEM_DIR, CMAKE_PREFIX_PATH and ${_nfe_hint}): none")
  else()
    list(APPEND _nfe_looked "NVSHMEM's CMake package (NVSHMEMConfig.cmake, by NVSHMEM_DIR and CMAKE_PREFIX_PATH): none")
  endif()
endif()

# 2. NVSHMEM_HOME.
if(NOT _nfe_host)
  if(_nfe_hint)
    _nfe_check_root("${_nfe_hint}" _nfe_inc _nfe_host _nfe_device)
    if(_nfe_host)
      set(NvshmemForExtra_HOME "${_nfe_hint}")
    else()
      list(APPEND _nfe_looked "NVSHMEM_HOME=${_nfe_hint}: no include/nvshmem.h with lib/libnvshmem_host.so.3")
    endif()
  else()
    list(APPEND _nfe_looked "NVSHMEM_HOME: not set (CMake or environment variable)")
  endif()
endif()

# 3. The wheel of the python3 on PATH.
if(NOT _nfe_host)
  find_program(_nfe_python NAMES python3 NO_CACHE)
  if(_nfe_python)
    execute_process(
      COMMAND "${_nfe_python}" -c "import importlib.util as u; s = u.find_spec('nvidia.nvshmem'); print(list(s.submodule_search_locations)[0] if s else '')"
      OUTPUT_VARIABLE _nfe_wheel ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _nfe_rc)
    if(_nfe_rc EQUAL 0 AND _nfe_wheel)
      _nfe_check_root("${_nfe_wheel}" _nfe_inc _nfe_host _nfe_device)
      if(_nfe_host)
        set(NvshmemForExtra_HOME "${_nfe_wheel}")
      else()
        list(APPEND _nfe_looked "${_nfe_python}'s nvidia.nvshmem (${_nfe_wheel}): no include/nvshmem.h with lib/libnvshmem_host.so.3")
      endif()
    else()
      list(APPEND _nfe_looked "${_nfe_python}: no nvidia.nvshmem module (the quickstart installs NVSHMEM into ~/.cache/upcxx-extra-nvshmem/nvshmem/<release>/nvidia/nvshmem: give that as NVSHMEM_HOME)")
    endif()
  else()
    list(APPEND _nfe_looked "python3: not on PATH")
  endif()
  unset(_nfe_python)
endif()

if(_nfe_host)
  # The release, from the headers.
  foreach(_nfe_i IN LISTS _nfe_inc)
    if(EXISTS "${_nfe_i}/non_abi/nvshmem_version.h")
      file(STRINGS "${_nfe_i}/non_abi/nvshmem_version.h" _nfe_vl REGEX "#define NVSHMEM_VENDOR_(MAJOR|MINOR|PATCH)_VERSION ")
      set(_nfe_ver "")
      foreach(_nfe_p MAJOR MINOR PATCH)
        string(REGEX MATCH "NVSHMEM_VENDOR_${_nfe_p}_VERSION ([0-9]+)" _nfe_m "${_nfe_vl}")
        list(APPEND _nfe_ver "${CMAKE_MATCH_1}")
      endforeach()
      string(REPLACE ";" "." NvshmemForExtra_VERSION "${_nfe_ver}")
      break()
    endif()
  endforeach()

  # CUDA runtime headers and CCCL, which <nvshmem.h> includes.
  set(_nfe_cuda_cands "")
  if(UpcxxExtraNvshmem_CUDA_INCLUDE_DIR)
    list(APPEND _nfe_cuda_cands ${UpcxxExtraNvshmem_CUDA_INCLUDE_DIR})
  endif()
  if(CUDAToolkit_INCLUDE_DIRS)
    list(APPEND _nfe_cuda_cands ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  if(CMAKE_CUDA_TOOLKIT_INCLUDE_DIRECTORIES)
    list(APPEND _nfe_cuda_cands ${CMAKE_CUDA_TOOLKIT_INCLUDE_DIRECTORIES})
  endif()
  foreach(_nfe_e CUDA_HOME CUDA_PATH CUDAToolkit_ROOT)
    if(DEFINED ${_nfe_e} AND NOT "${${_nfe_e}}" STREQUAL "")
      list(APPEND _nfe_cuda_cands "${${_nfe_e}}/include")
    endif()
    if(NOT "$ENV{${_nfe_e}}" STREQUAL "")
      list(APPEND _nfe_cuda_cands "$ENV{${_nfe_e}}/include")
    endif()
  endforeach()
  foreach(_nfe_t UPCXX::upcxx UpcxxExtraNvshmem::upcxx)
    if(TARGET ${_nfe_t})
      get_target_property(_nfe_ti ${_nfe_t} INTERFACE_INCLUDE_DIRECTORIES)
      foreach(_nfe_i IN LISTS _nfe_ti)
        if(_nfe_i AND NOT _nfe_i MATCHES "\\$<")
          list(APPEND _nfe_cuda_cands "${_nfe_i}")
        endif()
      endforeach()
    endif()
  endforeach()
  if(NvshmemForExtra_HOME)
    get_filename_component(_nfe_nvidia "${NvshmemForExtra_HOME}" DIRECTORY)
    list(APPEND _nfe_cuda_cands "${_nfe_nvidia}/cu13/include" "${_nfe_nvidia}/cuda_runtime/include"
         "${_nfe_nvidia}/cu12/include" "${_nfe_nvidia}/cuda_cccl/include")
  endif()
  list(APPEND _nfe_cuda_cands /usr/local/cuda/include)
  set(_nfe_cudart_inc "")
  set(_nfe_cccl_inc "")
  foreach(_nfe_i IN LISTS _nfe_cuda_cands)
    if(NOT _nfe_cudart_inc AND EXISTS "${_nfe_i}/cuda_runtime.h")
      set(_nfe_cudart_inc "${_nfe_i}")
    endif()
    if(NOT _nfe_cccl_inc)
      if(EXISTS "${_nfe_i}/cccl/nv/target")
        set(_nfe_cccl_inc "${_nfe_i}/cccl")
      elseif(EXISTS "${_nfe_i}/nv/target")
        set(_nfe_cccl_inc "${_nfe_i}")
      endif()
    endif()
  endforeach()
  if(NOT _nfe_cudart_inc OR NOT _nfe_cccl_inc)
    list(REMOVE_DUPLICATES _nfe_cuda_cands)
    string(REPLACE ";" ", " _nfe_c "${_nfe_cuda_cands}")
    set(NvshmemForExtra_WHY "NVSHMEM ${NvshmemForExtra_VERSION} found (${NvshmemForExtra_HOME}), but not the CUDA headers it includes (cuda_runtime.h: '${_nfe_cudart_inc}', CCCL nv/target: '${_nfe_cccl_inc}'); looked in: ${_nfe_c}. Set CUDA_HOME, or UpcxxExtraNvshmem_CUDA_INCLUDE_DIR to the directories holding them")
    set(_nfe_host "")
  endif()
else()
  string(REPLACE ";" "; " NvshmemForExtra_WHY "NVSHMEM 3.x not found. Looked at: ${_nfe_looked}")
endif()

if(_nfe_host)
  if(NOT TARGET UpcxxExtraNvshmem::nvshmem)
    add_library(UpcxxExtraNvshmem::nvshmem INTERFACE IMPORTED)
    set(_nfe_incs ${_nfe_inc} "${_nfe_cudart_inc}" "${_nfe_cccl_inc}")
    list(REMOVE_DUPLICATES _nfe_incs)
    set_target_properties(UpcxxExtraNvshmem::nvshmem PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${_nfe_incs}"
      INTERFACE_LINK_LIBRARIES "${_nfe_host};${CMAKE_DL_LIBS}")
  endif()
  if(_nfe_device AND NOT TARGET UpcxxExtraNvshmem::nvshmem_device)
    if(TARGET ${_nfe_device})
      add_library(UpcxxExtraNvshmem::nvshmem_device INTERFACE IMPORTED)
      set_target_properties(UpcxxExtraNvshmem::nvshmem_device PROPERTIES INTERFACE_LINK_LIBRARIES "${_nfe_device}")
      set(NvshmemForExtra_DEVICE_LIBRARY "${_nfe_device}")
    else()
      add_library(UpcxxExtraNvshmem::nvshmem_device STATIC IMPORTED)
      set_target_properties(UpcxxExtraNvshmem::nvshmem_device PROPERTIES
        IMPORTED_LOCATION "${_nfe_device}"
        INTERFACE_LINK_LIBRARIES "UpcxxExtraNvshmem::nvshmem")
      set(NvshmemForExtra_DEVICE_LIBRARY "${_nfe_device}")
    endif()
  endif()
  set(NvshmemForExtra_FOUND TRUE)
endif()

if(NOT COMMAND upcxx_extra_nvshmem_add_device_code)
  # upcxx_extra_nvshmem_add_device_code(<target>): the one way for a target with its own NVSHMEM
  # kernels. The project enables CUDA (project(... LANGUAGES CXX CUDA) or enable_language(CUDA))
  # and chooses CMAKE_CUDA_ARCHITECTURES; this function makes the target's CUDA code separable
  # (nvcc -rdc=true) with device symbols resolved at its link, links NVSHMEM's device library, and
  # adds one CUDA source that includes <upcxx_extra/nvshmem/device_library.hpp>.
  function(upcxx_extra_nvshmem_add_device_code target)
    if(NOT TARGET ${target})
      message(FATAL_ERROR "upcxx_extra_nvshmem_add_device_code: '${target}' is not a target")
    endif()
    if(NOT TARGET UpcxxExtraNvshmem::nvshmem)
      message(FATAL_ERROR "upcxx_extra_nvshmem_add_device_code(${target}): NVSHMEM was not found: ask for it with find_package(UpcxxExtraNvshmem CONFIG REQUIRED COMPONENTS cxx nvshmem)")
    endif()
    if(NOT TARGET UpcxxExtraNvshmem::nvshmem_device)
      message(FATAL_ERROR "upcxx_extra_nvshmem_add_device_code(${target}): the NVSHMEM found (${NvshmemForExtra_HOME}) has no device library libnvshmem_device.a (the nvidia-nvshmem-cu12 3.1.x wheels have none): use an NVSHMEM that has it (NVSHMEM_HOME)")
    endif()
    get_property(_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
    if(NOT "CUDA" IN_LIST _langs)
      message(FATAL_ERROR "upcxx_extra_nvshmem_add_device_code(${target}): CUDA is not enabled in this project: project(... LANGUAGES CXX CUDA) or enable_language(CUDA) first")
    endif()
    set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION ON CUDA_RESOLVE_DEVICE_SYMBOLS ON)
    target_link_libraries(${target} PRIVATE UpcxxExtraNvshmem::upcxx_extra_nvshmem UpcxxExtraNvshmem::nvshmem
                          UpcxxExtraNvshmem::nvshmem_device)
    set(_src "${CMAKE_CURRENT_BINARY_DIR}/upcxx_extra_nvshmem_device_library_${target}.cu")
    file(CONFIGURE OUTPUT "${_src}" CONTENT
      "// Generated by upcxx_extra_nvshmem_add_device_code(${target}): upcxx::extra::nvshmem_init()\n// initialises NVSHMEM through its device library in this program.\n#include <upcxx_extra/nvshmem/device_library.hpp>\n")
    target_sources(${target} PRIVATE "${_src}")
  endfunction()
endif()

foreach(_nfe_v _nfe_looked _nfe_host _nfe_device _nfe_inc _nfe_hint _nfe_hints _nfe_wheel _nfe_rc _nfe_vl _nfe_ver
               _nfe_cuda_cands _nfe_cudart_inc _nfe_cccl_inc _nfe_ti _nfe_nvidia _nfe_c _nfe_incs _nfe_i _nfe_e _nfe_t _nfe_p _nfe_m)
  unset(${_nfe_v})
endforeach()
unset(_nfe_v)
