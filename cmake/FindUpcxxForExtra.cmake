# Finds UPC++ for upcxx-extra-nvshmem's C++ layer. Included by UpcxxExtraNvshmemConfig.cmake
# (installed beside it) and usable by any project: include() it, or find_package(UpcxxForExtra)
# with this directory in CMAKE_MODULE_PATH.
#
# Order:
#   1. a target UPCXX::upcxx that already exists, or find_package(UPCXX CONFIG QUIET) (UPC++'s
#      own package, hinted by UPCXX_INSTALL);
#   2. upcxx-meta, from ${UPCXX_INSTALL}/bin (CMake variable, else environment variable), else
#      PATH: `upcxx-meta PPFLAGS|LDFLAGS|LIBS` run with UPCXX_CODEMODE, UPCXX_THREADMODE and
#      UPCXX_NETWORK from the environment (defaults O3, seq, smp), turned into the INTERFACE IMPORTED
#      target UpcxxExtraNvshmem::upcxx.
#
# Sets:
#   UpcxxForExtra_FOUND    TRUE/FALSE
#   UpcxxForExtra_TARGET   UPCXX::upcxx or UpcxxExtraNvshmem::upcxx
#   UpcxxForExtra_WHY      why it was not found (for messages)
#   UPCXX_META_EXECUTABLE  (cache) the upcxx-meta used, if any

set(UpcxxForExtra_FOUND FALSE)
set(UpcxxForExtra_TARGET "")
set(UpcxxForExtra_WHY "")

set(_ufe_hint "")
if(DEFINED UPCXX_INSTALL AND NOT "${UPCXX_INSTALL}" STREQUAL "")
  set(_ufe_hint "${UPCXX_INSTALL}")
elseif(NOT "$ENV{UPCXX_INSTALL}" STREQUAL "")
  set(_ufe_hint "$ENV{UPCXX_INSTALL}")
endif()

set(_ufe_quiet FALSE)
if(UpcxxForExtra_FIND_QUIETLY OR UpcxxExtraNvshmem_FIND_QUIETLY)
  set(_ufe_quiet TRUE)
endif()

# 1. UPC++'s own CMake package. Its UPCXXConfig.cmake prints status lines of its own ("Found
# UPCXX" twice, "requires the c++11 standard" where the C++ layer needs C++17, its modes): they
# are held back (its warnings and errors still show) and one line below says what was found.
set(_ufe_own_package FALSE)
if(NOT TARGET UPCXX::upcxx)
  set(_ufe_log_level "${CMAKE_MESSAGE_LOG_LEVEL}")
  set(CMAKE_MESSAGE_LOG_LEVEL WARNING)
  if(_ufe_hint)
    find_package(UPCXX CONFIG QUIET HINTS "${_ufe_hint}")
  else()
    find_package(UPCXX CONFIG QUIET)
  endif()
  set(CMAKE_MESSAGE_LOG_LEVEL "${_ufe_log_level}")
  set(_ufe_own_package TRUE)
endif()
if(TARGET UPCXX::upcxx)
  set(UpcxxForExtra_FOUND TRUE)
  set(UpcxxForExtra_TARGET UPCXX::upcxx)
  if(_ufe_own_package AND NOT _ufe_quiet)
    message(STATUS "UPC++ ${UPCXX_VERSION} from ${UPCXX_META_EXECUTABLE} (UPC++'s CMake package, target UPCXX::upcxx; "
                   "UPCXX_NETWORK=${UPCXX_NETWORK}, UPCXX_CODEMODE=$ENV{UPCXX_CODEMODE}, UPCXX_THREADMODE=$ENV{UPCXX_THREADMODE})")
  endif()
elseif(TARGET UpcxxExtraNvshmem::upcxx)
  # Built from upcxx-meta by an earlier inclusion.
  set(UpcxxForExtra_FOUND TRUE)
  set(UpcxxForExtra_TARGET UpcxxExtraNvshmem::upcxx)
