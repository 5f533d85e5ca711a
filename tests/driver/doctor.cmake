# The installed doctor against every NVSHMEM release: each must be "supported" (exit 0), named by
# its library and found from NVSHMEM_HOME (--json: found_by NVSHMEM_HOME, with why; the text
# report says which it chose on a "chosen:" line).
#   cmake -DDOCTOR=<prefix>/bin/upcxx-nvshmem-doctor -DROOTS=<root:root> -P doctor.cmake
cmake_minimum_required(VERSION 3.20)
string(REPLACE ":" ";" ROOTS "${ROOTS}")
if(NOT ROOTS)
  message(FATAL_ERROR "no NVSHMEM releases to check (UXN_NVSHMEM_ROOTS)")
endif()
set(bad)
foreach(root IN LISTS ROOTS)
  execute_process(COMMAND "${DOCTOR}" "${root}/lib/libnvshmem_host.so.3" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    list(APPEND bad "${root} (exit ${rc})")
  endif()
  set(ENV{NVSHMEM_HOME} "${root}")
  execute_process(COMMAND "${DOCTOR}" --json OUTPUT_VARIABLE json RESULT_VARIABLE rc)
  if(NOT json MATCHES "\"verdict\": \"supported\"" OR NOT json MATCHES "\"found_by\": \"NVSHMEM_HOME\""
     OR NOT json MATCHES "\"why\": \"NVSHMEM_HOME is set")
    list(APPEND bad "${root} with NVSHMEM_HOME (--json exit ${rc}): ${json}")
  endif()
  execute_process(COMMAND "${DOCTOR}" OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT text MATCHES "\nchosen:    NVSHMEM_HOME is set")
    list(APPEND bad "${root} with NVSHMEM_HOME (text exit ${rc}): ${text}")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "not supported: ${bad}")
endif()
