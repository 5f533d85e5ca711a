// GPU test of upcxx::extra::nvshmem_init() / nvshmem_finalize() in a host-only program (built with
// the C++ compiler alone: no nvcc, no NVSHMEM device library; CMake target UpcxxExtraNvshmem::nvshmem).
// One GPU per rank, 2 ranks or more:
//   1. nvshmem_init() with no device chosen: the device is local rank modulo the visible devices;
//      NVSHMEM is initialised, its PEs are the world ranks; a second call changes nothing;
//   2. nvshmem_malloc + nvshmem_heap + heap.copy to the next PE, checked;
//   3. nvshmem_finalize() while the heap is active: refused on every rank (nvshmem_in_use, the
//      same failing rank everywhere), NVSHMEM still initialised, the heap still copies;
//   4. heap.destroy(), nvshmem_finalize(): NVSHMEM is finalised; a second finalize is harmless;
//   5. again, with the caller's device choice (cudaSetDevice to another device when there is one)
//      and heap_size: nvshmem_init() takes the device whose context is current; with
//      NVSHMEM_DISABLE_CUDA_VMM=1 the heap is at least heap_size.
// Exits 77 (skipped) without a GPU.
//   UPCXX_SHARED_HEAP_SIZE=256MB upcxx-run -n 2 ./nvshmem_init_gpu_test
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "check.hpp"

// NVSHMEM 3.8 declares a global variable ::nvshmem_error: name the exception type qualified.
using init_error = upcxx::extra::nvshmem_error;
using upcxx::extra::nvshmem_errc;
using upcxx::extra::nvshmem_heap;

// Fills my `a` with my PE, copies it into the next PE's `b` with heap.copy, checks my `b` holds
// the previous PE's.
static void copy_round(nvshmem_heap &heap, unsigned char *a, unsigned char *b, std::size_t n, const char *what) {
    const int pe = heap.my_pe(), npes = heap.n_pes();
    cudaMemset(a, pe & 0xff, n);
    cudaMemset(b, 0xee, n);
    cudaDeviceSynchronize();
    upcxx::barrier();
    heap.copy(heap.to_global_ptr(a), heap.to_global_ptr(b, (pe + 1) % npes), n).wait();
    upcxx::barrier();
    std::vector<unsigned char> h(n);
    cudaMemcpy(h.data(), b, n, cudaMemcpyDeviceToHost);
    const unsigned char want = static_cast<unsigned char>(((pe - 1 + npes) % npes) & 0xff);
    std::size_t wrong = 0;
    for (unsigned char c : h) wrong += c != want;
    CHECK(wrong == 0, "%s: heap.copy of %zu bytes to the next PE: %zu wrong", what, n, wrong);
}

static bool init_checked(const char *what, int want_device) {
    try {
        upcxx::extra::nvshmem_init();
    } catch (const init_error &e) {
        CHECK(false, "%s: nvshmem_init: %s", what, e.what());
        return false;
    }
    int dev = -1;
    cudaGetDevice(&dev);
    CHECK(dev == want_device, "%s: device %d (want %d)", what, dev, want_device);
    CHECK(nvshmemx_init_status() >= NVSHMEM_STATUS_IS_INITIALIZED && nvshmem_my_pe() == upcxx::rank_me() &&
              nvshmem_n_pes() == upcxx::rank_n(),
          "%s: NVSHMEM initialised (status %d), PE %d of %d", what, nvshmemx_init_status(), nvshmem_my_pe(),
          nvshmem_n_pes());
    return true;
}

