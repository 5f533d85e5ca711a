// The GPU tests' shared helpers, each written once (namespace gpu_test): nvshmem_hpp_test.cpp and
// nvshmem_copy_test.cpp include this header; heap.copy's tests (copy_test_util.hpp, which includes
// it and names these helpers in namespace copy_test too) and tests/multinode through that one.
//   - check.hpp: CHECK, REQUIRE, expect_error, finish, the one format of a check's line;
//   - NVSHMEM's device library linked (CMake: upcxx_extra_nvshmem_add_device_code, nvcc -rdc):
//     nvshmem_init() initialises NVSHMEM through it, and the programs end with NVSHMEM's own
//     nvshmem_finalize(), which matches it;
//   - heap_error: upcxx::extra::nvshmem_error (NVSHMEM 3.8 declares a global variable
//     ::nvshmem_error: name the exception type qualified);
//   - nvshmem_init_from_upcxx(): NVSHMEM on upcxx::world() (after upcxx::init() and cudaSetDevice:
//     the smp conduit forks the ranks in upcxx::init(), and a CUDA context made before a fork is
//     unusable in the children), on the device the caller made current;
//   - byte patterns per (PE or rank, salt), written to and counted back from device memory.
#ifndef UXN_GPU_TEST_UTIL_HPP
#define UXN_GPU_TEST_UTIL_HPP

#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstddef>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "check.hpp"
#include "upcxx_extra/nvshmem/device_library.hpp"

namespace gpu_test {

using uxn_check::expect_error;
using heap_error = upcxx::extra::nvshmem_error;

/// NVSHMEM on upcxx::world(), by a unique id that UPC++ broadcasts. PE == world rank.
inline void nvshmem_init_from_upcxx() { upcxx::extra::nvshmem_init(); }

inline unsigned char pattern(int who, std::size_t i, int salt) {
    return static_cast<unsigned char>((who * 37 + salt * 11 + i * 7 + (i >> 9)) & 0xff);
}
inline std::vector<unsigned char> host_pattern(std::size_t n, int who, int salt) {
    std::vector<unsigned char> h(n);
    for (std::size_t i = 0; i < n; i++) h[i] = pattern(who, i, salt);
    return h;
}
/// Device (or host) memory of this process := pattern(who, salt), landed when this returns.
inline bool fill(void *dev, std::size_t n, int who, int salt) {
    std::vector<unsigned char> h = host_pattern(n, who, salt);
    return cudaMemcpy(dev, h.data(), n, cudaMemcpyDefault) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
}
/// Bytes of [p, p+n) (device or host memory of this process) that differ from pattern(who, salt);
/// n when they cannot be read.
inline long count_wrong(const void *p, std::size_t n, int who, int salt) {
    std::vector<unsigned char> h(n);
    if (cudaMemcpy(h.data(), p, n, cudaMemcpyDefault) != cudaSuccess) return static_cast<long>(n);
    long wrong = 0;
    for (std::size_t i = 0; i < n; i++) wrong += h[i] != pattern(who, i, salt);
    return wrong;
}
/// Bytes of [p, p+n) that differ from `value`.
inline long count_not(const void *p, std::size_t n, unsigned char value) {
    std::vector<unsigned char> h(n);
    if (cudaMemcpy(h.data(), p, n, cudaMemcpyDefault) != cudaSuccess) return static_cast<long>(n);
    long wrong = 0;
    for (std::size_t i = 0; i < n; i++) wrong += h[i] != value;
    return wrong;
}

}  // namespace gpu_test

#endif