else()
  # 2. upcxx-meta.
  if(_ufe_hint)
    find_program(UPCXX_META_EXECUTABLE upcxx-meta HINTS "${_ufe_hint}/bin" NO_DEFAULT_PATH)
  endif()
  find_program(UPCXX_META_EXECUTABLE upcxx-meta)
  if(NOT UPCXX_META_EXECUTABLE AND _ufe_hint)
    set(UpcxxForExtra_WHY "UPCXX_INSTALL=${_ufe_hint} is not a UPC++ install (no ${_ufe_hint}/bin/upcxx-meta, no UPCXX CMake package there) and no upcxx-meta is on PATH: set UPCXX_INSTALL to the directory holding UPC++'s bin/upcxx-meta")
  elseif(NOT UPCXX_META_EXECUTABLE)
    set(UpcxxForExtra_WHY "no UPCXX CMake package, no upcxx-meta (set UPCXX_INSTALL to UPC++'s install directory, or put its bin/ on PATH)")
  else()
    set(_ufe_network "$ENV{UPCXX_NETWORK}")
    if(_ufe_network STREQUAL "")
      set(_ufe_network smp)
    endif()
    # UPC++'s own variables choose the build of the install, as upcxx-meta documents.
    set(_ufe_codemode "$ENV{UPCXX_CODEMODE}")
    if(_ufe_codemode STREQUAL "")
      set(_ufe_codemode O3)
    endif()
    set(_ufe_threadmode "$ENV{UPCXX_THREADMODE}")
    if(_ufe_threadmode STREQUAL "")
      set(_ufe_threadmode seq)
    endif()
    set(_ufe_ok TRUE)
    foreach(_ufe_what PPFLAGS LDFLAGS LIBS)
      execute_process(
        COMMAND "${CMAKE_COMMAND}" -E env "UPCXX_CODEMODE=${_ufe_codemode}" "UPCXX_THREADMODE=${_ufe_threadmode}"
                "UPCXX_NETWORK=${_ufe_network}" "${UPCXX_META_EXECUTABLE}" ${_ufe_what}
        OUTPUT_VARIABLE _ufe_out ERROR_VARIABLE _ufe_err RESULT_VARIABLE _ufe_rc
        OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(NOT _ufe_rc EQUAL 0)
        set(_ufe_ok FALSE)
        set(UpcxxForExtra_WHY "'${UPCXX_META_EXECUTABLE} ${_ufe_what}' failed (${_ufe_rc}): ${_ufe_err}")
        break()
      endif()
      separate_arguments(_ufe_${_ufe_what} UNIX_COMMAND "${_ufe_out}")
    endforeach()
    if(_ufe_ok)
      set(_ufe_incs "")
      set(_ufe_defs "")
      set(_ufe_opts "")
      set(_ufe_next "")
      foreach(_ufe_f IN LISTS _ufe_PPFLAGS)
        if(_ufe_next STREQUAL "I")
          list(APPEND _ufe_incs "${_ufe_f}")
          set(_ufe_next "")
        elseif(_ufe_next STREQUAL "D")
          list(APPEND _ufe_defs "${_ufe_f}")
          set(_ufe_next "")
        elseif(_ufe_f STREQUAL "-I")
          set(_ufe_next "I")
        elseif(_ufe_f STREQUAL "-D")
          set(_ufe_next "D")
        elseif(_ufe_f MATCHES "^-I(.+)$")
          list(APPEND _ufe_incs "${CMAKE_MATCH_1}")
        elseif(_ufe_f MATCHES "^-D(.+)$")
          list(APPEND _ufe_defs "${CMAKE_MATCH_1}")
        else()
          # Other preprocessor flags (-std=..., -isystem x...): C++ compile options, kept whole.
          list(APPEND _ufe_opts "$<$<COMPILE_LANGUAGE:CXX>:${_ufe_f}>")
        endif()
      endforeach()
      # "--param name=value" is one option in two words: CMake de-duplicates link options word
      # by word (the second "--param" goes, its value becomes a file name), so keep each pair whole.
      set(_ufe_ldflags "")
      set(_ufe_param FALSE)
      foreach(_ufe_f IN LISTS _ufe_LDFLAGS)
        if(_ufe_param)
          list(APPEND _ufe_ldflags "SHELL:--param ${_ufe_f}")
          set(_ufe_param FALSE)
        elseif(_ufe_f STREQUAL "--param")
          set(_ufe_param TRUE)
        else()
          list(APPEND _ufe_ldflags "${_ufe_f}")
        endif()
      endforeach()
      set(_ufe_LDFLAGS "${_ufe_ldflags}")
      add_library(UpcxxExtraNvshmem::upcxx INTERFACE IMPORTED)
      set_target_properties(UpcxxExtraNvshmem::upcxx PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${_ufe_incs}"
        INTERFACE_COMPILE_DEFINITIONS "${_ufe_defs}"
        INTERFACE_COMPILE_OPTIONS "${_ufe_opts}"
        # LDFLAGS are linker-driver options; LIBS (archives, -L, -l, -pthread) keep their order.
        INTERFACE_LINK_OPTIONS "${_ufe_LDFLAGS}"
        INTERFACE_LINK_LIBRARIES "${_ufe_LIBS}")
      set(UpcxxForExtra_FOUND TRUE)
      set(UpcxxForExtra_TARGET UpcxxExtraNvshmem::upcxx)
      if(NOT _ufe_quiet)
        message(STATUS "UPC++ from ${UPCXX_META_EXECUTABLE} (UPCXX_NETWORK=${_ufe_network}, UPCXX_CODEMODE=${_ufe_codemode}, UPCXX_THREADMODE=${_ufe_threadmode})")
      endif()
    endif()
  endif()
endif()

# For find_package(UpcxxForExtra) in module mode.
set(UpcxxForExtra_FOUND ${UpcxxForExtra_FOUND})
if(UpcxxForExtra_FIND_REQUIRED AND NOT UpcxxForExtra_FOUND)
  message(FATAL_ERROR "UPC++ not found: ${UpcxxForExtra_WHY}")
endif()
foreach(_ufe_v _ufe_hint _ufe_network _ufe_ok _ufe_incs _ufe_defs _ufe_opts _ufe_next _ufe_f _ufe_what
               _ufe_out _ufe_err _ufe_rc _ufe_codemode _ufe_threadmode _ufe_PPFLAGS _ufe_LDFLAGS _ufe_LIBS
               _ufe_ldflags _ufe_param _ufe_quiet _ufe_own_package _ufe_log_level)
  unset(${_ufe_v})
endforeach()
unset(_ufe_v)
