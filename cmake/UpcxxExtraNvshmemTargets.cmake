# The UpcxxExtraNvshmem:: targets, defined the same way for the installed package
# (UpcxxExtraNvshmemConfig.cmake) and for this project used as a subdirectory (add_subdirectory,
# FetchContent: CMakeLists.txt). Not a public entry point: include one of those.
#
# Expects:
#   UpcxxExtraNvshmem_INCLUDE_DIR   where upcxx_extra_nvshmem.h and upcxx_extra/ are
#   _uxn_library, _uxn_soname       the C library's file and soname
#   _uxn_want_nvshmem               look for NVSHMEM (the component `nvshmem`)
#   _uxn_global                     TRUE in a subdirectory: every target, and the imported targets
#                                   they link, are made visible to the whole project
# Defines:
#   UpcxxExtraNvshmem::upcxx_extra_nvshmem      the C library (libupcxx_extra_nvshmem.so) and its header
#   UpcxxExtraNvshmem::upcxx_extra_nvshmem_cxx  the header-only C++ layer + UPC++ (when UPC++ is found)
#   UpcxxExtraNvshmem::nvshmem                  NVSHMEM for host-only programs (when asked and found)
#   UpcxxExtraNvshmem::nvshmem_device           NVSHMEM's device library (when it has one)
#   upcxx_extra_nvshmem_add_device_code(<target>)
# Sets UpcxxExtraNvshmem_CXX_FOUND, UpcxxExtraNvshmem_UPCXX_TARGET, UpcxxExtraNvshmem_NVSHMEM_FOUND,
# UpcxxExtraNvshmem_NVSHMEM_VERSION, UpcxxExtraNvshmem_NVSHMEM_HOME, _uxn_cxx_why, _uxn_nvshmem_why.

if(_uxn_global)
  set(_uxn_scope GLOBAL)
else()
  set(_uxn_scope "")
endif()

if(NOT TARGET UpcxxExtraNvshmem::upcxx_extra_nvshmem)
  add_library(UpcxxExtraNvshmem::upcxx_extra_nvshmem SHARED IMPORTED ${_uxn_scope})
  set_target_properties(UpcxxExtraNvshmem::upcxx_extra_nvshmem PROPERTIES
    IMPORTED_LOCATION "${_uxn_library}"
    IMPORTED_SONAME "${_uxn_soname}"
    INTERFACE_INCLUDE_DIRECTORIES "${UpcxxExtraNvshmem_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CMAKE_DL_LIBS}")
endif()

# The C++ layer: its header (installed when the source tree had it) and UPC++.
set(UpcxxExtraNvshmem_CXX_FOUND FALSE)
set(UpcxxExtraNvshmem_UPCXX_TARGET "")
set(_uxn_cxx_why "")
if(UpcxxExtraNvshmem_SKIP_CXX)
  set(_uxn_cxx_why "UpcxxExtraNvshmem_SKIP_CXX is set")
elseif(NOT EXISTS "${UpcxxExtraNvshmem_INCLUDE_DIR}/upcxx_extra/nvshmem.hpp")
  set(_uxn_cxx_why "upcxx_extra/nvshmem.hpp is not installed")
else()
  include("${CMAKE_CURRENT_LIST_DIR}/FindUpcxxForExtra.cmake")
  if(UpcxxForExtra_FOUND)
    if(NOT TARGET UpcxxExtraNvshmem::upcxx_extra_nvshmem_cxx)
      add_library(UpcxxExtraNvshmem::upcxx_extra_nvshmem_cxx INTERFACE IMPORTED ${_uxn_scope})
      set_target_properties(UpcxxExtraNvshmem::upcxx_extra_nvshmem_cxx PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${UpcxxExtraNvshmem_INCLUDE_DIR}"
        INTERFACE_COMPILE_FEATURES "cxx_std_17"
        INTERFACE_LINK_LIBRARIES "UpcxxExtraNvshmem::upcxx_extra_nvshmem;${UpcxxForExtra_TARGET}")
    endif()
    set(UpcxxExtraNvshmem_CXX_FOUND TRUE)
    set(UpcxxExtraNvshmem_UPCXX_TARGET "${UpcxxForExtra_TARGET}")
  else()
    set(_uxn_cxx_why "UPC++ not found (${UpcxxForExtra_WHY})")
  endif()
endif()

# NVSHMEM, for programs that call it (nvshmem_malloc, ...) and for programs with NVSHMEM kernels.
set(UpcxxExtraNvshmem_NVSHMEM_FOUND FALSE)
set(UpcxxExtraNvshmem_NVSHMEM_VERSION "")
set(UpcxxExtraNvshmem_NVSHMEM_HOME "")
set(_uxn_nvshmem_why "not asked for (COMPONENTS nvshmem)")
if(_uxn_want_nvshmem)
  include("${CMAKE_CURRENT_LIST_DIR}/FindNvshmemForExtra.cmake")
  set(UpcxxExtraNvshmem_NVSHMEM_FOUND ${NvshmemForExtra_FOUND})
  set(UpcxxExtraNvshmem_NVSHMEM_VERSION "${NvshmemForExtra_VERSION}")
  set(UpcxxExtraNvshmem_NVSHMEM_HOME "${NvshmemForExtra_HOME}")
  set(_uxn_nvshmem_why "${NvshmemForExtra_WHY}")
endif()

# In a subdirectory the imported targets made here (ours, UPC++'s, NVSHMEM's and what they link)
# must be visible where the project links them.
if(_uxn_global)
  function(_uxn_make_global t)
    if(NOT TARGET ${t})
      return()
    endif()
    get_target_property(_aliased ${t} ALIASED_TARGET)
    if(_aliased)
      _uxn_make_global(${_aliased})
      return()
    endif()
    get_target_property(_imported ${t} IMPORTED)
    get_target_property(_global ${t} IMPORTED_GLOBAL)
    get_target_property(_dir ${t} SOURCE_DIR)
    if(_imported AND NOT _global AND _dir STREQUAL CMAKE_CURRENT_SOURCE_DIR)
      set_property(TARGET ${t} PROPERTY IMPORTED_GLOBAL TRUE)
    endif()
    get_target_property(_deps ${t} INTERFACE_LINK_LIBRARIES)
    foreach(_d IN LISTS _deps)
      if(_d AND NOT _d MATCHES "\\$<" AND TARGET ${_d})
        _uxn_make_global(${_d})
      endif()
    endforeach()
  endfunction()
  foreach(_uxn_t upcxx_extra_nvshmem upcxx_extra_nvshmem_cxx nvshmem nvshmem_device)
    _uxn_make_global(UpcxxExtraNvshmem::${_uxn_t})
  endforeach()
  unset(_uxn_t)
endif()
unset(_uxn_scope)
