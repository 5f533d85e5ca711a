// Shared by the GPU tests of the C++ layer (nvshmem_hpp_test.cpp, nvshmem_copy_test.cpp):
// CHECK lines, the expected-exception check, and NVSHMEM bootstrapped from UPC++.
#ifndef UXN_GPU_TEST_UTIL_HPP
#define UXN_GPU_TEST_UTIL_HPP

#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "check.hpp"

using uxn_check::expect_error;
// These programs link NVSHMEM's device library (tests/cxx/build-upcxx-program.sh: nvcc -rdc) and
// end with NVSHMEM's own nvshmem_finalize(): nvshmem_init() initialises NVSHMEM through the device
// library, which that nvshmem_finalize() matches.
#include "upcxx_extra/nvshmem/device_library.hpp"

// NVSHMEM 3.8 declares a global variable ::nvshmem_error: name the exception type qualified.
using heap_error = upcxx::extra::nvshmem_error;

// NVSHMEM on upcxx::world() (after upcxx::init() and cudaSetDevice: the smp conduit forks the ranks
// in upcxx::init()): upcxx::extra::nvshmem_init() on the device the caller made current.
static void nvshmem_init_from_upcxx() { upcxx::extra::nvshmem_init(); }

// A byte pattern per (PE, salt), written to device memory and counted back.
static unsigned char pattern(int pe, size_t i, int salt) {
    return static_cast<unsigned char>((pe * 37 + salt * 11 + i * 7 + (i >> 9)) & 0xff);
}
static void fill(unsigned char *dev, size_t n, int pe, int salt) {
    std::vector<unsigned char> h(n);
    for (size_t i = 0; i < n; i++) h[i] = pattern(pe, i, salt);
    cudaMemcpy(dev, h.data(), n, cudaMemcpyHostToDevice);
}
static long count_wrong(const unsigned char *dev, size_t n, int pe, int salt) {
    std::vector<unsigned char> h(n);
    if (cudaMemcpy(h.data(), dev, n, cudaMemcpyDeviceToHost) != cudaSuccess) return static_cast<long>(n);
    long wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += h[i] != pattern(pe, i, salt);
    return wrong;
}

#endif
