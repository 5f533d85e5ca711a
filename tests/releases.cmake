# The releases and the cache layout for the test suite's CMake (tests/CMakeLists.txt,
# tests/standin/CMakeLists.txt), read from where they are named once: the block of plain
# NAME=word / NAME=(word ...) lines at the top of scripts/common.sh. Sets
#   UXN_REL_<NAME without UXN_>             each such line's value, a list as a CMake list:
#                                           UXN_REL_NVSHMEM_DEFAULT (3.4.5),
#                                           UXN_REL_NVSHMEM_VERSIONS (3.1.7;3.4.5;3.8.0),
#                                           UXN_REL_UPCXX_RELEASES, UXN_REL_CACHE_UPCXX, ...
#   UXN_REL_CACHE                           the cache's default: $HOME/<UXN_CACHE_IN_HOME>
# and defines
#   uxn_rel_nvshmem_root(VAR CACHE VERSION) the root (.../nvidia/nvshmem) of the cu12 NVSHMEM
#                                           VERSION in the cache CACHE (common.sh's uxn_nvshmem_root)
set(_uxn_rel_file "${CMAKE_CURRENT_LIST_DIR}/../scripts/common.sh")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_uxn_rel_file}")
set(_uxn_rel_names CACHE_IN_HOME NVSHMEM_VERSIONS NVSHMEM_DEFAULT CACHE_NVSHMEM CUFFTMP_VERSION UPCXX_RELEASES
                   CACHE_UPCXX)
list(JOIN _uxn_rel_names "|" _uxn_rel_alt)
file(STRINGS "${_uxn_rel_file}" _uxn_rel_lines REGEX "^UXN_(${_uxn_rel_alt})=")
foreach(_uxn_rel_line IN LISTS _uxn_rel_lines)
  # A word ([A-Za-z0-9._/{}-]), or words in ( ) separated by spaces: nothing a shell would expand.
  if(NOT _uxn_rel_line MATCHES "^UXN_([A-Z0-9_]+)=(\\(([A-Za-z0-9._/{} -]*)\\)|([A-Za-z0-9._/{}-]+))$")
    message(FATAL_ERROR "${_uxn_rel_file}: '${_uxn_rel_line}' is not a plain NAME=word or NAME=(word ...) "
                        "line (tests/releases.cmake reads it as text)")
  endif()
  set(_uxn_rel_name "${CMAKE_MATCH_1}")
  set(_uxn_rel_value "${CMAKE_MATCH_3}${CMAKE_MATCH_4}")
  string(STRIP "${_uxn_rel_value}" _uxn_rel_value)
  string(REGEX REPLACE " +" ";" "UXN_REL_${_uxn_rel_name}" "${_uxn_rel_value}")
endforeach()
foreach(_uxn_rel_name IN LISTS _uxn_rel_names)
  if(NOT DEFINED "UXN_REL_${_uxn_rel_name}")
    message(FATAL_ERROR "${_uxn_rel_file}: no line UXN_${_uxn_rel_name}=...")
  endif()
endforeach()
set(UXN_REL_CACHE "$ENV{HOME}/${UXN_REL_CACHE_IN_HOME}")

function(uxn_rel_nvshmem_root var cache version)
  string(REPLACE "{version}" "${version}" root "${UXN_REL_CACHE_NVSHMEM}")
  set(${var} "${cache}/${root}" PARENT_SCOPE)
endfunction()
