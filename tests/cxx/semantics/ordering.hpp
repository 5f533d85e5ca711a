// copy_semantics_test, ordering with CUDA streams and with destroy(): destroy() drains, copy_after, nothing left on the
// engine's stream. Part of copy_semantics_test.cpp, which includes every file of semantics/ into one translation unit
// (one compile of UPC++ and the layer) and runs the groups; the helpers are common.hpp's.
//
//   F1 destroy() drains: rank 0 copies 64 MiB into rank 1's heap without waiting, and another 64
//      MiB with copy_after behind a 300 ms host function; destroy(); rank 1 checks every byte as
//      soon as destroy() returns; rank 0's futures become ready; nvshmem_free + nvshmem_finalize.
//   F8 copy_after(s, ...): s = a host function sleeping 200 ms, then cudaMemsetAsync(src, 0x5a);
//      the destination must be all 0x5a (a copy not ordered after s reads the old bytes), and on
//      the fast path copy_after returns before s's work has run (no host synchronisation: a host
//      function first on s that returns only once the call has, common.hpp's gate); also with
//      completions, on the fallback (a host destination), and for s = 0 (the legacy default
//      stream), cudaStreamLegacy, cudaStreamPerThread and a created stream.
//   F26 (stand-in) every heap of the run destroyed its engine's stream with nothing queued on it:
//      a drain that returned before its copies landed would leave work there.
#ifndef UXN_SEMANTICS_ORDERING_HPP
#define UXN_SEMANTICS_ORDERING_HPP

#include "common.hpp"

// F1: destroy() drains; then nvshmem_free and nvshmem_finalize.
static void f1_destroy_drains(unsigned char *a, unsigned char *b) {
    const int salt = 10;
    nvshmem_heap heap;
    g_heap = &heap;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    static int sleep_ms = 300;
    fill(a, 2 * big, me, salt);
    cudaMemset(b, 0, 2 * big);
    cudaDeviceSynchronize();
    barrier();
    upcxx::future<> f_plain, f_after;
    if (me == 0) {
        // Without waiting: a plain 64 MiB copy, and one ordered behind a 300 ms host function.
        f_plain = heap.copy(heap.to_global_ptr(a), heap.to_global_ptr(b, 1), big);
        cudaLaunchHostFunc(s, sleep_host_fn, &sleep_ms);
        f_after = heap.copy_after(s, heap.to_global_ptr(a + big), heap.to_global_ptr(b + big, 1), big);
    }
    heap.destroy();
    g_heap = nullptr;
    if (me == 1) {
        // Every byte, as soon as destroy() returned here.
        const long w1 = count_wrong(b, big, 0, salt);
        std::vector<unsigned char> h(big);
        cudaMemcpy(h.data(), b + big, big, cudaMemcpyDeviceToHost);
        long w2 = 0;
        for (std::size_t i = 0; i < big; i++) w2 += h[i] != copy_test::pattern(0, big + i, salt);
        check("F1.destroy_drains", w1 == 0,
              "rank 0's unwaited 64 MiB copy into this heap: %ld wrong bytes when destroy() returned", w1);
        check("F1.destroy_drains_copy_after", w2 == 0,
              "rank 0's unwaited 64 MiB copy_after (behind a %d ms host function): %ld wrong bytes when destroy() "
              "returned",
              sleep_ms, w2);
    }
    if (me == 0) {
        const bool ok = wait_for(f_plain, 10) && wait_for(f_after, 10);
        check("F1.futures_after_destroy", ok, "the unwaited copies' futures become ready after destroy()");
    }
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    barrier();
}

