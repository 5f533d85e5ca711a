// Shared by the GPU tests of nvshmem_heap::copy (copy_cover_test.cpp, copy_semantics_test.cpp).
// Standalone (it does not include gpu_test_util.hpp): everything is in namespace copy_test.
//
//   - one RESULT line per check:  "RESULT <program>.<check> PASS|FAIL (rank r): detail", and at
//     the end "RESULT <program> PASS|FAIL" (every rank's failures summed); exit status 1 on any
//     failure, 77 (SKIPPED, with the reason) where the program cannot run (no GPU, one rank);
//   - bounded waits: wait_for() / progress_until() give up after a deadline (a FAIL, never a hang),
//     and a watchdog (alarm) ends a rank that is stuck anyway (UXN_TEST_TIMEOUT seconds, 300 by
//     default) with a FAIL line and exit status 124;
//   - NVSHMEM bootstrapped from UPC++ by a unique id that UPC++ broadcasts (after upcxx::init()
//     and cudaSetDevice: the smp conduit forks the ranks in upcxx::init(), and a CUDA context made
//     before a fork is unusable in the children);
//   - byte patterns written to and counted back from device memory.
#ifndef UXN_COPY_TEST_UTIL_HPP
#define UXN_COPY_TEST_UTIL_HPP

#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <chrono>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "check.hpp"
// Linked with NVSHMEM's device library (build-upcxx-program.sh: nvcc -rdc) and ended with NVSHMEM's own
// nvshmem_finalize(): nvshmem_init() initialises NVSHMEM through that library.
#include "upcxx_extra/nvshmem/device_library.hpp"

namespace copy_test {

// NVSHMEM 3.8 declares a global variable ::nvshmem_error: name the exception type qualified.
using heap_error = upcxx::extra::nvshmem_error;

inline const char *&program() {
    static const char *p = "copy_test";
    return p;
}
using uxn_check::failures;     // one failure count per process, shared with CHECK (check.hpp)
inline bool &quiet_passes() {  // true: only failing checks print (loops of many checks)
    static bool q = false;
    return q;
}

/// One check: a RESULT line (always for a failure), counted.
inline bool vcheck(const char *name, bool ok, const char *fmt, va_list ap) {
    if (!ok) failures()++;
    if (ok && quiet_passes()) return ok;
    char buf[1024];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    std::printf("RESULT %s.%s %s (rank %d): %s\n", program(), name, ok ? "PASS" : "FAIL",
                upcxx::initialized() ? upcxx::rank_me() : -1, buf);
    std::fflush(stdout);
    return ok;
}
inline bool check(const char *name, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
inline bool check(const char *name, bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vcheck(name, ok, fmt, ap);
    va_end(ap);
    return ok;
}
/// A check group that cannot run here: printed, not counted as a failure.
inline void skip(const char *name, const char *why) {
    std::printf("RESULT %s.%s SKIPPED (rank %d): %s\n", program(), name, upcxx::rank_me(), why);
    std::fflush(stdout);
}

inline double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class F>
inline bool ready(const F &f) {
#if UPCXX_VERSION >= 20230305L
    return f.is_ready();
#else
    return f.ready();
#endif
}

/// UPC++ progress until pred() or `seconds` passed; false on the deadline.
template <class P>
inline bool progress_until(P pred, double seconds = 60) {
    const double end = now() + seconds;
    while (!pred()) {
        if (now() > end) return false;
        upcxx::progress();
    }
    return true;
}
/// f.wait() with a deadline: false (the future is still not ready) instead of a hang.
template <class Fut>
inline bool wait_for(const Fut &f, double seconds = 60) {
    return progress_until([&] { return ready(f); }, seconds);
}

/// Ends this rank with a FAIL line and exit status 124 after `seconds` (0: UXN_TEST_TIMEOUT or
/// 300): a hang anywhere (a collective, a wait without a deadline in UPC++ or NVSHMEM) is then a
/// failure with a message, not a job killed from outside.
inline void start_watchdog(unsigned seconds = 0) {
    if (!seconds) {
        const char *e = std::getenv("UXN_TEST_TIMEOUT");
        seconds = e ? static_cast<unsigned>(std::strtoul(e, nullptr, 10)) : 300;
    }
    static char msg[256];
    std::snprintf(msg, sizeof msg, "RESULT %s FAIL (rank %d): watchdog: still running after %u s (a hang)\n", program(),
                  upcxx::initialized() ? upcxx::rank_me() : -1, seconds);
    std::signal(SIGALRM, [](int) {
        ssize_t r = write(1, msg, std::strlen(msg));
        (void)r;
        _exit(124);
    });
    alarm(seconds);
}

/// After upcxx::init(): the CUDA device of this rank (local rank modulo the GPUs visible; ranks may
/// share a GPU), set current. Without a GPU: says SKIPPED, finalizes UPC++ and exits 77.
inline int select_gpu_or_skip() {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev < 1) {
        if (upcxx::rank_me() == 0)
            std::printf("SKIPPED: %s needs a GPU (cudaGetDeviceCount: %s, %d visible)\nRESULT %s SKIPPED\n", program(),
                        e != cudaSuccess ? cudaGetErrorString(e) : "ok", ndev, program());
        std::fflush(stdout);
        upcxx::finalize();
        std::exit(77);
    }
    const int dev = upcxx::local_team().rank_me() % ndev;
    cudaSetDevice(dev);
    return dev;
}
inline int visible_gpus() {
    int ndev = 0;
    return cudaGetDeviceCount(&ndev) == cudaSuccess ? ndev : 0;
}

/// NVSHMEM on upcxx::world(), by a unique id that UPC++ broadcasts. PE == world rank.
inline void nvshmem_init_from_upcxx() { upcxx::extra::nvshmem_init(); }

/// The sum of every rank's failures, a final RESULT line on rank 0, and the exit status (0 or 1).
/// Collective; UPC++ must still be initialised.
inline int finish() {
    const int total = upcxx::reduce_all(failures(), upcxx::op_fast_add).wait();
    if (upcxx::rank_me() == 0)
        std::printf("RESULT %s %s: %d failed checks (UPC++ %ld, %s, %s)\n", program(), total ? "FAIL" : "PASS", total,
                    static_cast<long>(UPCXX_VERSION),
#if UPCXX_THREADMODE
                    "par",
#else
                    "seq",
#endif
#if UPCXX_CODEMODE  // defined (non-zero) for opt, undefined for debug
                    "opt"
#else
                    "debug"
#endif
        );
    std::fflush(stdout);
    return total ? 1 : 0;
}

// ---- byte patterns ------------------------------------------------------------------------------

inline unsigned char pattern(int who, std::size_t i, int salt) {
    return static_cast<unsigned char>((who * 37 + salt * 11 + i * 7 + (i >> 9)) & 0xff);
}
inline std::vector<unsigned char> host_pattern(std::size_t n, int who, int salt) {
    std::vector<unsigned char> h(n);
    for (std::size_t i = 0; i < n; i++) h[i] = pattern(who, i, salt);
    return h;
}
/// Device (or host) memory of this process := pattern(who, salt).
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

}  // namespace copy_test

#endif