int main() {
    upcxx::init();
    const int me = upcxx::rank_me(), n = upcxx::rank_n();
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        if (me == 0) std::printf("SKIPPED: nvshmem_init_gpu_test needs a GPU (none visible)\n");
        upcxx::finalize();
        return 77;
    }
    const int local = upcxx::local_team().rank_me();
    const std::size_t bytes = std::size_t(8) << 20;

    // 1. The default device; a second call is a check only.
    if (init_checked("default device", local % count)) {
        try {
            upcxx::extra::nvshmem_init();
            CHECK(nvshmemx_init_status() >= NVSHMEM_STATUS_IS_INITIALIZED, "a second nvshmem_init: nothing changes");
        } catch (const init_error &e) {
            CHECK(false, "a second nvshmem_init: %s", e.what());
        }

        // 2. NVSHMEM and UPC++ on the same bytes.
        unsigned char *a = static_cast<unsigned char *>(nvshmem_malloc(bytes));
        unsigned char *b = static_cast<unsigned char *>(nvshmem_malloc(bytes));
        {
            nvshmem_heap heap;
            copy_round(heap, a, b, bytes, "first init");

            // 3. Refused while the heap is active, on every rank alike.
            int errc = -1, rank = -2;
            std::string msg = "(no exception)";
            try {
                upcxx::extra::nvshmem_finalize();
            } catch (const init_error &e) {
                errc = static_cast<int>(e.errc());
                rank = e.failed_rank();
                msg = e.what();
            }
            CHECK(errc == static_cast<int>(nvshmem_errc::nvshmem_in_use) && rank == 0 &&
                      msg.find("destroy() it first") != std::string::npos,
                  "nvshmem_finalize with the heap active: refused: %s", msg.c_str());
            const int lo = upcxx::reduce_all(errc * 1000 + rank, upcxx::op_fast_min).wait();
            const int hi = upcxx::reduce_all(errc * 1000 + rank, upcxx::op_fast_max).wait();
            CHECK(lo == hi, "nvshmem_finalize with the heap active: the same error on every rank");
            CHECK(nvshmemx_init_status() >= NVSHMEM_STATUS_IS_INITIALIZED,
                  "NVSHMEM still initialised after the refusal");
            copy_round(heap, a, b, bytes, "after the refusal");
            heap.destroy();
        }
        nvshmem_free(b);
        nvshmem_free(a);

        // 4. The documented order: heap.destroy(), nvshmem_finalize(), upcxx::finalize().
        try {
            upcxx::extra::nvshmem_finalize();
            CHECK(nvshmemx_init_status() == NVSHMEM_STATUS_NOT_INITIALIZED,
                  "nvshmem_finalize: NVSHMEM finalised (status %d)", nvshmemx_init_status());
            upcxx::extra::nvshmem_finalize();
            CHECK(true, "a second nvshmem_finalize: harmless");
        } catch (const init_error &e) {
            CHECK(false, "nvshmem_finalize after destroy(): %s", e.what());
        }

        // 5. The caller's device choice, and the heap size.
        const int mine = count > 1 ? (local + 1) % count : local % count;
        cudaSetDevice(mine);
        cudaFree(nullptr);
        const bool vmm = !std::getenv("NVSHMEM_DISABLE_CUDA_VMM");
        upcxx::extra::nvshmem_init_options opts;
        opts.heap_size = std::size_t(3) << 29;  // 1.5 GiB
        const char *env_before = std::getenv("NVSHMEM_SYMMETRIC_SIZE");
        const std::string before = env_before ? env_before : "(unset)";
        bool ok = false;
        try {
            upcxx::extra::nvshmem_init(opts);
            ok = true;
        } catch (const init_error &e) {
            CHECK(false, "re-init with the caller's device %d: %s", mine, e.what());
        }
        const char *env_after = std::getenv("NVSHMEM_SYMMETRIC_SIZE");
        CHECK(before == (env_after ? env_after : "(unset)"),
              "heap_size does not outlive nvshmem_init(): NVSHMEM_SYMMETRIC_SIZE %s before, %s after", before.c_str(),
              env_after ? env_after : "(unset)");
        if (ok) {
            int dev = -1;
            cudaGetDevice(&dev);
            CHECK(dev == mine, "re-init: the caller's device %d (got %d)", mine, dev);
            a = static_cast<unsigned char *>(nvshmem_malloc(bytes));
            b = static_cast<unsigned char *>(nvshmem_malloc(bytes));
            {
                nvshmem_heap heap;
                if (!vmm)
                    CHECK(heap.extent() >= opts.heap_size, "re-init without CUDA VMM: extent %zu >= heap_size %zu",
                          heap.extent(), opts.heap_size);
                copy_round(heap, a, b, bytes, "re-init");
                heap.destroy();
            }
            nvshmem_free(b);
            nvshmem_free(a);
            upcxx::extra::nvshmem_finalize();
        }
    }

    const int total = upcxx::reduce_all(uxn_check::failures(), upcxx::op_fast_add).wait();
    if (me == 0)
        std::printf("RESULT nvshmem_init_gpu_test %s: %d failures on %d ranks\n", total ? "FAIL" : "PASS", total, n);
    upcxx::finalize();
    return total ? 1 : 0;
}
