// A program with its own NVSHMEM kernel (ring_kernel.cu), built with
// upcxx_extra_nvshmem_add_device_code(): upcxx::extra::nvshmem_init() initialises NVSHMEM through
// its device library, so the kernel's nvshmem_int_p works; UPC++ then reads what the kernel wrote.
// Prints "RESULT ring_kernel PASS" on GPUs; without one, every rank throws the same error.
#include <nvshmem.h>

#include <cstdio>

#include <upcxx/upcxx.hpp>
#include <upcxx_extra/nvshmem.hpp>

int launch_put_my_pe(int *slot);

int main() {
    upcxx::init();
    const int me = upcxx::rank_me();
    std::printf("rank %d: NVSHMEM's device library %s\n", me,
                upcxx::extra::detail::device_library().init ? "registered" : "NOT registered");
    std::fflush(stdout);
    int rc = 0;
    try {
        upcxx::extra::nvshmem_init();
        int *slot = static_cast<int *>(nvshmem_malloc(sizeof(int)));
        cudaMemset(slot, 0xff, sizeof(int));
        cudaDeviceSynchronize();
        nvshmem_barrier_all();
        const int launched = launch_put_my_pe(slot);
        nvshmem_barrier_all();  // every PE's put has landed
        int got = -1;
        {
            // The same int, read through UPC++.
            upcxx::extra::nvshmem_heap heap;
            int *host = nullptr;
            cudaMallocHost(&host, sizeof(int));
            int *mine_dev = static_cast<int *>(nvshmem_malloc(sizeof(int)));
            heap.update();
            heap.copy(heap.to_global_ptr(slot), heap.to_global_ptr(mine_dev), 1).wait();
            cudaMemcpy(host, mine_dev, sizeof(int), cudaMemcpyDeviceToHost);
            got = *host;
            cudaFreeHost(host);
            heap.destroy();
            nvshmem_free(mine_dev);
        }
        const int n = upcxx::rank_n(), want = (me - 1 + n) % n;
        std::printf("rank %d: kernel launch %d, slot %d (want %d)\n", me, launched, got, want);
        const int wrong = upcxx::reduce_all(got != want || launched != 0 ? 1 : 0, upcxx::op_fast_add).wait();
        if (me == 0) std::printf("RESULT ring_kernel %s\n", wrong ? "FAIL" : "PASS");
        rc = wrong ? 1 : 0;
        nvshmem_free(slot);
        upcxx::extra::nvshmem_finalize();
    } catch (const upcxx::extra::nvshmem_error &e) {
        std::fprintf(stderr, "rank %d: %s\n", me, e.what());
        rc = 1;
    }
    upcxx::finalize();
    return rc;
}
