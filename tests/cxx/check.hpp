// The C++ tests' one assertion header (every program under tests/cxx includes it, directly or
// through gpu_test_util.hpp and copy_test_util.hpp), and the one format of a check's line, which the
// ctest regexes ("CHECK rank [-0-9]+ FAIL") and scripts/gpu-results.py read:
//   CHECK rank R PASS|FAIL|SKIPPED: message
// R: upcxx::rank_me(); '-' before upcxx::init() (after upcxx::finalize(): the rank it had).
// copy_test::check's message starts with "<program>.<check>: ".
//   CHECK(cond, fmt, ...)   always evaluated (NDEBUG or not); one line (a pass only while verbose());
//                           a failure is counted
//   REQUIRE(cond, fmt, ...) a precondition or invariant the code after it relies on (an allocation,
//                           UPC++'s assert()s in a port of one of its tests): always evaluated,
//                           silent when it holds (it may sit in a loop or a callback); when not, the
//                           FAIL line (with the condition, file and line), counted, and the process
//                           aborts, as UPCXX_ASSERT_ALWAYS does
//   skipped(fmt, ...)       a check that cannot run here: a SKIPPED line, not a failure
//   expect_error(...)       f() must throw upcxx::extra::nvshmem_error with a status and a message
//   finish(program)         every rank's failures summed, "RESULT <program> PASS|FAIL" on rank 0,
//                           and the exit status (0 or 1)
// UXN_CHECK_NO_UPCXX defined before the include: a program without UPC++ (tests/standin's
// cuda_smoke): rank '-', no expect_error, finish() counts this process alone.
#ifndef UXN_CHECK_HPP
#define UXN_CHECK_HPP

#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
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

/// The rank a line names: upcxx::rank_me() while UPC++ is initialised; after upcxx::finalize() the
/// last one seen; -1 (printed '-') before upcxx::init() or without UPC++.
inline int line_rank() {
    static int last = -1;
#ifndef UXN_CHECK_NO_UPCXX
    if (upcxx::initialized()) last = upcxx::rank_me();
#endif
    return last;
}

/// The one format of a check's line: "CHECK rank R <status>: [<name>: ]<message>\n" into out.
inline void vformat_line(char *out, std::size_t size, const char *status, const char *name, const char *fmt,
                         va_list ap) {
    char msg[1024];
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    char rank[16] = "-";
    const int r = line_rank();
    if (r >= 0) std::snprintf(rank, sizeof rank, "%d", r);
    std::snprintf(out, size, "CHECK rank %s %s: %s%s%s\n", rank, status, name ? name : "", name ? ": " : "", msg);
}
inline void format_line(char *out, std::size_t size, const char *status, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
inline void format_line(char *out, std::size_t size, const char *status, const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vformat_line(out, size, status, name, fmt, ap);
    va_end(ap);
}
/// A check's line, printed (not counted).
inline void vline(const char *status, const char *name, const char *fmt, va_list ap) {
    char line[1400];
    vformat_line(line, sizeof line, status, name, fmt, ap);
    std::fputs(line, stdout);
    std::fflush(stdout);
}

/// One check (named, or with name == nullptr not): its line (a pass only while verbose()), a
/// failure counted. Returns ok.
inline bool vcheck(bool ok, const char *name, const char *fmt, va_list ap) {
    if (!ok) failures()++;
    if (ok && !verbose()) return ok;
    vline(ok ? "PASS" : "FAIL", name, fmt, ap);
    return ok;
}

inline bool check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
inline bool check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vcheck(ok, nullptr, fmt, ap);
    va_end(ap);
    return ok;
}

/// A check that cannot run here: a SKIPPED line, not counted.
inline void skipped(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
inline void skipped(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vline("SKIPPED", nullptr, fmt, ap);
    va_end(ap);
}

/// REQUIRE's failure: the FAIL line, counted, then the process aborts.
[[noreturn]] inline void require_failed(const char *cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
[[noreturn]] inline void require_failed(const char *cond, const char *file, int line, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    check(false, "%s (REQUIRE(%s) at %s:%d; aborting)", msg, cond, file, line);
    std::abort();
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
#define REQUIRE(cond, ...)                                                                                 \
    do {                                                                                                   \
        if (!static_cast<bool>(cond)) ::uxn_check::require_failed(#cond, __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

#endif  // UXN_CHECK_HPP
