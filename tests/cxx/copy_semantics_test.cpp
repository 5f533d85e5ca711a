// copy_semantics_test: what nvshmem_heap::copy promises beyond moving bytes, one check group per
// promise, each written so that a plausible naive implementation FAILS it (the comment of each
// group says which one). 2 ranks or more (ranks may share a GPU), NVSHMEM bootstrapped from UPC++.
//
// The promises, by number, and the file under semantics/ that holds each check group (with the
// promise in full at its top; tests/README.md lists them too):
//   F1  destroy() drains the copies in flight                                     ordering.hpp
//   F2  the user's own device allocator; a global pointer made before update()     memory.hpp
//   F3  the calling thread's current device is another GPU than the heap's         memory.hpp
//   F4  a fast copy CUDA fails is redone; check_copies() names it once             errors.hpp
//   F5  deferral: nothing ready inside the call that may not be                     completions.hpp
//   F6  40 growths: one UPC++ segment, copies into the newest chunk                 memory.hpp
//   F7  every completion form, on the right persona, once                          completions.hpp
//   F8  copy_after(s, ...) is ordered after s's earlier work, without a host wait  ordering.hpp
//   F9  raw pointers: into the heap refused, host memory taken                     arguments.hpp
//   F10 a persona (a thread) that goes away with a copy in flight                  threads.hpp
//   F11 (par) a thread's untracked copies: destroy() does not wait for them        threads.hpp
//   F12 destroy() waits for the redo of a failed copy, or says it cannot           errors.hpp
//   F13 0 elements, exactly as upcxx::copy                                          arguments.hpp
//   F14 a raw pointer into a peer's heap as mapped here is refused                 arguments.hpp
//   F15 fork(): a child's calls refused, destroy() there quiet                      fork.hpp
//   F16 batching: 600 small copies, bytes and completions right                    batching.hpp
//   F17 a knob value heap.copy does not take fails the heap on every rank          errors.hpp
//   F18 upcxx::discharge() after remote_cx::as_rpc needs no user-level progress    completions.hpp
//   F19 a raw range that runs into a heap is refused                               arguments.hpp
//   F20 (stand-in) a batch launch CUDA refuses: the copies land, batching off      batching.hpp
//   F21 (stand-in, par) a failed batch, then a thread's good copies: destroy() ok  batching.hpp
//   F22 copy_on_stream: ordered after s's earlier work, s's later work after it    streams.hpp
//   F23 after(s): ready once s's earlier work is done, never in the call           streams.hpp
//   F24 copy_on_stream and after() refuse a stream being captured                  streams.hpp
//   F25 a failed copy_on_stream is redone before it completes                      streams.hpp
//   F26 (stand-in) every engine destroyed its stream with nothing queued on it     ordering.hpp
//   F27 (stand-in) a remote-completion copy CUDA fails twice is redone             errors.hpp
//   F28 (par) a worker thread's copy completes at that thread's progress only      threads.hpp
// The groups run in main() in the order below (the shared heap's groups, then those that make
// heaps of their own, F1 and F26 last), whatever their numbers.
//
// One translation unit: semantics/*.hpp are included here, not compiled apart. Apart, each would
// compile UPC++, the layer and the heap.copy instantiations it shares with the others again, in
// each of the ~10 configurations of the suite that build this program (UPC++ 2023.9 seq opt: 46 s
// of CPU as one translation unit, 115 s apart; tests/README.md).
//
// RESULT lines per check (copy_test_util.hpp); exit 1 on any failure, 77 without a GPU or with
// one rank.   upcxx-run -n 2 ./copy_semantics_test
#include "semantics/common.hpp"
#include "semantics/arguments.hpp"
#include "semantics/memory.hpp"
#include "semantics/completions.hpp"
#include "semantics/ordering.hpp"
#include "semantics/errors.hpp"
#include "semantics/batching.hpp"
#include "semantics/streams.hpp"
#include "semantics/fork.hpp"
#include "semantics/threads.hpp"

