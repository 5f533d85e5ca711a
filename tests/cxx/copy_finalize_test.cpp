// copy_finalize_test: a heap that outlives upcxx::finalize() (a forgotten destroy()) with fast
// copies still in flight: 64 MiB copies into the next PE's heap (with remote_cx::as_rpc on UPC++
// >= 2021.3) and a flood of small ones, none waited for. upcxx::finalize() and the heap's
// destructor after it must neither abort (UPC++'s debug codemode aborts on any call into UPC++
// after finalize, such as posting a completion to a persona) nor hang; the completions of the
// copies in flight are dropped (docs/robustness.md). 2 ranks or more; exit 77 without a GPU.
//   upcxx-run -n 2 ./copy_finalize_test
#include <cstdio>
#include <memory>

#include "copy_test_util.hpp"

int main() {
    upcxx::init();
    copy_test::program() = "copy_finalize_test";
    const int me = upcxx::rank_me(), n = upcxx::rank_n();
    if (n < 2) {
        if (me == 0)
            std::printf("SKIPPED: copy_finalize_test needs 2 ranks or more\nRESULT copy_finalize_test SKIPPED\n");
        upcxx::finalize();
        return 77;
    }
    copy_test::select_gpu_or_skip();  // exits 77 without a GPU
    copy_test::start_watchdog();
    copy_test::nvshmem_init_from_upcxx();
    const int next = (me + 1) % n;
    const std::size_t big = std::size_t(64) << 20, small = 4096;
    char *a = static_cast<char *>(nvshmem_malloc(big));
    char *b = static_cast<char *>(nvshmem_malloc(big));
    if (!copy_test::check("nvshmem_malloc", a && b, "two blocks of %zu bytes", big)) return 2;
    auto heap = std::make_unique<upcxx::extra::nvshmem_heap>();
    std::size_t issued = 0;
    {
        auto ga = heap->to_global_ptr(a), gb = heap->to_global_ptr(b, next);
        for (int i = 0; i < 4; i++, issued++) (void)heap->copy(ga, gb, big);
        for (int i = 0; i < 64; i++, issued++) (void)heap->copy(ga + i * small, gb + i * small, small);
#if defined(UPCXX_KIND_CUDA)
        static int rpcs = 0;
        (void)heap->copy(ga, gb, big, upcxx::remote_cx::as_rpc([] { rpcs++; }));
        issued++;
#endif
    }
    const auto counts = heap->copies();
    std::printf(
        "copy_finalize_test (rank %d): %zu copies issued (%zu fast), none waited for; upcxx::finalize() "
        "with the heap alive\n",
        me, issued, counts.fast);
    std::fflush(stdout);
    upcxx::finalize();
    heap.reset();  // after finalize: releases this process's objects only
    // (UPC++ is gone: the line names the rank this process had; no finish(), which is collective.)
    copy_test::check("no_abort", true, "finalize and the heap's destructor after it returned");
    std::printf("RESULT copy_finalize_test PASS\n");
    std::fflush(stdout);
    std::_Exit(0);  // NVSHMEM was bootstrapped over UPC++, which is gone: no nvshmem_finalize()
}
