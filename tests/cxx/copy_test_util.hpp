// Shared by the GPU tests of nvshmem_heap::copy (copy_cover_test.cpp, copy_semantics_test.cpp,
// copy_finalize_test.cpp; tests/multinode). Over gpu_test_util.hpp (check.hpp, NVSHMEM, byte
// patterns), whose helpers it names in namespace copy_test too; everything here is in copy_test.
//
//   - one line per check, check.hpp's: "CHECK rank R PASS|FAIL: <program>.<check>: detail"
//     (copy_test::check; a failure counted with CHECK's), "CHECK rank R SKIPPED: ..." for a check
//     group that cannot run here, and at the end "RESULT <program> PASS|FAIL" (every rank's
//     failures summed, check.hpp's finish); exit status 1 on any failure, 77 (SKIPPED, with the
//     reason) where the program cannot run (no GPU, one rank);
//   - bounded waits: wait_for() / progress_until() give up after a deadline (a FAIL, never a hang),
//     and a watchdog (alarm) ends a rank that is stuck anyway (UXN_TEST_TIMEOUT seconds, 300 by
//     default) with a FAIL line and exit status 124;
//   - NVSHMEM bootstrapped from UPC++ (gpu_test_util.hpp: after upcxx::init() and cudaSetDevice);
//   - byte patterns written to and counted back from device memory (gpu_test_util.hpp).
#ifndef UXN_COPY_TEST_UTIL_HPP
#define UXN_COPY_TEST_UTIL_HPP

#include <chrono>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

#include "gpu_test_util.hpp"

namespace copy_test {

// gpu_test_util.hpp's helpers, named here too (copy_test::fill, ...).
using gpu_test::count_not;
using gpu_test::count_wrong;
using gpu_test::fill;
using gpu_test::heap_error;
using gpu_test::host_pattern;
using gpu_test::nvshmem_init_from_upcxx;
using gpu_test::pattern;
using uxn_check::failures;  // one failure count per process, shared with CHECK (check.hpp)

inline const char *&program() {
    static const char *p = "copy_test";
    return p;
}

/// One named check: check.hpp's line, "<program>.<name>: " before the detail; a failure counted.
inline bool check(const char *name, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
inline bool check(const char *name, bool ok, const char *fmt, ...) {
    char full[256];
    std::snprintf(full, sizeof full, "%s.%s", program(), name);
    va_list ap;
    va_start(ap, fmt);
    uxn_check::vcheck(ok, full, fmt, ap);
    va_end(ap);
    return ok;
}
/// A check group that cannot run here: printed (SKIPPED), not counted as a failure.
inline void skip(const char *name, const char *why) { uxn_check::skipped("%s.%s: %s", program(), name, why); }

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
    static char msg[512];
    uxn_check::format_line(msg, sizeof msg, "FAIL", nullptr, "%s.watchdog: still running after %u s (a hang)",
                           program(), seconds);
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

/// check.hpp's finish(): the sum of every rank's failures, a final RESULT line on rank 0 (with the
/// UPC++ release, threadmode and codemode), and the exit status (0 or 1). Collective; UPC++ must
/// still be initialised.
inline int finish() {
    char detail[96];
    std::snprintf(detail, sizeof detail, "(UPC++ %ld, %s, %s)", static_cast<long>(UPCXX_VERSION),
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
    return uxn_check::finish(program(), detail);
}

}  // namespace copy_test

#endif
