// Smoke test (c): heap.copy's fast path on the CUDA + NVSHMEM stand-in, 2 ranks. nvshmem_init,
// nvshmem_malloc, a heap, heap.copy to the peer's heap memory from local host memory and back,
// the bytes checked, heap.copies().fast > 0, a heap growth past the first chunk (VMM on), then
// heap.destroy() and nvshmem_finalize(). With the argument "fail", also a fast copy whose CUDA
// copy fails asynchronously (injected by the stand-in): redone, bytes right, check_copies() throws.
// Checks with the C++ tests' check.hpp (tests/cxx: "CHECK rank R PASS|FAIL: ..."), then
// "RESULT heap_copy_smoke PASS|FAIL: ..." on rank 0.
// SPDX-License-Identifier: BSD-3-Clause
#include <cuda_runtime_api.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "standin_control.h"
#include "check.hpp"  // tests/cxx/check.hpp

int main(int argc, char **argv) {
    const bool inject = argc > 1 && std::strcmp(argv[1], "fail") == 0;
    upcxx::init();
    const int me = upcxx::rank_me(), n = upcxx::rank_n(), peer = (me + 1) % n, from = (me + n - 1) % n;
    upcxx::extra::nvshmem_init();
    CHECK(nvshmemx_init_status() >= NVSHMEM_STATUS_IS_INITIALIZED, "nvshmemx_init_status() after nvshmem_init()");
    CHECK(nvshmem_my_pe() == me && nvshmem_n_pes() == n,
          "nvshmem_my_pe() %d, nvshmem_n_pes() %d: UPC++'s rank and size", nvshmem_my_pe(), nvshmem_n_pes());

    const size_t N = 1 << 16;  // bytes
    char *p = static_cast<char *>(nvshmem_malloc(N));
    CHECK(p != nullptr, "nvshmem_malloc(N)");
    CHECK(nvshmem_ptr(p, peer) != nullptr, "nvshmem_ptr to the peer");
    CHECK(cudaMemset(p, 0, N) == cudaSuccess, "cudaMemset of the block");
    // A block that grows the heap past its first chunk (UXN_STANDIN_HEAP_CHUNK=1M in the VMM run).
    const size_t BIG = size_t(3) << 20;
    char *big = static_cast<char *>(nvshmem_malloc(BIG));
    CHECK(big != nullptr, "nvshmem_malloc(BIG)");
    CHECK(cudaMemset(big, 0, BIG) == cudaSuccess, "cudaMemset of the big block");
    nvshmem_barrier_all();
    {
        upcxx::extra::nvshmem_heap heap;
        CHECK(upcxx::extra::nvshmem_heap::fast_copies(), "nvshmem_heap::fast_copies()");
        // Local host memory in UPC++'s shared segment, as a global pointer.
        upcxx::global_ptr<char> src = upcxx::new_array<char>(N), back = upcxx::new_array<char>(N);
        for (size_t i = 0; i < N; ++i) src.local()[i] = char((me * 31 + int(i)) & 0x7f);
        upcxx::barrier();

        // Host -> the peer's heap memory (P2P through nvshmem_ptr), then the peer checks.
        heap.copy(src, heap.to_global_ptr(p, peer), N).wait();
        upcxx::barrier();
        std::vector<char> mine(N);
        CHECK(cudaMemcpy(mine.data(), p, N, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy of my block back");
        bool ok = true;
        for (size_t i = 0; i < N; ++i) ok &= mine[i] == char((from * 31 + int(i)) & 0x7f);
        CHECK(ok, "heap.copy host -> the peer's heap: rank %d's bytes here", from);
        upcxx::barrier();

        // The peer's heap -> local host (the brief's form: heap memory first), checked here.
        heap.copy(heap.to_global_ptr(p, peer), back, N).wait();
        ok = true;
        for (size_t i = 0; i < N; ++i) ok &= back.local()[i] == char((me * 31 + int(i)) & 0x7f);
        CHECK(ok, "heap.copy the peer's heap -> local host: the bytes");
        upcxx::barrier();

        // A slow copy (the stand-in's delay) into the tail of a block past the first heap chunk:
        // the future is not ready before the bytes landed, and they are there when it is.
        unsigned old = uxn_standin_set_copy_delay_us(100000);
        upcxx::future<> f = heap.copy(src, heap.to_global_ptr(big + BIG - N, peer), N);
        CHECK(!f.ready(), "a slow copy's future not ready before its bytes land");
        f.wait();
        uxn_standin_set_copy_delay_us(old);
        upcxx::barrier();
        CHECK(std::memcmp(big + BIG - N, mine.data(), N) == 0,
              "the slow copy into the block past the first chunk landed: rank %d's bytes, as above", from);
        // argv "fail": an asynchronous CUDA failure of a fast copy, injected in the stand-in (the
        // copy moves no bytes; the stream's next event reports cudaErrorUnknown). heap.copy
        // promises: the completion still means the bytes landed (the copy is redone through
        // upcxx::copy), and check_copies() then throws CUDA_ERROR for it.
        if (inject) {
            std::memset(mine.data(), 0, N);
            CHECK(cudaMemset(p, 0, N) == cudaSuccess, "cudaMemset of the block (injection)");
            upcxx::barrier();
            long failed0 = uxn_standin_failed_copies();
            uxn_standin_fail_next_copies(1);
            heap.copy(src, heap.to_global_ptr(p, peer), N).wait();
            CHECK(uxn_standin_failed_copies() == failed0 + 1,
                  "uxn_standin_failed_copies() counts the injected failure");
            upcxx::barrier();
            CHECK(cudaMemcpy(mine.data(), p, N, cudaMemcpyDeviceToHost) == cudaSuccess,
                  "cudaMemcpy of my block back (injection)");
            ok = true;
            for (size_t i = 0; i < N; ++i) ok &= mine[i] == char((from * 31 + int(i)) & 0x7f);
            CHECK(ok, "the redo landed the bytes before the completion");
            bool threw = false;
            try {
                heap.check_copies();
            } catch (const upcxx::extra::nvshmem_error &e) {
                threw = e.errc() == upcxx::extra::nvshmem_errc::cuda;
                if (me == 0) std::printf("check_copies(): %s\n", e.what());
            }
            CHECK(threw, "check_copies() throws errc::cuda for the injected failure");
            upcxx::barrier();
        }
        const auto counts = heap.copies();
        CHECK(counts.fast > 0, "heap.copies().fast %zu > 0", counts.fast);
        if (me == 0)
            std::printf("heap.copies(): fast %zu fallback %zu; heap base %p, peer mapping %p\n", counts.fast,
                        counts.fallback, static_cast<void *>(p), nvshmem_ptr(p, peer));
        upcxx::barrier();
        upcxx::delete_array(src);
        upcxx::delete_array(back);
        heap.destroy();
    }
    nvshmem_free(big);
    nvshmem_free(p);
    upcxx::extra::nvshmem_finalize();
    char detail[64];
    std::snprintf(detail, sizeof detail, "(UPC++ %ld)", long(UPCXX_VERSION));
    const int rc = uxn_check::finish("heap_copy_smoke", detail);
    upcxx::finalize();
    return rc;
}
