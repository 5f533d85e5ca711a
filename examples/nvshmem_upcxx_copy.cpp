// nvshmem_put and heap.copy on the same objects in GPU memory, with upcxx::copy beside it.
//
// Each PE nvshmem_mallocs arrays and fills one; nvshmem_int_put sends it to the next PE. Then UPC++
// reads the next PE's copy of that symmetric object (through heap.to_global_ptr) into another
// symmetric array, twice: with heap.copy (the bytes move through NVSHMEM's P2P mapping, one
// cudaMemcpyAsync) and with upcxx::copy, the same arguments (through UPC++'s host bounce
// buffers), each timed. heap.copy then writes into the next PE's object for NVSHMEM
// (nvshmem_int_get) to read back. Every PE checks every element; from_global_ptr round-trips
// every pointer used. NVSHMEM is initialised by upcxx::extra::nvshmem_init() (one GPU per rank,
// the unique-id bootstrap broadcast by UPC++: no MPI) and finalised by
// upcxx::extra::nvshmem_finalize().
//
// A host-only program (no kernels): any C++17 compiler, no nvcc, no NVSHMEM device library.
// Build: examples/CMakeLists.txt (find_package(UpcxxExtraNvshmem ... COMPONENTS cxx nvshmem));
// examples/README.md has the commands, with CMake and with the upcxx wrapper.
// Run (smp conduit, one GPU per rank):
//   UPCXX_SHARED_HEAP_SIZE=1GB $UPCXX_INSTALL/bin/upcxx-run -n 2 ./nvshmem_upcxx_copy [elements]
// (upcxx::copy stages its copies in UPC++'s shared heap: 64 MiB arrays need more than its default.)
#include <cuda_runtime.h>
#include <nvshmem.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"

#define CUDA_OK(x)                                                                                        \
    do {                                                                                                  \
        cudaError_t e_ = (x);                                                                             \
        if (e_ != cudaSuccess) {                                                                          \
            std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
            std::abort();                                                                                 \
        }                                                                                                 \
    } while (0)

static int value(int pe, size_t i) { return (pe << 26) | static_cast<int>(i & ((1u << 26) - 1)); }

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

static long count_wrong(const int *dev, size_t n, int from_pe) {
    std::vector<int> h(n);
    CUDA_OK(cudaMemcpy(h.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost));
    long wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += h[i] != value(from_pe, i);
    return wrong;
}

