// NVSHMEM in a kernel, then UPC++ on the same memory.
//
// Every PE fills a symmetric array on the GPU, and a kernel puts it into `inbox` on the next PE
// with NVSHMEM's device API (nvshmemx_int_put_nbi_block). Then UPC++ works on the same bytes:
// heap.copy fetches the next PE's inbox (which holds this PE's field) into a third array, every
// PE checks its arrays, and upcxx::reduce_all adds up the wrong elements. Rank 0 prints
// "RESULT nvshmem_kernel_upcxx PASS"; without a GPU every rank throws the same nvshmem_init error.
//
// Build: examples/CMakeLists.txt builds it when CMake finds a CUDA compiler
// (find_package(UpcxxExtraNvshmem ... COMPONENTS cxx nvshmem), then
// upcxx_extra_nvshmem_add_device_code(nvshmem_kernel_upcxx): separable compilation, NVSHMEM's
// device library, nvshmem_init() through it). Run (smp conduit, one GPU per rank):
//   $UPCXX_INSTALL/bin/upcxx-run -n 2 ./nvshmem_kernel_upcxx [elements]
#include <cuda_runtime.h>
#include <nvshmem.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include <upcxx/upcxx.hpp>
#include <upcxx_extra/nvshmem.hpp>

cudaError_t launch_fill(int *field, size_t n, int pe, cudaStream_t s);
cudaError_t launch_put_to_next(int *inbox, const int *field, size_t n, cudaStream_t s);

static long count_wrong(const int *dev, size_t n, int from_pe) {
    std::vector<int> h(n);
    if (cudaMemcpy(h.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) return long(n);
    long wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += h[i] != from_pe * 1000003 + static_cast<int>(i % 1000003);
    return wrong;
}

int main(int argc, char **argv) {
    upcxx::init();
    const int me = upcxx::rank_me();
    int rc = 0;
    try {
        upcxx::extra::nvshmem_init();  // collective: a GPU per rank, NVSHMEM through its device library
        const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (size_t(1) << 22);
        auto *field = static_cast<int *>(nvshmem_malloc(n * sizeof(int)));
        auto *inbox = static_cast<int *>(nvshmem_malloc(n * sizeof(int)));
        auto *back = static_cast<int *>(nvshmem_malloc(n * sizeof(int)));
        upcxx::extra::nvshmem_heap heap;  // collective: the same memory, addressable by UPC++
        const int pe = heap.my_pe(), npes = heap.n_pes();
        const int next = (pe + 1) % npes, prev = (pe + npes - 1) % npes;

        // 1. NVSHMEM from the GPU: fill my field, put it into the next PE's inbox.
        cudaStream_t s;
        cudaStreamCreate(&s);
        cudaError_t e = launch_fill(field, n, pe, s);
        if (e == cudaSuccess) e = launch_put_to_next(inbox, field, n, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) std::fprintf(stderr, "PE %d: kernel: %s\n", pe, cudaGetErrorString(e));
        nvshmem_barrier_all();  // every PE's puts have landed

        // 2. UPC++ on the same bytes: the next PE's inbox (my field) into my `back`.
        heap.copy(heap.to_global_ptr(inbox, next), heap.to_global_ptr(back), n).wait();
        const long wrong = count_wrong(inbox, n, prev) + count_wrong(back, n, pe) + (e != cudaSuccess);
        std::printf("PE %d: inbox from PE %d and the copy back from PE %d: %ld wrong of %zu elements\n", pe, prev, next,
                    wrong, 2 * n);
        const long total = upcxx::reduce_all(wrong, upcxx::op_fast_add).wait();
        if (me == 0) std::printf("RESULT nvshmem_kernel_upcxx %s\n", total ? "FAIL" : "PASS");
        rc = total ? 1 : 0;

        upcxx::barrier();
        cudaStreamDestroy(s);
        heap.destroy();  // 1. the heap
        nvshmem_free(back);
        nvshmem_free(inbox);
        nvshmem_free(field);
        upcxx::extra::nvshmem_finalize();             // 2. NVSHMEM
    } catch (const upcxx::extra::nvshmem_error &e) {  // thrown on every rank together
        std::fprintf(stderr, "rank %d: %s\n", me, e.what());
        rc = 1;
    }
    upcxx::finalize();  // 3. UPC++
    return rc;
}