// =================================================================================================
// F8: copy_after.
static void f8_copy_after(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    static int sleep_ms = 200;
    int salt = 80;
    for (std::size_t n : {small, big}) {
        const dptr ga = heap.to_global_ptr(a), gb_next = heap.to_global_ptr(b, next);
        for (int form = 0; form < 2; form++) {
            char what[96];
            std::snprintf(what, sizeof what, "%s copy_after%s", sz(n), form ? " with op|src futures" : "");
            prepare(a, b, n, ++salt);  // a holds a pattern: a copy not ordered after s reads it
            auto c0 = heap.copies();
            // The fast path must not wait for s on the host: s's work then starts with a host
            // function that returns only once this thread lets it (common.hpp's gate), and the
            // call must return while it is closed; the fallback waits for s on the host.
            const bool fast = mapped && !forced;
            gate_close();
            if (fast) cudaLaunchHostFunc(s, gate_host_fn, nullptr);
            cudaLaunchHostFunc(s, sleep_host_fn, &sleep_ms);
            cudaMemsetAsync(a, 0x5a, n, s);
            upcxx::future<> of, sf;
            if (form == 0)
                of = heap.copy_after(s, ga, gb_next, n);
            else
                std::tie(of, sf) =
                    heap.copy_after(s, ga, gb_next, n, operation_cx::as_future() | source_cx::as_future());
            const bool returned_first = !gate_passed();
            gate_open();
            if (fast)
                // Separate names for the two sizes: a copy waited for in the call would also wait
                // for the stream's work, which is a host synchronisation too.
                check(n == small ? "F8.no_host_sync_small" : "F8.no_host_sync", returned_first,
                      "%s returned before the stream's earlier work (a host function waiting for this thread) ran",
                      what);
            bool ok = waited("F8.ordered", of, what) && (form == 0 || waited("F8.ordered", sf, what));
            barrier();
            check("F8.ordered", ok && count_not(b, n, 0x5a) == 0,
                  "%s: the destination holds the bytes the stream wrote (0x5a)", what);
            path_is("F8.path", c0, mapped ? 1 : 0, mapped ? 0 : 1, what);
            cudaStreamSynchronize(s);
            barrier();
        }
        // Every stream value orders the copy: 0 (the legacy default stream, where a plain
        // kernel<<<g, b>>> runs), cudaStreamLegacy, cudaStreamPerThread and a created stream.
        // Naive: 0 read as "no stream" (the heap's stream is non-blocking: nothing orders it).
        const cudaStream_t streams[] = {0, cudaStreamLegacy, cudaStreamPerThread, s};
        const char *stream_names[] = {"stream 0", "cudaStreamLegacy", "cudaStreamPerThread", "a created stream"};
        for (int k = 0; k < 4; k++) {
            prepare(a, b, n, ++salt);
            cudaLaunchHostFunc(streams[k], sleep_host_fn, &sleep_ms);
            cudaMemsetAsync(a, 0x07, n, streams[k]);
            bool ok = waited("F8.every_stream", heap.copy_after(streams[k], ga, gb_next, n), stream_names[k]);
            barrier();
            check("F8.every_stream", ok && count_not(b, n, 0x07) == 0,
                  "%s copy_after(%s, ...): the destination holds the bytes that stream wrote (0x07)", sz(n),
                  stream_names[k]);
            cudaDeviceSynchronize();
            barrier();
        }
        // The fallback (a host destination) is ordered after s too. At most 8 MiB: upcxx::copy
        // stages the transfer in UPC++'s shared heap.
        n = std::min(n, 8 * MiB);
        prepare(a, b, n, ++salt);
        hptr hg = upcxx::new_array<unsigned char>(n);
        std::memset(hg.local(), 0, n);
        std::vector<unsigned char> priv(n, 0);
        cudaLaunchHostFunc(s, sleep_host_fn, &sleep_ms);
        cudaMemsetAsync(a, 0x5a, n, s);
        bool ok = waited("F8.fallback_ordered", heap.copy_after(s, ga, hg, n), "copy_after to a UPC++ host global_ptr");
        cudaLaunchHostFunc(s, sleep_host_fn, &sleep_ms);
        cudaMemsetAsync(a, 0x3c, n, s);
        ok = ok &&
             waited("F8.fallback_ordered", heap.copy_after(s, ga, priv.data(), n), "copy_after to a raw host pointer");
        check("F8.fallback_ordered", ok && count_not(hg.local(), n, 0x5a) == 0 && count_not(priv.data(), n, 0x3c) == 0,
              "%s copy_after to host memory: ordered after the stream", sz(n));
        upcxx::delete_array(hg);
        cudaStreamSynchronize(s);
        barrier();
    }
    cudaStreamDestroy(s);
}

// =================================================================================================
// F26 (stand-in): every heap of this run (and its engine) destroyed its stream with nothing left on
// it (a drain that returned before its copies landed leaves work queued there). Run last.
static void f26_drained_idle() {
    using count_fn = long (*)();
    const auto busy = reinterpret_cast<count_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_busy_stream_destroys"));
    if (!busy) return skip("F26.drained_idle", "not on the CUDA stand-in");
    check("F26.drained_idle", busy() == 0, "%ld stream(s) destroyed with work queued on them", busy());
}

#endif  // UXN_SEMANTICS_ORDERING_HPP
