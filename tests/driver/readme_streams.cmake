# The stream programs of the docs, verbatim: README's (<!-- test: streams/readme.cpp -->) and
# docs/streams.md's first example (<!-- test: streams/jacobi.cpp -->), and README's first program
# (first/main.cpp, which readme_first.cmake runs without a GPU), for one UPC++ release, built
# as README's first program is (find_package(UpcxxExtraNvshmem COMPONENTS cxx nvshmem) on the
# installed prefix) with the CUDA + NVSHMEM stand-in linked first (tests/standin: no GPU, no
# kernels), and run on 2 ranks with every stand-in copy landing 50 ms late (a step out of the
# stream's order then reads or leaves stale bytes: README's with heap.copy for copy_on_stream
# prints "halo from PE -1"): each must exit 0, print every PE's line as the page says, and
# draw nothing from UPC++ about a restricted context (2023.9 aborts on a collective started in a
# callback that progress runs, 2020.10 warns). The control: the same build with reduce_all started
# inside heap.after(s).then(...) must draw that message, so the check above can fail.
#   cmake -DROOT=<repo> -DBIN=<dir> -DPREFIX=<installed prefix> -DSTANDIN=<tests/standin build>
#         -DUPCXX=<UPC++ install> -DCUDA_HOME=<CUDA headers> -P readme_streams.cmake
cmake_minimum_required(VERSION 3.20)
foreach(f "${UPCXX}/bin/upcxx-run" "${STANDIN}/lib/libcuda.so.1" "${STANDIN}/nvshmem-home/include/nvshmem.h")
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "${f} not found")
  endif()
endforeach()
file(REMOVE_RECURSE "${BIN}")
execute_process(COMMAND python3 "${ROOT}/scripts/readme-blocks.py" "${ROOT}/README.md" "${BIN}/readme" COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND python3 "${ROOT}/scripts/readme-blocks.py" "${ROOT}/docs/streams.md" "${BIN}/streams" COMMAND_ERROR_IS_FATAL ANY)
set(src "${BIN}/src")
file(MAKE_DIRECTORY "${src}")
file(COPY_FILE "${BIN}/readme/streams/readme.cpp" "${src}/readme.cpp")
file(COPY_FILE "${BIN}/streams/streams/jacobi.cpp" "${src}/jacobi.cpp")
file(COPY_FILE "${BIN}/readme/first/main.cpp" "${src}/first.cpp")
# The control: the idiom UPC++ forbids.
file(WRITE "${src}/control.cpp" [=[
#include <nvshmem.h>
#include <upcxx/upcxx.hpp>
#include <upcxx_extra/nvshmem.hpp>
#include <cstdio>
int main() {
  upcxx::init();
  upcxx::extra::nvshmem_init();
  {
    upcxx::extra::nvshmem_heap heap;
    int sum = heap.after(0).then([] { return upcxx::reduce_all(1, upcxx::op_fast_add); }).wait();
    std::printf("control: sum %d\n", sum);
    heap.destroy();
  }
  upcxx::extra::nvshmem_finalize();
  upcxx::finalize();
}
]=])
file(WRITE "${src}/CMakeLists.txt" [=[
cmake_minimum_required(VERSION 3.20)
project(docs_streams LANGUAGES CXX)
find_package(UpcxxExtraNvshmem 0.1 CONFIG REQUIRED COMPONENTS cxx nvshmem)
add_library(standin_cuda SHARED IMPORTED)
set_target_properties(standin_cuda PROPERTIES IMPORTED_LOCATION "${STANDIN_LIB}/libcuda.so.1" IMPORTED_SONAME libcuda.so.1)
foreach(p first readme jacobi control)
  add_executable(${p} ${p}.cpp)
  # The stand-in first (tests/standin/README.md), then README's first program's two targets.
  target_link_libraries(${p} PRIVATE standin_cuda UpcxxExtraNvshmem::upcxx_extra_nvshmem_cxx UpcxxExtraNvshmem::nvshmem)
endforeach()
]=])
set(env "${CMAKE_COMMAND}" -E env "UPCXX_INSTALL=${UPCXX}" "CUDA_HOME=${CUDA_HOME}" UPCXX_NETWORK=smp
    UPCXX_THREADMODE=seq UPCXX_CODEMODE=O3)
execute_process(COMMAND ${env} "${CMAKE_COMMAND}" -S "${src}" -B "${BIN}/build" "-DCMAKE_PREFIX_PATH=${PREFIX}"
                        "-DNVSHMEM_HOME=${STANDIN}/nvshmem-home" "-DSTANDIN_LIB=${STANDIN}/lib"
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${env} "${CMAKE_COMMAND}" --build "${BIN}/build" COMMAND_ERROR_IS_FATAL ANY)

# run(program want...): 2 ranks on the stand-in; exit 0, every wanted line, no restricted context.
function(run program)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E env "LD_LIBRARY_PATH=${STANDIN}/lib" UPCXX_SHARED_HEAP_SIZE=256MB
                          UXN_STANDIN_COPY_DELAY_US=50000
                          "${UPCXX}/bin/upcxx-run" -n 2 "${BIN}/build/${program}"
                  TIMEOUT 120 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${program}, exit ${rc}:\n${out}")
  set(why)
  if(NOT rc EQUAL 0)
    string(APPEND why " exit ${rc};")
  endif()
  foreach(want IN LISTS ARGN)
    string(FIND "${out}" "${want}" at)
    if(at LESS 0)
      string(APPEND why " no '${want}';")
    endif()
  endforeach()
  if(out MATCHES "restricted context")
    string(APPEND why " UPC++ names a restricted context;")
  endif()
  if(why)
    message(FATAL_ERROR "${program} (${UPCXX}):${why}")
  endif()
endfunction()
run(first "PE 0: b holds PE 1's bytes" "PE 1: b holds PE 0's bytes")
run(readme "PE 0: halo from PE 1, sum 3" "PE 1: halo from PE 0, sum 3")
run(jacobi "PE 0: halos from PE 1 and PE 1, iteration 3, sum 106" "PE 1: halos from PE 0 and PE 0, iteration 3, sum 106")

execute_process(COMMAND "${CMAKE_COMMAND}" -E env "LD_LIBRARY_PATH=${STANDIN}/lib" UPCXX_SHARED_HEAP_SIZE=256MB
                          UXN_STANDIN_COPY_DELAY_US=50000
                        "${UPCXX}/bin/upcxx-run" -n 2 "${BIN}/build/control"
                TIMEOUT 120 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT out MATCHES "restricted context")
  message(FATAL_ERROR "control (${UPCXX}): reduce_all started in heap.after(s).then drew no 'restricted context' "
                      "from UPC++ (exit ${rc}), so the check of the docs' programs proves nothing:\n${out}")
endif()
message("control: a collective in heap.after(s).then draws UPC++'s 'restricted context' (exit ${rc})")
