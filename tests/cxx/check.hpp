// The C++ tests' one assertion header (every program under tests/cxx includes it):
//   CHECK(cond, fmt, ...)   one line "CHECK rank R PASS|FAIL: ..." (rank '-' before upcxx::init()),
//                           what the ctest regexes read; a failure is counted
//   expect_error(...)       f() must throw upcxx::extra::nvshmem_error with a status and a message
//   finish(program)         every rank's failures summed, "RESULT <program> PASS|FAIL" on rank 0,
//                           and the exit status (0 or 1)
// copy_test_util.hpp prints its named RESULT lines through the same counter.
// UXN_CHECK_NO_UPCXX defined before the include: a program without UPC++ (tests/standin's
// cuda_smoke): rank '-', no expect_error, finish() counts this process alone.
#ifndef UXN_CHECK_HPP
#define UXN_CHECK_HPP

#include <cstdarg>
#include <cstdio>
#include <cstring>

#ifndef UXN_CHECK_NO_UPCXX
#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem/error.hpp"
#endif

namespace uxn_check {

inline int &failures() {
    static int f = 0;
    return f;
}
inline bool &verbose() {  // false: only failing checks print (loops of many checks)
    static bool v = true;
    return v;
}

inline bool check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
inline bool check(bool ok, const char *fmt, ...) {
    if (!ok) failures()++;
    if (ok && !verbose()) return ok;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
#ifndef UXN_CHECK_NO_UPCXX
    if (upcxx::initialized())
        std::printf("CHECK rank %d %s: %s\n", upcxx::rank_me(), ok ? "PASS" : "FAIL", msg);
    else
#endif
        std::printf("CHECK rank - %s: %s\n", ok ? "PASS" : "FAIL", msg);
    std::fflush(stdout);
    return ok;
}

#ifndef UXN_CHECK_NO_UPCXX
/// f() must throw nvshmem_error with status `want` and a message containing `needle`.
template <class F>
void expect_error(upcxx_extra_nvshmem_status_t want, const char *needle, const char *what, F f) {
    try {
        f();
        check(false, "%s: no exception", what);
    } catch (const upcxx::extra::nvshmem_error &e) {
        check(e.status() == want && std::strstr(e.what(), needle), "%s -> status %d: %s", what,
              static_cast<int>(e.status()), e.what());
    }
}

/// Collective: the sum of every rank's failures; rank 0 prints the RESULT line. Returns the exit
/// status.
inline int finish(const char *program, const char *detail = "") {
    const int total = upcxx::reduce_all(failures(), upcxx::op_fast_add).wait();
    if (upcxx::rank_me() == 0)
        std::printf("RESULT %s %s: %d failures on %d ranks%s%s\n", program, total ? "FAIL" : "PASS", total,
                    upcxx::rank_n(), *detail ? " " : "", detail);
    std::fflush(stdout);
    return total ? 1 : 0;
}
#else
/// This process's failures; prints the RESULT line. Returns the exit status.
inline int finish(const char *program, const char *detail = "") {
    const int total = failures();
    std::printf("RESULT %s %s: %d failures%s%s\n", program, total ? "FAIL" : "PASS", total, *detail ? " " : "", detail);
    std::fflush(stdout);
    return total ? 1 : 0;
}
#endif

}  // namespace uxn_check

#define CHECK(cond, ...) ::uxn_check::check(static_cast<bool>(cond), __VA_ARGS__)

#endif  // UXN_CHECK_HPP
