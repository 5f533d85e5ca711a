// GPU tests of upcxx_extra/nvshmem.hpp (a GPU per rank, NVSHMEM bootstrapped from UPC++):
//   1. round trips for every PE; bad PE, outside the heap, null;
//   2. growth: 3 GiB nvshmem_malloc'd after construction; to_global_ptr past the extent names
//      update(); after update() the last byte of the peer's object translates; upcxx::copy both
//      ways over a window that straddles the extent covered before and after; global pointers
//      made before growth still copy and round-trip; nvshmem_getmem/putmem on the same bytes;
//      without CUDA VMM the heap does not grow and update() says so;
//   3. lifetime: move construction, move assignment, std::optional, destroy() twice, a heap that
//      goes out of scope without destroy() (a warning, no abort), and construction after it;
//   4. BENCH lines (not asserted): construction time, to_global_ptr/from_global_ptr against UPC++'s
//      own device_allocator::to_global_ptr in the same run.
// Exits 77 (skipped) without a GPU. Run by scripts/gpu-tests.sh:  upcxx-run -n 2 ./nvshmem_hpp_test
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "gpu_test_util.hpp"

using gpu_test::count_wrong;
using gpu_test::expect_error;
using gpu_test::fill;
using gpu_test::heap_error;
using gpu_test::nvshmem_init_from_upcxx;
using upcxx::extra::nvshmem_heap;

template <class T>
static inline void escape(T const &v) {
    asm volatile("" : : "g"(&v) : "memory");
}
static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static double max_all(double v) { return upcxx::reduce_all(v, upcxx::op_fast_max).wait(); }

// Median ns per call of f() over reps x iters calls.
template <class F>
static double time_ns(F f, long iters = 2000000, int reps = 5) {
    std::vector<double> r;
    for (int k = 0; k < reps; k++) {
        double t0 = now();
        for (long i = 0; i < iters; i++) f(i);
        r.push_back((now() - t0) * 1e9 / iters);
    }
    std::sort(r.begin(), r.end());
    return r[r.size() / 2];
}

