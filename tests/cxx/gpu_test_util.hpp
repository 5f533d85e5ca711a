// Shared by the GPU tests of the C++ layer (nvshmem_hpp_test.cpp, nvshmem_copy_test.cpp):
// CHECK lines, the expected-exception check, and NVSHMEM bootstrapped from UPC++.
#ifndef UXN_GPU_TEST_UTIL_HPP
#define UXN_GPU_TEST_UTIL_HPP

#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdio>
#include <cstring>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"

// NVSHMEM 3.8 declares a global variable ::nvshmem_error: name the exception type qualified.
using heap_error = upcxx::extra::nvshmem_error;

static int failures = 0;
static bool verbose = true;  // false: only failing checks print
#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        bool ok_ = (cond);                                                               \
        if (!ok_ || verbose) {                                                           \
            std::printf("CHECK rank %d %s: ", upcxx::rank_me(), ok_ ? "PASS" : "FAIL");  \
            std::printf(__VA_ARGS__);                                                    \
            std::printf("\n");                                                           \
            std::fflush(stdout);                                                         \
        }                                                                                \
        if (!ok_) failures++;                                                            \
    } while (0)

// f() must throw nvshmem_error with status `want` and a message containing `needle`.
template <class F>
static void expect_error(upcxx_extra_nvshmem_status_t want, const char *needle, const char *what, F f) {
    try {
        f();
        CHECK(false, "%s: no exception", what);
    } catch (const heap_error &e) {
        CHECK(e.status() == want && std::strstr(e.what(), needle), "%s -> status %d: %s", what, (int)e.status(), e.what());
    }
}

// NVSHMEM on upcxx::world(), bootstrapped by a unique id that UPC++ broadcasts (after
// upcxx::init() and cudaSetDevice: the smp conduit forks the ranks in upcxx::init()).
static void nvshmem_init_from_upcxx() {
    nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
    if (upcxx::rank_me() == 0) nvshmemx_get_uniqueid(&id);
    id = upcxx::broadcast(id, 0).wait();
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    nvshmemx_set_attr_uniqueid_args(upcxx::rank_me(), upcxx::rank_n(), &id, &attr);
    nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
}

#endif