int main() {
    upcxx::init();
    copy_test::program() = "copy_semantics_test";
    me = upcxx::rank_me();
    nranks = upcxx::rank_n();
    if (nranks < 2) {
        if (me == 0)
            std::printf("SKIPPED: copy_semantics_test needs 2 ranks or more (%d)\nRESULT copy_semantics_test SKIPPED\n",
                        nranks);
        upcxx::finalize();
        return 77;
    }
    gpu = copy_test::select_gpu_or_skip();  // exits 77 without a GPU
    copy_test::start_watchdog();
    copy_test::nvshmem_init_from_upcxx();
    next = (me + 1) % nranks;
    prev = (me + nranks - 1) % nranks;
    const char *knob = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY");
    // The public-API mode (nvshmem_heap::fast_copies() false): every copy is upcxx::copy.
    forced = (knob && std::string(knob) == "upcxx") || !nvshmem_heap::fast_copies();

    unsigned char *a = static_cast<unsigned char *>(nvshmem_malloc(cap));
    unsigned char *b = static_cast<unsigned char *>(nvshmem_malloc(cap));
    if (!a || !b) {
        std::printf("RESULT copy_semantics_test FAIL (rank %d): nvshmem_malloc(%zu) failed\n", me, cap);
        return 2;
    }
    mapped = nvshmem_ptr(b, next) != nullptr && nvshmem_ptr(a, next) != nullptr;
    if (me == 0)
        std::printf("copy_semantics_test: %d ranks, GPU %d of %d visible, next PE %s, %s\n", nranks, gpu,
                    copy_test::visible_gpus(),
                    mapped ? "mapped here (fast path)" : "NOT mapped here (every copy falls back)",
                    forced ? (nvshmem_heap::fast_copies() ? "UPCXX_EXTRA_NVSHMEM_COPY=upcxx" : "public-API mode")
                           : "fast path allowed");
    {
        nvshmem_heap heap;
        g_heap = &heap;
        group("F9", [&] { f9_raw_pointers(heap, a, b); });
        group("F5", [&] { f5_deferral(heap, a, b); });
        group("F7", [&] { f7_completions(heap, a, b); });
        group("F8", [&] { f8_copy_after(heap, a, b); });
        group("F2", [&] { f2_own_allocator_and_old_pointers(heap, a, b); });
        group("F4", [&] { f4_failed_copy(heap, a, b); });
        group("F10", [&] { f10_personas(heap, a, b); });
        group("F13", [&] { f13_zero_elements(heap, a, b); });
        group("F14", [&] { f14_peer_mapping(heap, a, b); });
        group("F15", [&] { f15_fork(heap, a, b); });
        group("F18", [&] { f18_discharge(heap, a, b); });
        group("F19", [&] { f19_raw_ranges(heap, a, b); });
        group("F22", [&] { f22_copy_on_stream(heap, a, b); });
        group("F23", [&] { f23_after(heap); });
        group("F24", [&] { f24_capture(heap, a, b); });
        group("F25", [&] { f25_failed_stream_copy(heap, a, b); });
        group("F27", [&] { f27_rpc_copy_failing_twice(heap, a, b); });
        group("F28", [&] { f28_initiator_persona(heap, a, b); });
        group("F16", [&] { f16_batching(heap, a, b); });
        group("F6", [&] { f6_growth(heap, a); });
        group("destroy", [&] { heap.destroy(); });
        g_heap = nullptr;
    }
    group("F3", [&] { f3_other_device(a, b); });
    group("F11", [&] { f11_untracked(a, b); });
    group("F17", [] { f17_bad_knobs(); });
    group("F12", [&] { f12_redo_before_destroy(a, b); });
    group("F20", [&] { f20_refused_launch(a, b); });
    group("F21", [&] { f21_failed_launch_then_thread(a, b); });
    group("F1", [&] { f1_destroy_drains(a, b); });
    group("F26", [] { f26_drained_idle(); });  // last: every heap of the run destroyed
    nvshmem_free(b);
    nvshmem_free(a);
    nvshmem_finalize();
    check("F1.finalize", true, "nvshmem_free + nvshmem_finalize after destroy(): no crash");
    const int rc = copy_test::finish();
    upcxx::finalize();
    return rc;
}
