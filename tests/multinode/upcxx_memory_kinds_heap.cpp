// upcxx_memory_kinds_heap: UPC++ 2023.9.0's test/memory_kinds.cpp, unmodified, run while an
// nvshmem_heap is active on the same GPU (upcxx_tests_heap.hpp): UPC++'s device allocators made,
// moved and destroyed beside the heap's own UPC++ device segment, on 2 nodes. heap.copy to and
// from the other node's heap before the test and after it (at its upcxx::finalize(), renamed to
// finish_heap_then_finalize: the heap checked and destroyed, NVSHMEM finalised, then UPC++
// finalised for real, so that the test's post-finalize deletions run as it means them to). The
// test's main() has no return statement (legal for main only): the renamed function never gets
// there, the last of its post-finalize steps (one more, added at its finalize) prints the test's
// success line and exits with the wrapper's status.
#include "upcxx_tests_heap.hpp"
#include "util.hpp"

extern std::vector<std::function<void()>> post_fini;  // memory_kinds.cpp's

namespace uxn_wrap {

char *block = nullptr;  // nvshmem_malloc'd, 64 KiB

// One put to the next rank's block and one get from it (at `salt`'s slot): bytes and paths.
void copy_round(int salt) {
    const int me = upcxx::rank_me(), n = upcxx::rank_n(), next = (me + 1) % n, prev = (me + n - 1) % n;
    const bool fast = upcxx::local_team_contains(next);
    const std::size_t slot = 4096, put_at = std::size_t(salt) * 2 * slot, get_at = put_at + slot;
    copy_test::fill(block + put_at, slot, me, salt);
    upcxx::barrier();
    auto c0 = heap()->copies();
    upcxx::future<> f =
        heap()->copy(heap()->to_global_ptr(block + put_at), heap()->to_global_ptr(block + get_at, next), slot);
    auto c1 = heap()->copies();
    (fast ? fast_expected() : fallback_expected())++;
    wrong_paths() += (c1.fast - c0.fast) != (fast ? 1u : 0u) || (c1.fallback - c0.fallback) != (fast ? 0u : 1u);
    copy_test::check("copy_round", copy_test::wait_for(f, 60), "round %d: the put to rank %d completed", salt, next);
    upcxx::barrier();
    copy_test::check("copy_round", copy_test::count_wrong(block + get_at, slot, prev, salt) == 0,
                     "round %d: rank %d's bytes here (%s path)", salt, prev, fast ? "fast" : "fallback");
}

}  // namespace uxn_wrap

namespace upcxx {
inline void finish_heap_then_finalize() {
    uxn_wrap::copy_round(1);  // the heap still right after UPC++'s allocators came and went
    nvshmem_free(uxn_wrap::block);
    const int rc = uxn_wrap::stop();
    const bool rank0 = upcxx::rank_me() == 0;
    upcxx::finalize();  // the test's init
    upcxx::finalize();  // the wrapper's
    post_fini.push_back([rc, rank0] {
        if (rank0) print_test_success();
        std::fflush(stdout);
        std::exit(rc);
    });
}
}  // namespace upcxx

#define finalize finish_heap_then_finalize
#define main uxn_upcxx_memory_kinds_main
#include "memory_kinds.cpp"
#undef main
#undef finalize

int main() {
    uxn_wrap::start("upcxx_memory_kinds_heap");
    uxn_wrap::block = static_cast<char *>(nvshmem_malloc(64 * 1024));
    uxn_wrap::copy_round(0);
    uxn_upcxx_memory_kinds_main();  // exits from its last post-finalize step
    return 1;                       // not reached
}
