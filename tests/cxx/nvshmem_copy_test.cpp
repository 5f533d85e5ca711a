// GPU tests and benchmark of nvshmem_heap::copy (2 ranks, a GPU each, NVSHMEM bootstrapped from
// UPC++). Each part runs twice: with the fast path (CUDA async copy through NVSHMEM's P2P
// mapping) and with the fallback forced (UPCXX_EXTRA_NVSHMEM_COPY=upcxx, set between the two
// heaps), and checks which path served. In the public-API build (nvshmem_heap::fast_copies() false)
// there is no fast path: both runs check that upcxx::copy served every copy, and the benchmark
// times heap.copy, which is upcxx::copy there, only up to the size upcxx::copy is timed to.
//   1. 0 wrong bytes over sizes, source/destination offsets and misalignments, put (mine ->
//      next PE's) and get (next PE's -> mine), with global pointers to T and to const T (a raw
//      T* into the heap is an error now: heap.copy reads raw pointers as private host memory, as
//      upcxx::copy does; copy_semantics_test checks that);
//   2. ordering with NVSHMEM: nvshmem_putmem + quiet + barrier, then heap.copy reads it; heap.copy
//      + wait + barrier, then nvshmem_getmem reads it;
//   3. 32 copies in flight, completed through when_all; then() on a copy's future;
//   4. bad input: null, 0 elements (a ready future), an element count that overflows, a range
//      that runs past the extent, a pointer outside the heap (falls back to upcxx::copy);
//   5. COPYBENCH lines (not asserted): 8 B to 1 GiB, heap.copy put and get, upcxx::copy on the
//      same objects, nvshmem_putmem + nvshmem_quiet, all in this run (scripts/plot-copy-bench.py).
// Exits 77 (skipped) without a GPU per rank (1 rank: copies to itself, the machinery only).  upcxx-run -n 2
// ./nvshmem_copy_test [max_bytes]
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "gpu_test_util.hpp"

using gpu_test::count_wrong;
using gpu_test::expect_error;
using gpu_test::fill;
using gpu_test::nvshmem_init_from_upcxx;
using upcxx::extra::nvshmem_heap;
using dptr = upcxx::global_ptr<unsigned char, upcxx::memory_kind::cuda_device>;

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct bufs {
    unsigned char *a, *b;  // symmetric, `cap` bytes each
    size_t cap;
};

