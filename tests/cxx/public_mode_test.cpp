// public_mode_test: which copy mode the C++ layer took (include/upcxx_extra/nvshmem/upcxx_internals.hpp),
// checked at compile time and reported at run time (CPU, no GPU, no UPC++ init).
//
// Built three times by tests/cxx/CMakeLists.txt:
//   public_mode_test           as every other test of this configuration: fast_copies() is true on
//                              the UPC++ releases tested (every internal found), false with
//                              UXN_UPCXX_PUBLIC_ONLY=ON (UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1)
//   public_mode_forced_test    with UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1: false
//   public_mode_detected_test  against a patched copy of upcxx_internals.hpp made by the test build,
//                              in which the global pointer's address field counts as missing, with
//                              UXN_EXPECT_DETECTED=1: false, chosen by detection (its warning is
//                              expected in the build log, not an error)
// UXN_EXPECT_FAST (0 or 1) is what the build expects.
#include <cstdio>
#include <type_traits>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"

#ifndef UXN_EXPECT_FAST
#error "build with -DUXN_EXPECT_FAST=0 or 1"
#endif

using upcxx::extra::nvshmem_heap;
namespace internals = upcxx::extra::detail::internals;

// A compile-time constant, noexcept, and what the build expects.
static_assert(std::is_same<decltype(nvshmem_heap::fast_copies()), bool>::value, "fast_copies() is bool");
static_assert(noexcept(nvshmem_heap::fast_copies()), "fast_copies() is noexcept");
constexpr bool fast = nvshmem_heap::fast_copies();
static_assert(fast == (UXN_EXPECT_FAST != 0), "nvshmem_heap::fast_copies() is not what this build expects");
// The mode and the reason agree: 0 (fast), 8 (forced), or the number of the missing internal.
static_assert(fast == (internals::missing == 0), "fast_copies() and the reason disagree");
#if defined(UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY) && (UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY + 0)
static_assert(internals::missing == 8, "the forcing macro is the reason");
#endif
#if (UXN_EXPECT_DETECTED + 0) && !(UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY + 0)
static_assert(internals::missing == 1, "the address field the patched header drops is the reason");
#endif
// heap.copy keeps upcxx::copy's return type in either mode.
using gp = upcxx::global_ptr<int, upcxx::memory_kind::cuda_device>;
static_assert(std::is_same<decltype(std::declval<nvshmem_heap &>().copy(std::declval<gp>(), std::declval<gp>(), 1)),
                           decltype(upcxx::copy(std::declval<gp>(), std::declval<gp>(), 1))>::value,
              "heap.copy returns what upcxx::copy returns");

int main() {
    const bool ok = nvshmem_heap::fast_copies() == (UXN_EXPECT_FAST != 0);
    std::printf("public_mode_test: UPC++ %ld, nvshmem_heap::fast_copies() = %s (mode reason %d: %s)\n",
                static_cast<long>(UPCXX_VERSION), nvshmem_heap::fast_copies() ? "true" : "false", internals::missing,
                internals::missing == 0   ? "every internal found"
                : internals::missing == 8 ? "UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY"
                                          : "an internal is missing");
    std::printf("RESULT public_mode_test %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