int main(int argc, char **argv) {
    upcxx::init();
    const int me = upcxx::rank_me();
    // Collective: this rank's GPU (local rank modulo the visible devices), NVSHMEM bootstrapped
    // with a unique id that UPC++ broadcasts. Throws on every rank together when any rank fails.
    try {
        upcxx::extra::nvshmem_init();
    } catch (const upcxx::extra::nvshmem_error &e) {
        std::fprintf(stderr, "rank %d: %s\n", me, e.what());
        upcxx::finalize();
        return 2;
    }
    const int pe = nvshmem_my_pe(), npes = nvshmem_n_pes();
    const int next = (pe + 1) % npes, prev = (pe - 1 + npes) % npes;

    const size_t N = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (size_t(1) << 24);
    int *a = static_cast<int *>(nvshmem_malloc(N * sizeof(int)));  // mine, filled here
    int *b = static_cast<int *>(nvshmem_malloc(N * sizeof(int)));  // nvshmem_put target
    int *c = static_cast<int *>(nvshmem_malloc(N * sizeof(int)));  // heap.copy / upcxx::copy target
    int *d = static_cast<int *>(nvshmem_malloc(N * sizeof(int)));  // written by the previous PE through UPC++
    if (!a || !b || !c || !d) {
        std::fprintf(stderr, "PE %d: nvshmem_malloc failed\n", pe);
        return 2;
    }
    {
        std::vector<int> h(N);
        for (size_t i = 0; i < N; i++) h[i] = value(pe, i);
        CUDA_OK(cudaMemcpy(a, h.data(), N * sizeof(int), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(b, 0xff, N * sizeof(int)));
        CUDA_OK(cudaMemset(c, 0xff, N * sizeof(int)));
        CUDA_OK(cudaMemset(d, 0xff, N * sizeof(int)));
    }
    nvshmem_barrier_all();

    // After the nvshmem_mallocs, so the UPC++ segment covers them.
    upcxx::extra::nvshmem_heap heap;
    long wrong = 0, roundtrip_errors = 0;
    auto roundtrip = [&](auto gp, int *sym, int owner) {
        auto back = heap.from_global_ptr(gp);
        if (back.first != sym || back.second != owner) roundtrip_errors++;
    };

    // 1. NVSHMEM: my `a` into the next PE's `b`.
    nvshmem_int_put(b, a, N, next);
    nvshmem_quiet();
    nvshmem_barrier_all();

    // 2. UPC++: the next PE's `b` (which now holds my `a`) into my `c`, with heap.copy: the
    //    arguments of upcxx::copy, the bytes through NVSHMEM's mapping of the next PE's heap.
    auto next_b = heap.to_global_ptr(b, next);
    auto my_c = heap.to_global_ptr(c);
    roundtrip(next_b, b, next);
    roundtrip(my_c, c, pe);
    auto t0 = std::chrono::steady_clock::now();
    heap.copy(next_b, my_c, N).wait();
    const double t_heap = seconds_since(t0);
    long w2 = count_wrong(c, N, pe);
    //    The same copy with upcxx::copy: UPC++'s host bounce buffers.
    CUDA_OK(cudaMemset(c, 0xff, N * sizeof(int)));
    t0 = std::chrono::steady_clock::now();
    upcxx::copy(next_b, my_c, N).wait();
    const double t_upcxx = seconds_since(t0);
    w2 += count_wrong(c, N, pe);
    // ...and my own `b` holds the previous PE's `a`.
    long w1 = count_wrong(b, N, prev);

    // 3. heap.copy writes my `a` into the next PE's `d`; NVSHMEM reads it back from there.
    auto my_a = heap.to_global_ptr(a);
    auto next_d = heap.to_global_ptr(d, next);
    roundtrip(my_a, a, pe);
    roundtrip(next_d, d, next);
    heap.copy(my_a, next_d, N).wait();
    upcxx::barrier();
    CUDA_OK(cudaMemset(c, 0xff, N * sizeof(int)));
    nvshmem_int_get(c, d, N, next);
    nvshmem_quiet();
    long w3 = count_wrong(c, N, pe);
    long w4 = count_wrong(d, N, prev);  // my own `d`, written by the previous PE through UPC++
    wrong = w1 + w2 + w3 + w4;

    std::printf(
        "PE %d (rank %d) of %d, N=%zu, heap base %p extent %zu MiB: "
        "put->b %ld wrong, copy(next b)->c %ld wrong, copy->next d + nvshmem_get %ld wrong, d from prev %ld wrong, "
        "from_global_ptr round-trip errors %ld\n",
        pe, me, npes, N, heap.base(), heap.extent() >> 20, w1, w2, w3, w4, roundtrip_errors);
    std::printf("PE %d: %zu MiB from the next PE: heap.copy %.1f us, upcxx::copy %.1f us\n", pe, N * sizeof(int) >> 20,
                t_heap * 1e6, t_upcxx * 1e6);
    long total = upcxx::reduce_all(wrong + roundtrip_errors, upcxx::op_fast_add).wait();
    if (me == 0)
        std::printf("RESULT %s: %ld wrong elements or round trips in total (%zu elements x 5 checks x %d PEs)\n",
                    total ? "FAIL" : "PASS", total, N, npes);

    heap.destroy();  // 1. the heap
    nvshmem_free(d);
    nvshmem_free(c);
    nvshmem_free(b);
    nvshmem_free(a);
    upcxx::extra::nvshmem_finalize();  // 2. NVSHMEM (refused while a heap is active)
    upcxx::finalize();                 // 3. UPC++
    return total ? 1 : 0;
}