static void correctness(nvshmem_heap &heap, const bufs &m, bool fast) {
    const int pe = heap.my_pe(), npes = heap.n_pes(), next = (pe + 1) % npes, prev = (pe - 1 + npes) % npes;
    // `fast`: the run without the forced fallback; the fast path serves it where the build has one.
    const bool fast_path = fast && nvshmem_heap::fast_copies();
    const char *path = nvshmem_heap::fast_copies() ? (fast ? "fast" : "fallback")
                                                   : (fast ? "public-API" : "public-API, fallback forced");
    const auto c0 = heap.copies();
    int salt = 10;
    uxn_check::verbose() = false;
    long cases = 0;
    for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(4096), size_t(1 << 20) + 3, size_t(64) << 20}) {
        for (size_t so : {size_t(0), size_t(1), size_t(3)}) {
            for (size_t dof : {size_t(0), size_t(5)}) {
                salt++;
                cases++;
                // put: my a+so -> next's b+dof (global pointers to T, and to const T)
                fill(m.a + so, n, pe, salt);
                cudaMemset(m.b, 0, n + dof);
                cudaDeviceSynchronize();
                upcxx::barrier();
                if (salt % 2)
                    heap.copy(heap.to_global_ptr(m.a + so), heap.to_global_ptr(m.b + dof, next), n).wait();
                else
                    heap.copy(heap.to_global_ptr(static_cast<const unsigned char *>(m.a + so)),
                              heap.to_global_ptr(m.b + dof, next), n)
                        .wait();
                upcxx::barrier();
                CHECK(count_wrong(m.b + dof, n, prev, salt) == 0, "%s put %zu bytes, src +%zu, dst +%zu", path, n, so,
                      dof);
                // get: next's a+so -> my b+dof
                cudaMemset(m.b, 0, n + dof);
                cudaDeviceSynchronize();
                upcxx::barrier();
                if (salt % 2)
                    heap.copy(heap.to_global_ptr(m.a + so, next), heap.to_global_ptr(m.b + dof), n).wait();
                else
                    heap.copy(heap.to_global_ptr(static_cast<const unsigned char *>(m.a + so), next),
                              heap.to_global_ptr(m.b + dof), n)
                        .wait();
                CHECK(count_wrong(m.b + dof, n, next, salt) == 0, "%s get %zu bytes, src +%zu, dst +%zu", path, n, so,
                      dof);
                upcxx::barrier();
            }
        }
    }
    uxn_check::verbose() = true;
    CHECK(uxn_check::failures() == 0, "%s: %ld cases of size x offset x misalignment, put and get: 0 wrong bytes", path,
          cases);
    const auto c1 = heap.copies();
    if (fast_path)
        CHECK(c1.fast - c0.fast == size_t(2 * cases) && c1.fallback == c0.fallback, "fast path served all %ld copies",
              2 * cases);
    else
        CHECK(c1.fallback - c0.fallback == size_t(2 * cases) && c1.fast == c0.fast,
              "%s: upcxx::copy served all %ld copies", path, 2 * cases);

    // Ordering with NVSHMEM.
    const size_t n = size_t(8) << 20;
    fill(m.a, n, pe, 90);
    cudaDeviceSynchronize();
    nvshmem_putmem(m.b, m.a, n, next);  // my pattern into next's b
    nvshmem_quiet();
    nvshmem_barrier_all();
    upcxx::barrier();
    heap.copy(heap.to_global_ptr(m.b, next), heap.to_global_ptr(m.a), n).wait();  // next's b = my pattern
    CHECK(count_wrong(m.a, n, pe, 90) == 0, "%s: heap.copy after nvshmem_putmem + quiet + barrier reads the put bytes",
          path);
    fill(m.a, n, pe, 91);
    cudaDeviceSynchronize();
    upcxx::barrier();
    heap.copy(heap.to_global_ptr(m.a), heap.to_global_ptr(m.b, next), n).wait();
    upcxx::barrier();
    nvshmem_getmem(m.a, m.b, n, next);  // next's b = mine, 91
    nvshmem_quiet();
    CHECK(count_wrong(m.a, n, pe, 91) == 0,
          "%s: nvshmem_getmem after heap.copy + wait + barrier reads the copied bytes", path);
    upcxx::barrier();

    // 32 copies in flight.
    const size_t chunk = size_t(1) << 20;
    fill(m.a, 32 * chunk, pe, 92);
    cudaMemset(m.b, 0, 32 * chunk);
    cudaDeviceSynchronize();
    upcxx::barrier();
    upcxx::future<> all = upcxx::make_future();
    bool then_ran = false;
    for (int k = 0; k < 32; k++) {
        auto f = heap.copy(heap.to_global_ptr(m.a + k * chunk), heap.to_global_ptr(m.b + k * chunk, next), chunk);
        if (k == 0) f = f.then([&] { then_ran = true; });
        all = upcxx::when_all(all, f);
    }
    all.wait();
    upcxx::barrier();
    CHECK(then_ran && count_wrong(m.b, 32 * chunk, prev, 92) == 0,
          "%s: 32 copies in flight, when_all + then: 0 wrong bytes", path);
    heap.check_copies();
}

