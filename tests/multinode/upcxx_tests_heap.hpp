// What the wrappers of UPC++'s own device tests share (upcxx_copy_heap.cpp,
// upcxx_memory_kinds_heap.cpp). Each wrapper includes one of UPC++ 2023.9.0's test sources
// UNMODIFIED (from ../shared/upcxx/tests-2023.9.0, CMake's UXN_MN_UPCXX_TESTS) after this header
// and a few macros that rename what the test calls:
//   #define main <name>   the test's main() becomes a function the wrapper's main() calls with
//                         UPC++ initialised, NVSHMEM initialised over it, and an nvshmem_heap
//                         active (upcxx::init() nests: the test's own init() and finalize() count)
//   other macros          as each wrapper says
// Every header the test sources include is included here first, so that the macros touch the
// test's own code only (the headers' include guards keep them from being read again).
#ifndef UXN_UPCXX_TESTS_HEAP_HPP
#define UXN_UPCXX_TESTS_HEAP_HPP

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "copy_test_util.hpp"

namespace uxn_wrap {

inline upcxx::extra::nvshmem_heap *&heap() {
    static upcxx::extra::nvshmem_heap *h = nullptr;
    return h;
}
inline long &wrong_paths() {
    static long w = 0;
    return w;
}
inline long &fast_expected() {
    static long f = 0;
    return f;
}
inline long &fallback_expected() {
    static long f = 0;
    return f;
}

/// UPC++ initialised (nested in the test's own init), NVSHMEM over it, the heap; the watchdog.
inline void start(const char *program) {
    copy_test::program() = program;
    upcxx::init();
    copy_test::start_watchdog();
    upcxx::extra::nvshmem_init();
    heap() = new upcxx::extra::nvshmem_heap();
}

/// Collective: the heap's paths as counted against what each copy expected, one RESULT line,
/// the heap destroyed, NVSHMEM finalised. UPC++ stays initialised. Returns the exit status.
inline int stop() {
    const upcxx::extra::nvshmem_heap::copy_counts c = heap()->copies();
    copy_test::check("paths",
                     wrong_paths() == 0 && long(c.fast) == fast_expected() && long(c.fallback) == fallback_expected(),
                     "heap.copy: %ld fast (want %ld: both ends on this node), %ld upcxx::copy (want %ld: an end on the "
                     "other node), %ld copies took another path",
                     long(c.fast), fast_expected(), long(c.fallback), fallback_expected(), wrong_paths());
    heap()->destroy();
    delete heap();
    heap() = nullptr;
    upcxx::extra::nvshmem_finalize();
    return copy_test::finish();
}

}  // namespace uxn_wrap

#endif
