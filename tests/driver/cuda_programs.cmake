# The stand-alone CUDA benchmarks of tests/cxx/bench (*.cu: batch_methods, completion_cost; run by
# hand on a GPU host, BENCHMARKS.md) compile with the CUDA compiler the suite found, object only
# (no GPU, no libcuda needed), against the kernels of src/cuda/batch_copy.cu they include.
#   cmake -DROOT=<repository> -DNVCC=<nvcc> -P tests/driver/cuda_programs.cmake
cmake_minimum_required(VERSION 3.20)
file(GLOB programs "${ROOT}/tests/cxx/bench/*.cu")
if(NOT programs)
  message(FATAL_ERROR "no .cu program in ${ROOT}/tests/cxx/bench")
endif()
foreach(f IN LISTS programs)
  execute_process(COMMAND "${NVCC}" -c -O2 -arch=compute_90 -o /dev/null "${f}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${f} does not compile with ${NVCC} (exit ${rc})")
  endif()
  message(STATUS "compiled ${f}")
endforeach()