int main(int argc, char **argv) {
    upcxx::init();
    const int me = upcxx::rank_me(), n = upcxx::rank_n();
    int ndev = 0;
    // UXN_ALLOW_SHARED_GPU=1: ranks may share a GPU (NVSHMEM's several PEs per GPU): the peer
    // mapping is then exercised without NVLink.
    const bool shared_ok = std::getenv("UXN_ALLOW_SHARED_GPU") != nullptr;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 || (ndev < n && !shared_ok)) {
        if (me == 0)
            std::printf("SKIPPED: nvshmem_copy_test needs a GPU per rank (%d ranks, %d GPUs visible)\n", n, ndev);
        upcxx::finalize();
        return 77;
    }
    cudaSetDevice(me % ndev);
    nvshmem_init_from_upcxx();
    const int pe = nvshmem_my_pe(), npes = nvshmem_n_pes(), next = (pe + 1) % npes;
    const size_t max_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (size_t(1) << 30);
    bufs m;
    m.cap = std::max(max_bytes, size_t(64) << 20) + 4096;
    m.a = static_cast<unsigned char *>(nvshmem_malloc(m.cap));
    m.b = static_cast<unsigned char *>(nvshmem_malloc(m.cap));
    if (!m.a || !m.b) {
        std::fprintf(stderr, "nvshmem_malloc(%zu) failed\n", m.cap);
        return 2;
    }

    for (bool fast : {true, false}) {
        if (!fast) setenv("UPCXX_EXTRA_NVSHMEM_COPY", "upcxx", 1);
        nvshmem_heap heap;  // the knob is read here
        correctness(heap, m, fast);
        if (fast) {
            // 4. Bad input (once; the checks run before any path is chosen).
            auto ga = heap.to_global_ptr(m.a);
            auto gb = heap.to_global_ptr(m.b, next);
            expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, "null", "copy(null, dst)",
                         [&] { heap.copy(dptr(nullptr), gb, 8); });
            expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, "null", "copy(src, null)",
                         [&] { heap.copy(ga, dptr(nullptr), 8); });
            // 0 elements: completes (upcxx::copy's semantics: ready in progress on 2020.10, where
            // every notification is deferred), nothing copied.
            auto zero = heap.copy(ga, gb, 0);
            {
                const auto t_end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
#if UPCXX_VERSION >= 20230305L
                while (!zero.is_ready() && std::chrono::steady_clock::now() < t_end) upcxx::progress();
                CHECK(zero.is_ready(), "copy of 0 elements: the future becomes ready");
#else
                while (!zero.ready() && std::chrono::steady_clock::now() < t_end) upcxx::progress();
                CHECK(zero.ready(), "copy of 0 elements: the future becomes ready");
#endif
            }
            using big = std::array<unsigned char, 1024>;
            auto ga_big = upcxx::reinterpret_pointer_cast<big>(ga);
            auto gb_big = upcxx::reinterpret_pointer_cast<big>(gb);
            expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, "overflow", "copy(count * sizeof(T) overflows)",
                         [&] { heap.copy(ga_big, gb_big, (static_cast<size_t>(-1) >> 8)); });
            const size_t off_end = heap.extent() - static_cast<size_t>(m.a - static_cast<unsigned char *>(heap.base()));
            expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP, "update()", "copy(range past the extent)",
                         [&] { heap.copy(ga, gb, off_end + 1); });
            // Memory outside the heap: this rank's own UPC++ allocator (where UPC++ allows one).
#if UPCXX_EXTRA_NVSHMEM_GPU_ALLOCATOR
            {
                auto own = upcxx::make_gpu_allocator<upcxx::cuda_device>(size_t(4) << 20, me % ndev);
                dptr mine = own.allocate<unsigned char>(4096);
                fill(m.a, 4096, pe, 77);
                cudaDeviceSynchronize();
                auto c0 = heap.copies();
                heap.copy(ga, mine, 4096).wait();
                // This rank's own device memory with heap memory mapped here: the fast path
                // (upcxx::copy in the public-API build).
                const size_t want_fast = nvshmem_heap::fast_copies() ? 1 : 0;
                CHECK(heap.copies().fast == c0.fast + want_fast && count_wrong(own.local(mine), 4096, pe, 77) == 0,
                      "a destination in this rank's own UPC++ device segment: the %s, 0 wrong bytes",
                      want_fast ? "fast path" : "public-API path (upcxx::copy)");
                own.deallocate(mine);
                own.destroy();
            }
