// The benchmarks' shared helpers: a clock, "-w 1,10,100"-style lists, min/max of repetitions.
#ifndef UXN_BENCH_UTIL_HPP
#define UXN_BENCH_UTIL_HPP

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <vector>

namespace bench {

inline double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// "1,10,100" -> {1, 10, 100}; stops at the first element that is not a number.
inline std::vector<std::size_t> parse_list(const char *s) {
    std::vector<std::size_t> v;
    for (const char *p = s; *p;) {
        char *end = nullptr;
        const unsigned long long x = std::strtoull(p, &end, 10);
        if (end == p) break;
        v.push_back(static_cast<std::size_t>(x));
        p = *end == ',' ? end + 1 : end;
    }
    return v;
}

/// The fastest and slowest of a cell's repetitions.
struct stats {
    double lo = 1e30, hi = 0;
    void add(double t) {
        lo = std::min(lo, t);
        hi = std::max(hi, t);
    }
};

}  // namespace bench

#endif