int main() {
    // CUDA only after upcxx::init(): the smp conduit forks the ranks there, and a CUDA context
    // made before a fork is unusable in the children ("initialization error").
    upcxx::init();
    const int me = upcxx::rank_me(), n = upcxx::rank_n();
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        if (me == 0) std::printf("SKIPPED: nvshmem_hpp_test needs a GPU (none visible)\n");
        upcxx::finalize();
        return 77;
    }
    cudaSetDevice(me % ndev);
    const bool vmm = !std::getenv("NVSHMEM_DISABLE_CUDA_VMM");

    nvshmem_init_from_upcxx();
    const int pe = nvshmem_my_pe(), npes = nvshmem_n_pes();
    const int next = (pe + 1) % npes, prev = (pe - 1 + npes) % npes;

    double *x = static_cast<double *>(nvshmem_malloc(1024 * sizeof(double)));
    unsigned char *small = static_cast<unsigned char *>(nvshmem_malloc(size_t(2) << 20));

    // BENCH baseline: UPC++'s own device allocator on this GPU, timed in the same conditions as
    // ours (NVSHMEM initialised, its threads running), just before ours exists (UPC++ 2020.10
    // allows one cuda_device per GPU per process, so it is made and destroyed first).
    double own_ns = 0;
    {
#if UPCXX_VERSION >= 20220300L
        auto own = upcxx::make_gpu_allocator<upcxx::cuda_device>(size_t(64) << 20, me % ndev);
        char *p = own.local(own.allocate<char>(size_t(1) << 20));
        own_ns = time_ns([&](long i) { escape(own.to_global_ptr(p + (i & 1023))); });
        own.destroy();
#else
        upcxx::cuda_device dev(me % ndev);
        {
            upcxx::device_allocator<upcxx::cuda_device> own(dev, size_t(64) << 20);
            char *p = own.local(own.allocate<char>(size_t(1) << 20));
            own_ns = time_ns([&](long i) { escape(own.to_global_ptr(p + (i & 1023))); });
        }
        dev.destroy();
#endif
    }

    upcxx::barrier();
    double t0 = now();
    std::optional<nvshmem_heap> heap_opt;
    heap_opt.emplace();
    double build_s = max_all(now() - t0);
    nvshmem_heap heap(std::move(*heap_opt));  // move construction out of an optional
    CHECK(!heap_opt->is_active() && heap.is_active(), "move construction: the source is inactive, the target active");
    heap_opt.reset();  // destroying a moved-from heap: nothing to do, no warning
    CHECK(heap.my_pe() == pe && heap.n_pes() == npes && heap.extent() > 0 && heap.segments() == 1,
          "heap: PE %d of %d, extent %zu, %zu segment(s)", heap.my_pe(), heap.n_pes(), heap.extent(), heap.segments());

    // 1. Round trips and bad input.
    for (int p = 0; p < npes; p++) {
        for (int i : {0, 1, 1023}) {
            auto gp = heap.to_global_ptr(x + i, p);
            auto back = heap.from_global_ptr(gp);
            CHECK(back.first == x + i && back.second == p && gp.where() == p, "round trip x+%d on PE %d (rank %d)", i,
                  p, gp.where());
        }
    }
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE, "PE", "to_global_ptr(x, n_pes)",
                 [&] { heap.to_global_ptr(x, npes); });
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE, "PE -1", "to_global_ptr(x, -1)",
                 [&] { heap.to_global_ptr(x, -1); });
    double local = 0;
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP, "outside the symmetric heap", "to_global_ptr(stack address)",
                 [&] { heap.to_global_ptr(&local, 0); });
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, "NULL", "to_global_ptr(nullptr)",
                 [&] { heap.to_global_ptr(static_cast<double *>(nullptr), 0); });
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, "null", "from_global_ptr(null)",
                 [&] { heap.from_global_ptr(upcxx::global_ptr<double, upcxx::memory_kind::cuda_device>(nullptr)); });

    // BENCH: our translations against UPC++'s own, same process, same loop.
    {
        double to_ns = time_ns([&](long i) { escape(heap.to_global_ptr(x + (i & 1023), next)); });
        auto g = heap.to_global_ptr(x, next);
        double from_ns = time_ns([&](long i) { escape(heap.from_global_ptr(g + (i & 1023))); });
        std::printf(
            "BENCH rank %d construction %.3f ms (%d ranks) | device_allocator::to_global_ptr %.2f ns | "
            "nvshmem_heap::to_global_ptr %.2f ns (%.2fx) | from_global_ptr %.2f ns (%.2fx) [medians of 5 x 2000000]\n",
            me, build_s * 1e3, n, own_ns, to_ns, to_ns / own_ns, from_ns, from_ns / own_ns);
    }

    // 2. Growth.
    auto old_gp = heap.to_global_ptr(small, next);  // made before growth
    const size_t e0 = heap.extent();
    const size_t big_n = size_t(3) << 30;
    unsigned char *big = static_cast<unsigned char *>(nvshmem_malloc(big_n));
    const size_t big_off = big ? static_cast<size_t>(big - static_cast<unsigned char *>(heap.base())) : 0;
    if (!big) {
        CHECK(!vmm, "nvshmem_malloc(3 GiB) returned NULL with CUDA VMM on");
        std::printf("NOTE rank %d: nvshmem_malloc(3 GiB) = NULL (static heap without VMM): growth not exercised\n", me);
    } else {
        const bool grew_past = big_off + big_n > e0;
        if (grew_past)
            expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP, "update()", "to_global_ptr(last byte) before update()",
                         [&] { heap.to_global_ptr(big + big_n - 1, next); });
        t0 = now();
        const size_t e1 = heap.update();
        double update_s = max_all(now() - t0);
        std::printf(
            "NOTE rank %d: VMM %s, extent %zu -> %zu bytes after a 3 GiB nvshmem_malloc at heap offset %zu; "
            "update() %.3f ms; %zu UPC++ segment(s)\n",
            me, vmm ? "on" : "off", e0, e1, big_off, update_s * 1e3, heap.segments());
        CHECK(heap.segments() == 1, "update() made no new UPC++ segment (reference memory kinds): %zu",
              heap.segments());
        if (vmm)
            CHECK(e1 > e0 && e1 >= big_off + big_n, "VMM on: update() covers the new memory (%zu -> %zu)", e0, e1);
        else
            CHECK(e1 == e0, "VMM off: the heap does not grow; update() leaves the extent at %zu (now %zu)", e0, e1);
        auto last = heap.to_global_ptr(big + big_n - 1, next);
        auto back = heap.from_global_ptr(last);
        CHECK(back.first == big + big_n - 1 && back.second == next && last.where() == next,
              "to_global_ptr(last byte of the 3 GiB object, next PE) round-trips");

        // A window of 2 MiB across the extent covered before update() (or at the object's start).
        const size_t win = size_t(2) << 20;
        size_t w_off = (e0 > big_off + win / 2 && e0 + win / 2 <= big_off + big_n) ? e0 - win / 2 - big_off : 0;
        unsigned char *w = big + w_off;
        std::printf("NOTE rank %d: window at heap offset %zu..%zu %s the extent covered before (%zu)\n", me,
                    big_off + w_off, big_off + w_off + win,
                    big_off + w_off < e0 && big_off + w_off + win > e0 ? "straddles" : "does not straddle", e0);
        fill(w, win, pe, 1);
        cudaDeviceSynchronize();
        nvshmem_barrier_all();
        upcxx::barrier();
        // get: the next PE's window into my `small`, one upcxx::copy
        upcxx::copy(heap.to_global_ptr(w, next), heap.to_global_ptr(small), win).wait();
        CHECK(count_wrong(small, win, next, 1) == 0,
              "upcxx::copy get of the next PE's straddling window: 0 wrong bytes");
        // put: my `small` (salt 2) into the next PE's window, one upcxx::copy; NVSHMEM reads it back
        fill(small, win, pe, 2);
        cudaDeviceSynchronize();
        upcxx::copy(heap.to_global_ptr(small), heap.to_global_ptr(w, next), win).wait();
        upcxx::barrier();
        CHECK(count_wrong(w, win, prev, 2) == 0,
              "upcxx::copy put into my straddling window by the previous PE: 0 wrong bytes");
        nvshmem_getmem(small, w, win, next);
        nvshmem_quiet();
        CHECK(count_wrong(small, win, pe, 2) == 0, "nvshmem_getmem of the next PE's window sees what UPC++ put there");
        // nvshmem_putmem into the next PE's window, UPC++ reads it back
        fill(small, win, pe, 3);
        cudaDeviceSynchronize();
        nvshmem_putmem(w, small, win, next);
        nvshmem_quiet();
        nvshmem_barrier_all();
        cudaMemset(small, 0, win);
        cudaDeviceSynchronize();
        upcxx::copy(heap.to_global_ptr(w, next), heap.to_global_ptr(small), win).wait();
        CHECK(count_wrong(small, win, pe, 3) == 0,
              "upcxx::copy reads back what nvshmem_putmem wrote to the next PE: 0 wrong");
        upcxx::barrier();
        // The global pointer made before growth: still copies, still round-trips.
        auto ob = heap.from_global_ptr(old_gp);
        CHECK(ob.first == small && ob.second == next, "a global pointer made before update() still round-trips");
        fill(w, 4096, pe, 4);
        cudaDeviceSynchronize();
        upcxx::barrier();
        upcxx::copy(heap.to_global_ptr(w, next), old_gp, 4096).wait();  // next's window -> next's small
        upcxx::barrier();
        CHECK(count_wrong(small, 4096, pe, 4) == 0,
              "a copy through a global pointer made before update() (by the previous PE, from my window): 0 wrong");
        upcxx::barrier();
    }

    // 3. Lifetime.
    nvshmem_heap moved_from(std::move(heap));
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, "moved from", "to_global_ptr on a moved-from heap",
                 [&] { heap.to_global_ptr(x, next); });
    heap = std::move(moved_from);  // move assignment onto an inactive heap
    CHECK(heap.is_active() && !moved_from.is_active() && heap.to_global_ptr(x, next).where() == next,
          "move assignment: the target works, the source is inactive");
    heap.destroy();
    heap.destroy();  // harmless
    CHECK(!heap.is_active(), "destroy() twice: harmless");
    {
        nvshmem_heap forgotten;  // goes out of scope without destroy(): a warning, never an abort
        CHECK(forgotten.to_global_ptr(x, next).where() == next, "a second heap after destroy() works");
    }
    bool again_ok = false;
    std::string again_msg = "ok";
    try {
        nvshmem_heap again;
        again.destroy();
        again_ok = true;
    } catch (const heap_error &e) {
        again_msg = e.what();
    }
#if UPCXX_VERSION >= 20220300L
    CHECK(again_ok, "a heap after a forgotten one (UPC++ >= 2022.3: several allocators per GPU): %s",
          again_msg.c_str());
#else
    CHECK(!again_ok && again_msg.find("one per GPU") != std::string::npos,
          "a heap after a forgotten one (UPC++ 2020.10: its cuda_device is still held) is refused on every rank: %s",
          again_msg.c_str());
#endif

    nvshmem_free(big);
    nvshmem_free(small);
    nvshmem_free(x);
    nvshmem_finalize();
    int total = upcxx::reduce_all(uxn_check::failures(), upcxx::op_fast_add).wait();
    if (me == 0)
        std::printf("RESULT nvshmem_hpp_test %s: %d failures (UPC++ %ld, VMM %s)\n", total ? "FAIL" : "PASS", total,
                    (long)UPCXX_VERSION, vmm ? "on" : "off");
    upcxx::finalize();
    return total ? 1 : 0;
}