#endif
        }
        // 5. Benchmark (rank 0 measures; rank 1 stays attentive in a barrier for upcxx::copy).
        if (fast) {
            upcxx::barrier();
            if (me == 0) {
                auto ga = heap.to_global_ptr(m.a);
                auto gb = heap.to_global_ptr(m.b, next);
                auto gb_remote_src = heap.to_global_ptr(m.b, next);
                // The floor of the fast path: the same copy through NVSHMEM's mapping, issued by hand.
                unsigned char *peer_b = static_cast<unsigned char *>(nvshmem_ptr(m.b, next));
                cudaStream_t raw_stream;
                cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking);
                std::printf(
                    "COPYBENCH columns: bytes | heap.copy put us | heap.copy get us | upcxx::copy put us | "
                    "nvshmem_putmem+quiet us | cudaMemcpyAsync+sync by hand us | GB/s: heap.copy put, get, "
                    "upcxx::copy, nvshmem_putmem, by hand\n");
                for (size_t sz = 8; sz <= max_bytes; sz *= 8) {
                    const int reps = sz <= (size_t(1) << 16) ? 2000 : sz <= (size_t(16) << 20) ? 50 : 5;
                    const int ureps = sz <= (size_t(1) << 16) ? 500 : sz <= (size_t(16) << 20) ? 10 : 2;
                    auto timeit = [&](int r, auto &&op) {
                        op();  // warm
                        double t0 = now();
                        for (int i = 0; i < r; i++) op();
                        return (now() - t0) / r * 1e6;
                    };
                    // upcxx::copy stages the whole transfer in a host bounce buffer of the shared
                    // heap, and UPC++ aborts the job (a fatal error, not an exception) when the heap
                    // cannot hold it: above 256 MiB it is not timed (the column says 0), nor is
                    // heap.copy in the public-API build, where it is upcxx::copy.
                    const bool upcxx_timed = sz <= (size_t(256) << 20);
                    double put = 0, get = 0;
                    if (nvshmem_heap::fast_copies() || upcxx_timed) {
                        put = timeit(reps, [&] { heap.copy(ga, gb, sz).wait(); });
                        get = timeit(reps, [&] { heap.copy(gb_remote_src, ga, sz).wait(); });
                    }
                    double up = 0;
                    if (upcxx_timed)
                        up = timeit(ureps, [&] { upcxx::copy(ga, gb, sz).wait(); });
                    else
                        std::printf(
                            "NOTE upcxx::copy of %zu bytes not timed: it would need a %zu-byte bounce buffer in "
                            "UPC++'s shared heap\n",
                            sz, sz);
                    double nv = timeit(reps, [&] {
                        nvshmem_putmem(m.b, m.a, sz, next);
                        nvshmem_quiet();
                    });
                    double hand = peer_b ? timeit(reps,
                                                  [&] {
                                                      cudaMemcpyAsync(peer_b, m.a, sz, cudaMemcpyDefault, raw_stream);
                                                      cudaStreamSynchronize(raw_stream);
                                                  })
                                         : 0.0;
                    auto gbs = [&](double us) { return us > 0 ? sz / us / 1e3 : 0.0; };  // 0: not measured
                    std::printf("COPYBENCH %zu %.2f %.2f %.2f %.2f %.2f | %.2f %.2f %.2f %.2f %.2f\n", sz, put, get, up,
                                nv, hand, gbs(put), gbs(get), gbs(up), gbs(nv), gbs(hand));
                    std::fflush(stdout);
                }
                cudaStreamDestroy(raw_stream);
            }
            upcxx::barrier();
        }
        heap.destroy();
    }

    nvshmem_free(m.b);
    nvshmem_free(m.a);
    nvshmem_finalize();
    int total = upcxx::reduce_all(uxn_check::failures(), upcxx::op_fast_add).wait();
    if (me == 0)
        std::printf("RESULT nvshmem_copy_test %s: %d failures (UPC++ %ld)\n", total ? "FAIL" : "PASS", total,
                    (long)UPCXX_VERSION);
    upcxx::finalize();
    return total ? 1 : 0;
}
