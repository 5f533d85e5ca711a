// C++ tests of upcxx_extra/nvshmem.hpp: round trips for every PE, bad PE, outside the heap, null,
// past the extent mapped at construction. Needs UPC++ (CUDA) and a GPU per rank; run by
// gpu/run-gpu-suite.sh:  upcxx-run -n 2 ./nvshmem_hpp_test
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"

static int failures = 0;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        bool ok_ = (cond);                                                 \
        std::printf("CHECK rank %d %s: ", upcxx::rank_me(), ok_ ? "PASS" : "FAIL"); \
        std::printf(__VA_ARGS__);                                          \
        std::printf("\n");                                                 \
        if (!ok_) failures++;                                              \
    } while (0)

template <class F>
static void expect_error(upcxx_extra_nvshmem_status_t want, const char *needle, const char *what, F f) {
    try {
        f();
        CHECK(false, "%s: no exception", what);
    } catch (const upcxx::extra::nvshmem_error &e) {
        CHECK(e.status() == want && std::strstr(e.what(), needle), "%s -> status %d: %s", what, (int)e.status(), e.what());
    }
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
    nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
    if (me == 0) nvshmemx_get_uniqueid(&id);
    id = upcxx::broadcast(id, 0).wait();
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    nvshmemx_set_attr_uniqueid_args(me, n, &id, &attr);
    nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
    const int pe = nvshmem_my_pe(), npes = nvshmem_n_pes();

    double *x = static_cast<double *>(nvshmem_malloc(1024 * sizeof(double)));
    upcxx::extra::nvshmem_heap heap;
    CHECK(heap.my_pe() == pe && heap.n_pes() == npes && heap.extent() > 0, "heap: PE %d of %d, extent %zu", heap.my_pe(),
          heap.n_pes(), heap.extent());

    for (int p = 0; p < npes; p++) {
        for (int i : {0, 1, 1023}) {
            auto gp = heap.to_global_ptr(x + i, p);
            auto back = heap.from_global_ptr(gp);
            CHECK(back.first == x + i && back.second == p && gp.where() == p, "round trip x+%d on PE %d (rank %d)", i, p,
                  gp.where());
        }
    }
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE, "PE", "to_global_ptr(x, n_pes)", [&] { heap.to_global_ptr(x, npes); });
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE, "PE -1", "to_global_ptr(x, -1)", [&] { heap.to_global_ptr(x, -1); });
    double local = 0;
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP, "outside the symmetric heap", "to_global_ptr(stack address)",
                 [&] { heap.to_global_ptr(&local, 0); });
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, "NULL", "to_global_ptr(nullptr)",
                 [&] { heap.to_global_ptr(static_cast<double *>(nullptr), 0); });
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, "null", "from_global_ptr(null)", [&] {
        heap.from_global_ptr(upcxx::global_ptr<double, upcxx::memory_kind::cuda_device>(nullptr));
    });
    // The heap grows after construction: an address past the mapped extent gets the advice.
    char *big = static_cast<char *>(nvshmem_malloc(size_t(2) << 30));
    if (big)  // (a static heap without CUDA VMM may be too small: then there is nothing to grow)
    expect_error(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP, "grew since", "to_global_ptr(past the extent)",
                 [&] { heap.to_global_ptr(big + (size_t(2) << 30) - 1, 0); });

    heap.destroy();
    nvshmem_free(big);
    nvshmem_free(x);
    nvshmem_finalize();
    int total = upcxx::reduce_all(failures, upcxx::op_fast_add).wait();
    if (me == 0) std::printf("RESULT nvshmem_hpp_test %s: %d failures\n", total ? "FAIL" : "PASS", total);
    upcxx::finalize();
    return total ? 1 : 0;
}
