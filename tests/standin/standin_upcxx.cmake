# The UPC++ smoke tests, (b) and (c), for every install in UXN_STANDIN_UPCXX_INSTALLS (included by
# CMakeLists.txt). UPC++ is taken through upcxx-meta (smp conduit; UXN_STANDIN_UPCXX_THREADMODE and
# _CODEMODE). Every program links the CUDA stand-in FIRST, before UPC++'s flags, so that the
# linker never takes a member of libcudart_static.a: the CUDA runtime calls resolve to the stand-in.

function(uxn_standin_upcxx_meta install what out)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E env UPCXX_NETWORK=smp
                          "UPCXX_CODEMODE=${UXN_STANDIN_UPCXX_CODEMODE}" "UPCXX_THREADMODE=${UXN_STANDIN_UPCXX_THREADMODE}"
                          "${install}/bin/upcxx-meta" ${what}
                  OUTPUT_VARIABLE v RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "stand-in: ${install}/bin/upcxx-meta ${what} failed (${rc})")
  endif()
  separate_arguments(v UNIX_COMMAND "${v}")
  set(${out} "${v}" PARENT_SCOPE)
endfunction()

set(_upcxx_env "UPCXX_SHARED_HEAP_SIZE=64MB" "GASNET_PSHM_NODES=2")
foreach(_install IN LISTS UXN_STANDIN_UPCXX_INSTALLS)
  if(NOT EXISTS "${_install}/bin/upcxx-meta")
    message(STATUS "stand-in: no UPC++ at ${_install}: its smoke tests are not built")
    continue()
  endif()
  get_filename_component(_rel "${_install}" NAME)
  string(REGEX REPLACE "^upcxx-" "" _rel "${_rel}")
  uxn_standin_upcxx_meta("${_install}" PPFLAGS _pp)
  uxn_standin_upcxx_meta("${_install}" CXXFLAGS _cxx)
  uxn_standin_upcxx_meta("${_install}" LIBFLAGS _lib)
  list(FILTER _cxx EXCLUDE REGEX "^-std=")

  # (b) upcxx::copy over a cuda_device segment.
  set(_t standin_upcxx_copy_${_rel})
  add_executable(${_t} smoke/upcxx_copy.cpp)
  target_compile_options(${_t} PRIVATE ${_pp} ${_cxx})
  target_link_libraries(${_t} PRIVATE uxn_standin_cuda ${_lib})
  # The C++ tests' check.hpp (tests/cxx) and the library's error.hpp it includes.
  target_include_directories(${_t} PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/../cxx" "${CMAKE_CURRENT_SOURCE_DIR}/../../include")
  add_test(NAME ${_t} COMMAND "${_install}/bin/upcxx-run" -n 2 $<TARGET_FILE:${_t}>)
  set_tests_properties(${_t} PROPERTIES ENVIRONMENT "${_standin_env};${_upcxx_env}" TIMEOUT 120
    PASS_REGULAR_EXPRESSION "RESULT upcxx_copy PASS" FAIL_REGULAR_EXPRESSION "CHECK rank [0-9]+ FAIL")

  # No CUDA runtime code of its own in the binary (nothing from libcudart_static.a).
  add_test(NAME standin_no_cudart_${_rel} COMMAND sh -c "! nm '$<TARGET_FILE:${_t}>' | grep -E ' [TtWw] (cuda[A-Z]|__cudart|cudart)'")

  # (c) heap.copy through the installed C++ layer: a sub-project, configured, built and run at test
  # time against this UPC++ (as tests/cxx builds its GPU programs: find_package on the prefix).
  if(UXN_STANDIN_PREFIX)
    set(_t standin_heap_copy_${_rel})
    add_test(NAME ${_t} COMMAND "${CMAKE_CTEST_COMMAND}"
      --build-and-test "${CMAKE_CURRENT_SOURCE_DIR}/heap_copy" "${CMAKE_CURRENT_BINARY_DIR}/heap_copy-${_rel}"
      --build-generator "${CMAKE_GENERATOR}" --build-noclean
      --build-options "-DCMAKE_PREFIX_PATH=${UXN_STANDIN_PREFIX}" "-DNVSHMEM_HOME=${UXN_STANDIN_NVSHMEM_FAKE_HOME}"
                      "-DUXN_STANDIN_LIB_DIR=${UXN_STANDIN_LIB_DIR}" "-DUXN_UPCXX_RUN=${_install}/bin/upcxx-run"
                      "-DCMAKE_BUILD_TYPE=Release"
      --test-command "${CMAKE_CTEST_COMMAND}" --output-on-failure)
    set_tests_properties(${_t} PROPERTIES TIMEOUT 900
      ENVIRONMENT "UPCXX_INSTALL=${_install};UPCXX_NETWORK=smp;UPCXX_CODEMODE=${UXN_STANDIN_UPCXX_CODEMODE};UPCXX_THREADMODE=${UXN_STANDIN_UPCXX_THREADMODE}"
      DEPENDS "standin_upcxx_copy_${_rel}" FAIL_REGULAR_EXPRESSION "CHECK rank [0-9]+ FAIL")
  endif()
endforeach()
