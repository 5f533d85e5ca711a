// copy_semantics_test: what nvshmem_heap::copy promises beyond moving bytes, one check group per
// promise, each written so that a plausible naive implementation FAILS it (the comment of each
// group says which one). 2 ranks or more (ranks may share a GPU), NVSHMEM bootstrapped from UPC++.
//
//   F9 a raw T* INTO the heap (source or destination, with or without completions) throws
//      nvshmem_error INVALID_ARGUMENT naming heap.to_global_ptr, copies nothing; raw host T* to
//      and from the heap works (upcxx::copy's private-memory semantics, the fallback), as does a
//      UPC++ host global_ptr.
//      Naive: a raw pointer taken as a symmetric address (the old overloads), or handed to
//      upcxx::copy, which reads device memory as host memory.
//   F5 deferral. UPC++ 2020.10: a fast copy's future (operation and source), promise and as_lpc are
//      not ready / have not run when copy() returns, and a .then attached then does not run
//      inside it. UPC++ >= 2023.3: the same with as_defer_future / as_defer_promise; as_eager_*
//      and the default (eager unless UPCXX_DEFER_COMPLETION) may be ready at return, and if so
//      the bytes must be at the destination already, and a ready source future means the source
//      may be overwritten at once. Small (4 KiB) and large (64 MiB) copies, local and remote.
//      Naive: a copy waited for in the call returning make_future() (ready on 2020.10 and for
//      as_defer_*), or an eager future ready before the bytes landed.
//   F7 every completion form on the fast path, small and large: as_promise, as_lpc (par: to a
//      persona of another thread, which must be where it runs), source_cx::as_future (then the
//      source is overwritten: the destination must keep the copied bytes), remote_cx::as_rpc
//      (UPC++ >= 2021.3; the RPC reads the bytes at the target, on its master persona), and
//      combinations with |; each notification exactly once; the fast path counted.
//      Naive: completions other than a future dropped or run on the wrong persona; as_rpc run
//      before the bytes landed or not at all.
//   F8 copy_after(s, ...): s = a host function sleeping 200 ms, then cudaMemsetAsync(src, 0x5a);
//      the destination must be all 0x5a (a copy not ordered after s reads the old bytes), and on
//      the fast path copy_after returns before s has drained (no host synchronisation); also with
//      completions, on the fallback (a host destination), and for s = 0 (the legacy default
//      stream), cudaStreamLegacy, cudaStreamPerThread and a created stream.
//   F2 a device global_ptr of the user's own allocator on this rank (UPC++ >= 2022.3
//      make_gpu_allocator; skipped on 2020.10 where the heap owns the GPU's only cuda_device)
//      with heap memory: the fast path, counted, bytes right (static and memory_kind::any); a
//      peer's own-allocator pointer: the fallback; a global pointer made BEFORE update() and the
//      heap's growth, copied to and from memory mapped after. Meant for the debug codemode too:
//      global-pointer arithmetic across allocators asserts there.
//   F4 (test hook) a fast copy that "fails" when it completes (fail_fast_copies: the copy reports
//      a CUDA error and moves NO bytes; a real asynchronous CUDA failure cannot be provoked
//      safely, this stands in for one): its future becomes ready only once the bytes are right
//      (redone through upcxx::copy); check_copies() throws CUDA_ERROR naming it (its byte count)
//      once; copies issued afterwards (and, par, concurrently from another thread) do not throw.
//   F6 40 growths (nvshmem_malloc 512 MiB + update(); without CUDA VMM the heap cannot grow: 8 MiB
//      allocations): segments() stays <= 1, no abort, copies into the newest chunk of the next PE
//      right.
//   F3 (>= 2 GPUs visible) the calling thread's current device is another GPU than the heap's,
//      from the heap's first copy on: copies right, fast, no error later, the caller's device
//      left as it was.
//   F3 also: copy_after(0, ...) with the other device current is ordered after THAT device's
//      legacy default stream (a host function sleeping 300 ms, then writing the source).
//      Naive: the event recorded on the heap device's legacy stream: the copy reads the old bytes.
//   F10 personas that go away with a fast copy in flight: a persona deleted (and, par, a thread
//      that exits) before its copy completed, then a new one, very likely at the same address:
//      the new one's copies complete. Naive: lanes keyed by the persona's address, the new
//      persona inheriting a poll that never runs (a hang).
//   F11 (par) a worker thread copies host -> host and 0 elements, then exits: destroy() returns at
//      once. Naive: those upcxx::copy calls tracked by an LPC on the dead thread's persona, destroy()
//      waiting 60 s and throwing copies_in_flight.
//   F26 (stand-in) every heap of the run destroyed its engine's stream with nothing queued on it:
//      a drain that returned before its copies landed would leave work there.
//   F16 batching: 2 x 300 small copies (1 B to 64 KiB + 3, odd offsets and lengths) put to the
//      next PE's heap and got from it, issued without waiting, with futures and a promise: every
//      byte right at the destination, each completion once, all counted fast and, unless
//      UPCXX_EXTRA_NVSHMEM_COPY=unbatched, batched (on the CUDA stand-in: far fewer kernel
//      launches than copies). Naive: a batch launched with the wrong descriptors (offsets,
//      lengths, unaligned tails), completions fired before the batch ran, or a batch that waits
//      for progress that never comes.
//   F17 a knob value heap.copy does not take (UPCXX_EXTRA_NVSHMEM_COPY=bogus,
//      UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES=12x, " -1", "\t-5", "+7", " 12", "-1", "12 ") fails the heap's construction
//      on every rank with errc bad_environment naming the variable; the next heap is built fine. Naive: the value
//      ignored, or one rank throwing while the others wait in the next collective.
//   F12 a fast copy that fails after it was issued (test hook), destroy() called at once:
//      destroy() waits for its redo through upcxx::copy; the target's bytes are right when
//      destroy() returns there. Naive: the redo left in flight while the segment goes (SIGSEGV).
//      (par) The same copy issued by a thread that never makes progress again: it cannot be
//      redone, and destroy() says so on every rank (errc cuda). Naive: reported as success.
//   F13 0 elements, as upcxx::copy: at the heap's end (one past extent()) no range error, the
//      future as ready as upcxx::copy's, nothing counted. Naive: range checks before n == 0.
//   F14 a raw T* from nvshmem_ptr(sym, peer) (a peer's heap as mapped here), source or
//      destination: INVALID_ARGUMENT naming heap.to_global_ptr. Naive: only this rank's range
//      checked, the mapping handed to upcxx::copy as host memory.
//   F15 fork(): in a child, heap.copy (fast, 0 elements), copy_after (also of host memory),
//      update() and check_copies() throw errc forked, and touch neither CUDA nor UPC++; destroy()
//      and the destructor of a heap moved there return quietly (no abort, nothing on stderr).
//      Naive: only the fast path refuses; destroy() destructing the parent's live allocators
//      (UPC++ aborts), the destructor telling the child to call destroy().
//      (A copy with host memory at both ends by type is upcxx::copy as written, unchecked.)
//   F18 upcxx::discharge() after a copy with remote_cx::as_rpc (UPC++ >= 2021.3): internal-level
//      progress alone (what discharge() makes) brings progress_required() to false, with no
//      user-level progress on the initiator; the RPC then runs at the target with the bytes right.
//      Naive: the remote completion sent from a user-level LPC, discharge() spinning forever.
//   F19 raw ranges: a raw T* range that starts below the heap and runs into it (and one that runs
//      into a peer's heap as mapped here) is INVALID_ARGUMENT in every form (raw -> UPC++ host
//      global_ptr, UPC++ host global_ptr -> raw, raw -> heap global_ptr), nothing copied; one that
//      ends exactly at the heap's base is host memory. Naive: only the first byte checked.
//   F20 (stand-in) a batch launch that CUDA refuses at the call: the batch's copies still land, the
//      heap stops batching and copy_batch_bytes() says 0, check_copies() names it once. Naive:
//      copy_batch_bytes() still reporting the knob's value.
//   F21 (stand-in, par) an asynchronous failure of a batch launch (its copies redone), then a thread
//      issues 4 good batched copies and exits without progress: destroy() succeeds on every rank.
//      Naive: a synchronize that reports the old failure again, blamed on every unsettled copy.
//   F22 copy_on_stream(s, ...): s = a host function sleeping 150 ms, then cudaMemsetAsync(src,
//      0x5a); the copy; then cudaMemcpyAsync(check, dst) queued on s: `check` must be all 0x5a (a
//      copy not ordered after s's earlier work reads the old bytes; one that s's later work does
//      not wait for is read before it lands: the stand-in delays every copy). For s = 0,
//      cudaStreamLegacy, cudaStreamPerThread, a created stream, a stream of the other GPU (2
//      GPUs); a copy that is upcxx::copy (host global pointers at both ends: s waits on the GPU
//      for its completion); every completion form (future, promise, lpc, remote_cx::as_rpc); the
//      call returns before s drained on the fast path. Naive: copy_after (no wait after), or a
//      stream that waits for nothing.
//   F23 after(s): not ready while a 300 ms host function runs on s, ready after it, never inside
//      the call; as_promise, as_lpc, as_future (and 2023.9's as_eager_future / as_defer_future);
//      every stream value; a CUDA error on s (stand-in) makes it ready and check_copies() throws
//      naming after(); a thread with its own persona (par). Naive: a future made ready at once,
//      or one that waits on the host.
//   F24 graph capture: copy_on_stream and after() on a stream being captured throw errc
//      stream_capture, nothing captured is left behind, the capture ends cleanly. Naive: an event
//      recorded into the graph and polled for ever.
//   F25 a copy_on_stream that fails after it was issued (test hook): its completion still means
//      the bytes landed (redone), check_copies() names copy_on_stream once.
//   F1 destroy() drains: rank 0 copies 64 MiB into rank 1's heap without waiting, and another 64
//      MiB with copy_after behind a 300 ms host function; destroy(); rank 1 checks every byte as
//      soon as destroy() returns; rank 0's futures become ready; nvshmem_free + nvshmem_finalize.
//
// RESULT lines per check (copy_test_util.hpp); exit 1 on any failure, 77 without a GPU or with
// one rank.   upcxx-run -n 2 ./copy_semantics_test
#define UPCXX_EXTRA_NVSHMEM_TEST_HOOKS 1  // upcxx::extra::detail::test_hooks::fail_fast_copies

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "copy_test_util.hpp"

using copy_test::check;
using copy_test::count_not;
using copy_test::count_wrong;
using copy_test::fill;
using copy_test::heap_error;
using copy_test::ready;
using copy_test::skip;
using copy_test::wait_for;
using upcxx::extra::nvshmem_heap;
using standin_fail_fn = int (*)(int);  // uxn_standin_fail_next_copies / _launches (standin_control.h)
using dptr = upcxx::global_ptr<unsigned char, upcxx::memory_kind::cuda_device>;
using aptr = upcxx::global_ptr<unsigned char, upcxx::memory_kind::any>;
using hptr = upcxx::global_ptr<unsigned char>;
using upcxx::operation_cx;
using upcxx::remote_cx;
using upcxx::source_cx;

#if UPCXX_VERSION > 20201000L
#define COPY_HAS_REMOTE_CX 1  // upcxx::copy has no remote_cx in 2020.10 (its body does not compile)
#else
#define COPY_HAS_REMOTE_CX 0
#endif
#if UPCXX_VERSION >= 20230300L
#define COPY_HAS_EAGER 1  // as_eager_* / as_defer_*, eager by default
#else
#define COPY_HAS_EAGER 0  // every notification is delivered in progress
#endif
#if UPCXX_VERSION >= 20220300L
#define HAS_GPU_ALLOCATOR 1
#else
#define HAS_GPU_ALLOCATOR 0
#endif

static const std::size_t MiB = std::size_t(1) << 20;
static const std::size_t big = 64 * MiB;  // an asynchronous fast copy
static const std::size_t small = 4096;    // one that may complete inside copy()
static const std::size_t cap = 128 * MiB + 4096;

static nvshmem_heap *g_heap = nullptr;
static int me, nranks, next, prev, gpu;
static bool mapped = false;  // NVSHMEM maps the next PE's heap here: fast copies between the PEs
static bool forced = false;  // UPCXX_EXTRA_NVSHMEM_COPY=upcxx or the public-API mode: every copy falls back

static const char *sz(std::size_t n) { return n >= MiB ? "64 MiB" : "4 KiB"; }

// The path the copies since c0 took: `fast` fast copies and `fallback` fallback ones.
static bool path_is(const char *name, const nvshmem_heap::copy_counts &c0, std::size_t fast, std::size_t fallback,
                    const char *what) {
    const auto c1 = g_heap->copies();
    if (forced) {
        fallback += fast;
        fast = 0;
    }
    return check(name, c1.fast - c0.fast == fast && c1.fallback - c0.fallback == fallback,
                 "%s: %zu fast + %zu fallback copies (expected %zu + %zu)", what, c1.fast - c0.fast,
                 c1.fallback - c0.fallback, fast, fallback);
}

template <class F>
static void expect_error(const char *name, upcxx_extra_nvshmem_status_t want, const char *needle, const char *what,
                         F f) {
    try {
        f();
        check(name, false, "%s: no exception", what);
    } catch (const heap_error &e) {
        check(name, e.status() == want && std::strstr(e.what(), needle),
              "%s -> status %d (want %d), message naming '%s': %s", what, static_cast<int>(e.status()),
              static_cast<int>(want), needle, e.what());
    } catch (const std::exception &e) {
        check(name, false, "%s: another exception: %s", what, e.what());
    }
}

// wait_for with a FAIL line.
template <class Fut>
static bool waited(const char *name, const Fut &f, const char *what, double seconds = 60) {
    if (wait_for(f, seconds)) return true;
    check(name, false, "%s: not complete after %.0f s", what, seconds);
    return false;
}

static void barrier() { upcxx::barrier(); }

// Rank-symmetric setup for a copy `mine -> next's dst`: my src := pattern(me, salt), my dst := 0.
static void prepare(unsigned char *src, unsigned char *dst, std::size_t n, int salt) {
    fill(src, n, me, salt);
    cudaMemset(dst, 0, n);
    cudaDeviceSynchronize();
    barrier();
}

static void CUDART_CB sleep_host_fn(void *ms) { usleep(static_cast<useconds_t>(*static_cast<int *>(ms)) * 1000u); }

// =================================================================================================
// F9: raw pointers.
static void f9_raw_pointers(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    const dptr ga = heap.to_global_ptr(a), gb = heap.to_global_ptr(b), gb_next = heap.to_global_ptr(b, next);
    const upcxx_extra_nvshmem_status_t INV = UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT;
    cudaMemset(b, 0, small);
    cudaDeviceSynchronize();
    expect_error("F9.raw_heap_source", INV, "to_global_ptr", "heap.copy(const T* into the heap, gp, n)",
                 [&] { (void)heap.copy(static_cast<const unsigned char *>(a), gb, small); });
    expect_error("F9.raw_heap_source", INV, "to_global_ptr", "heap.copy(T* into the heap (interior), gp, n)",
                 [&] { (void)heap.copy(a + 4097, gb, 16); });
    expect_error("F9.raw_heap_source", INV, "to_global_ptr", "heap.copy(T* into the heap, gp, n, op|src futures)",
                 [&] { (void)heap.copy(a, gb, small, operation_cx::as_future() | source_cx::as_future()); });
    expect_error("F9.raw_heap_destination", INV, "to_global_ptr", "heap.copy(gp, T* into the heap, n)",
                 [&] { (void)heap.copy(ga, b, small); });
    expect_error("F9.raw_heap_destination", INV, "to_global_ptr", "heap.copy(gp of the next PE, T* into the heap, n)",
                 [&] { (void)heap.copy(heap.to_global_ptr(a, next), b + 100, 16); });
    upcxx::promise<> p;
    expect_error("F9.raw_heap_destination", INV, "to_global_ptr", "heap.copy(gp, T* into the heap, n, as_promise)",
                 [&] { heap.copy(ga, b, small, operation_cx::as_promise(p)); });
    check("F9.nothing_copied", count_not(b, small, 0) == 0, "the refused copies wrote nothing");

    // Raw host memory (the caller's private memory, as upcxx::copy reads it) to and from the heap.
    const int salt = 91;
    std::vector<unsigned char> h = copy_test::host_pattern(small, me, salt), back(small, 0);
    cudaMemset(b, 0, small);
    cudaDeviceSynchronize();
    barrier();
    auto c0 = heap.copies();
    bool ok = true;
    std::size_t refused = 0;
#if UPCXX_VERSION < 20210300L
    if (!mapped || forced) {
        // upcxx::copy between private host memory and another rank's device memory crashes in
        // UPC++ 2020.10: heap.copy refuses such a copy where it would be upcxx::copy.
        expect_error("F9.raw_host_upcxx_2020", INV, "crashes", "heap.copy(host T*, next's heap) as upcxx::copy",
                     [&] { (void)heap.copy(h.data(), gb_next, small); });
        expect_error("F9.raw_host_upcxx_2020", INV, "crashes", "heap.copy(next's heap, host T*) as upcxx::copy",
                     [&] { (void)heap.copy(gb_next, back.data(), small); });
        refused = 2;
        barrier();
    } else
#endif
    {
        ok = waited("F9.raw_host", heap.copy(h.data(), gb_next, small), "heap.copy(host T*, next's heap)");
        barrier();
        check("F9.raw_host", ok && count_wrong(b, small, prev, salt) == 0, "host T* -> next PE's heap: bytes right");
        ok = waited("F9.raw_host", heap.copy(gb_next, back.data(), small), "heap.copy(next's heap, host T*)");
        check("F9.raw_host", ok && back == h, "next PE's heap -> host T*: bytes right");
    }
    barrier();  // the previous PE has read my b: it may be written again
    // const T* source with completions.
    std::vector<unsigned char> back2(small, 0);
    upcxx::future<> of, sf;
    std::tie(of, sf) = heap.copy(static_cast<const unsigned char *>(h.data()), gb, small,
                                 operation_cx::as_future() | source_cx::as_future());
    ok = waited("F9.raw_host", upcxx::when_all(of, sf), "heap.copy(const host T*, my heap, op|src)");
    check("F9.raw_host", ok && count_wrong(b, small, me, salt) == 0,
          "const host T* -> my heap with op|src futures: bytes right");
    // Host memory is read and written by CUDA on the fast path when the heap end is mapped here.
    path_is("F9.raw_host_path", c0, mapped ? 3 - refused : 1, mapped ? 0 : 2 - refused, "raw host pointers");
    // A raw host pointer is told from the heap without a failing C call: the thread's last C
    // error stays as it was. Naive: asking the C library, whose OUT_OF_HEAP overwrites it.
    (void)upcxx_extra_nvshmem_offset(nullptr, nullptr);  // NULL_ARGUMENT: a last error to keep
    const std::string last_before = upcxx_extra_nvshmem_last_error();
    ok = waited("F9.last_error", heap.copy(h.data(), gb, small), "heap.copy(host T*, my heap)");
    check("F9.last_error", ok && last_before == upcxx_extra_nvshmem_last_error(),
          "a raw host pointer leaves the thread's last C error as it was (\"%s\", now \"%s\")", last_before.c_str(),
          upcxx_extra_nvshmem_last_error());
    // A UPC++ host global_ptr (this rank's shared segment) with the heap: this process reaches it.
    hptr hg = upcxx::new_array<unsigned char>(small);
    std::memset(hg.local(), 0, small);
    c0 = heap.copies();
    ok = waited("F9.upcxx_host", heap.copy(gb, hg, small), "heap.copy(my heap, UPC++ host gp)");
    check("F9.upcxx_host", ok && std::memcmp(hg.local(), h.data(), small) == 0,
          "my heap -> UPC++ host global_ptr: bytes right");
    barrier();  // read my b before the previous PE writes it
    ok = waited("F9.upcxx_host", heap.copy(aptr(hg), aptr(gb_next), small),
                "heap.copy(UPC++ host any, next's heap any)");
    barrier();
    check("F9.upcxx_host", ok && count_wrong(b, small, prev, salt) == 0,
          "UPC++ host -> next's heap (memory_kind::any): bytes right");
    path_is("F9.upcxx_host_path", c0, mapped ? 2 : 1, mapped ? 0 : 1, "a UPC++ host global_ptr");
    upcxx::delete_array(hg);
    barrier();
}

// =================================================================================================
// F5: deferral.
static void f5_deferral(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    int salt = 50;
    for (std::size_t n : {small, big}) {
        for (bool remote : {false, true}) {
            const dptr ga = heap.to_global_ptr(a), gdst = heap.to_global_ptr(b, remote ? next : me);
            // Where this process reads the destination: its own b, or the next PE's through NVSHMEM's mapping.
            const unsigned char *dst_here = remote ? static_cast<const unsigned char *>(nvshmem_ptr(b, next)) : b;
            const int who = me;
            char what[128];
            std::snprintf(what, sizeof what, "%s %s copy", sz(n), remote ? "remote" : "local");
            auto c0 = heap.copies();
            std::size_t copies = 0;

#if !COPY_HAS_EAGER
            // UPC++ 2020.10: every notification is delivered in progress.
            prepare(a, b, n, ++salt);
            upcxx::future<> f = heap.copy(ga, gdst, n);
            copies++;
            bool at_return = ready(f);
            check("F5.future_deferred", !at_return, "%s: the future is not ready when copy() returns", what);
            bool ok = waited("F5.future_deferred", f, what);
            check("F5.future_deferred", ok && (!dst_here || count_wrong(dst_here, n, who, salt) == 0),
                  "%s: bytes right once ready", what);
            barrier();

            prepare(a, b, n, ++salt);
            bool ran = false;
            upcxx::future<> t = heap.copy(ga, gdst, n).then([&] { ran = true; });
            copies++;
            check("F5.then_deferred", !ran, "%s: a .then callback did not run inside copy() / then()", what);
            ok = waited("F5.then_deferred", t, what);
            check("F5.then_deferred", ok && ran && (!dst_here || count_wrong(dst_here, n, who, salt) == 0),
                  "%s: the callback ran in progress, bytes right", what);
            barrier();

            prepare(a, b, n, ++salt);
            upcxx::future<> of, sf;
            std::tie(of, sf) = heap.copy(ga, gdst, n, operation_cx::as_future() | source_cx::as_future());
            copies++;
            check("F5.source_deferred", !ready(of) && !ready(sf),
                  "%s: operation and source futures not ready at return", what);
            ok = waited("F5.source_deferred", upcxx::when_all(of, sf), what);
            check("F5.source_deferred", ok, "%s: both ready in progress", what);
            barrier();

            prepare(a, b, n, ++salt);
            upcxx::promise<> p;
            heap.copy(ga, gdst, n, operation_cx::as_promise(p));
            copies++;
            upcxx::future<> pf = p.finalize();
            check("F5.promise_deferred", !ready(pf), "%s: as_promise not fulfilled at return", what);
            ok = waited("F5.promise_deferred", pf, what);
            check("F5.promise_deferred", ok && (!dst_here || count_wrong(dst_here, n, who, salt) == 0),
                  "%s: bytes right once fulfilled", what);
            barrier();
#else
            // UPC++ >= 2023.3: as_defer_* never ready at return.
            prepare(a, b, n, ++salt);
            upcxx::future<> f = heap.copy(ga, gdst, n, operation_cx::as_defer_future());
            copies++;
            check("F5.defer_future", !ready(f), "%s: as_defer_future not ready when copy() returns", what);
            bool ok = waited("F5.defer_future", f, what);
            check("F5.defer_future", ok && (!dst_here || count_wrong(dst_here, n, who, salt) == 0),
                  "%s: bytes right once ready", what);
            barrier();

            prepare(a, b, n, ++salt);
            bool ran = false;
            upcxx::future<> t = heap.copy(ga, gdst, n, operation_cx::as_defer_future()).then([&] { ran = true; });
            copies++;
            check("F5.then_deferred", !ran, "%s: a .then on as_defer_future did not run inside copy() / then()", what);
            ok = waited("F5.then_deferred", t, what);
            check("F5.then_deferred", ok && ran, "%s: the callback ran in progress", what);
            barrier();

            prepare(a, b, n, ++salt);
            upcxx::promise<> p, ps;
            heap.copy(ga, gdst, n, operation_cx::as_defer_promise(p) | source_cx::as_defer_promise(ps));
            copies++;
            upcxx::future<> pf = p.finalize(), psf = ps.finalize();
            check("F5.defer_promise", !ready(pf) && !ready(psf),
                  "%s: as_defer_promise (operation, source) not fulfilled at return", what);
            ok = waited("F5.defer_promise", upcxx::when_all(pf, psf), what);
            check("F5.defer_promise", ok && (!dst_here || count_wrong(dst_here, n, who, salt) == 0),
                  "%s: bytes right once fulfilled", what);
            barrier();

            // Eager (explicit, and the default unless UPCXX_DEFER_COMPLETION): ready at return is
            // allowed, and then the bytes are there and the source is free.
            for (int form = 0; form < 2; form++) {
                const char *fname = form == 0 ? "as_eager_future" : "default";
                prepare(a, b, n, ++salt);
                upcxx::future<> of, sf;
                if (form == 0)
                    std::tie(of, sf) =
                        heap.copy(ga, gdst, n, operation_cx::as_eager_future() | source_cx::as_eager_future());
                else
                    std::tie(of, sf) = heap.copy(ga, gdst, n, operation_cx::as_future() | source_cx::as_future());
                copies++;
                const bool op_at_return = ready(of), src_at_return = ready(sf);
                long wrong_at_return = op_at_return && dst_here ? count_wrong(dst_here, n, who, salt) : 0;
                if (src_at_return) cudaMemset(a, 0, n);  // the source may be reused at once
#if UPCXX_DEFER_COMPLETION
                if (form == 1)
                    check("F5.default_deferred", !op_at_return && !src_at_return,
                          "%s (UPCXX_DEFER_COMPLETION=1): not ready at return", what);
#endif
                check("F5.eager", wrong_at_return == 0, "%s, %s: %s at return%s", what, fname,
                      op_at_return ? "ready" : "not ready", op_at_return ? ", and the bytes were there" : "");
                if (!src_at_return)
                    ok = waited("F5.eager", sf, what);
                else
                    ok = true;
                if (!src_at_return && ok) cudaMemset(a, 0, n);  // source complete: reuse it
                cudaDeviceSynchronize();
                ok = ok && waited("F5.eager", of, what);
                check("F5.eager_source", ok && (!dst_here || count_wrong(dst_here, n, who, salt) == 0),
                      "%s, %s: the source overwritten after source completion, the destination keeps the copied bytes",
                      what, fname);
                barrier();
            }
#endif
            // as_lpc: never run inside copy(), on the initiating persona.
            prepare(a, b, n, ++salt);
            bool lpc_ran = false;
            upcxx::persona *target = &upcxx::current_persona();
            bool right_persona = false;
            heap.copy(ga, gdst, n, operation_cx::as_lpc(*target, [&] {
                          lpc_ran = true;
                          right_persona = &upcxx::current_persona() == target;
                      }));
            copies++;
            check("F5.lpc_deferred", !lpc_ran, "%s: as_lpc did not run inside copy()", what);
            bool ok2 = copy_test::progress_until([&] { return lpc_ran; });
            check("F5.lpc_deferred", ok2 && right_persona && (!dst_here || count_wrong(dst_here, n, who, salt) == 0),
                  "%s: as_lpc ran in progress on the initiating persona, bytes right", what);
            barrier();
            const bool fast = !remote || mapped;  // my own heap is always mapped here
            path_is("F5.path", c0, fast ? copies : 0, fast ? 0 : copies, what);
        }
    }
}

// =================================================================================================
// F7: completion forms on the fast path.
static std::atomic<long> g_rpc_replies{0}, g_rpc_wrong{0}, g_rpc_misplaced{0};
#if COPY_HAS_REMOTE_CX
// At the target: are the bytes there, and is this the master persona in progress?
static void rpc_check_at_target(dptr dst, std::size_t n, int initiator, int salt) {
    const bool placed = &upcxx::current_persona() == &upcxx::master_persona() && dst.where() == upcxx::rank_me();
    long wrong = static_cast<long>(n);
    try {
        unsigned char *local = g_heap->from_global_ptr(dst).first;
        wrong = count_wrong(local, n, initiator, salt);
    } catch (...) {
    }
    upcxx::rpc_ff(
        initiator,
        [](long w, bool p) {
            g_rpc_wrong += w;
            g_rpc_misplaced += !p;
            g_rpc_replies++;
        },
        wrong, placed);
}
#endif

static void f7_completions(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    int salt = 70;
#if UPCXX_THREADMODE
    // A persona on another thread, progressing until told to stop (also when an exception leaves
    // this function): as_lpc targets it.
    struct progress_thread_t {
        std::atomic<upcxx::persona *> other{nullptr};
        std::atomic<bool> stop{false};
        std::thread t;
        progress_thread_t() {
            t = std::thread([this] {
                cudaSetDevice(gpu);
                upcxx::persona p2;
                upcxx::persona_scope scope(p2);
                other = &p2;
                while (!stop) upcxx::progress();
            });
            while (!other) std::this_thread::yield();
        }
        ~progress_thread_t() {
            stop = true;
            t.join();
        }
    } progress_thread;
    upcxx::persona &lpc_target = *progress_thread.other;
    const char *lpc_where = "another thread's persona";
#else
    upcxx::persona &lpc_target = upcxx::current_persona();
    const char *lpc_where = "the initiating persona";
#endif
    for (std::size_t n : {small, big}) {
        const dptr ga = heap.to_global_ptr(a), gb_next = heap.to_global_ptr(b, next);
        const unsigned char *peer_b = static_cast<const unsigned char *>(nvshmem_ptr(b, next));
        char what[96];
        auto c0 = heap.copies();
        std::size_t copies = 0;

        // as_promise: the bytes are at the destination when it is fulfilled.
        std::snprintf(what, sizeof what, "%s as_promise", sz(n));
        prepare(a, b, n, ++salt);
        upcxx::promise<> p;
        heap.copy(ga, gb_next, n, operation_cx::as_promise(p));
        copies++;
        bool ok = waited("F7.as_promise", p.finalize(), what);
        check("F7.as_promise", ok && (!peer_b || count_wrong(peer_b, n, me, salt) == 0),
              "%s: bytes at the destination when fulfilled", what);
        barrier();
        check("F7.as_promise", count_wrong(b, n, prev, salt) == 0, "%s: the previous PE's bytes here", what);

        // as_lpc to lpc_target (par: another thread's persona): runs there, once, after the bytes landed.
        std::snprintf(what, sizeof what, "%s as_lpc to %s", sz(n), lpc_where);
        prepare(a, b, n, ++salt);
        std::atomic<int> lpc_runs{0};
        std::atomic<bool> lpc_right_persona{false};
        std::atomic<long> lpc_wrong{-1};
        upcxx::persona *lpc_target_p = &lpc_target;
        heap.copy(ga, gb_next, n, operation_cx::as_lpc(lpc_target, [&, lpc_target_p, n, salt] {
                      lpc_right_persona = &upcxx::current_persona() == lpc_target_p;
                      lpc_wrong = peer_b ? count_wrong(peer_b, n, me, salt) : 0;
                      lpc_runs++;
                  }));
        copies++;
        ok = copy_test::progress_until([&] { return lpc_runs.load() > 0; });
        copy_test::progress_until([] { return false; }, 0.05);  // a second run would show now
        check("F7.as_lpc", ok && lpc_runs == 1 && lpc_right_persona && lpc_wrong == 0,
              "%s: ran %d time(s), on the target persona: %s, %ld wrong bytes then", what, lpc_runs.load(),
              lpc_right_persona ? "yes" : "no", lpc_wrong.load());
        barrier();

        // source_cx::as_future | operation_cx::as_future: after source completion the source is
        // overwritten; the destination keeps the copied bytes.
        std::snprintf(what, sizeof what, "%s source_cx::as_future | operation_cx::as_future", sz(n));
        prepare(a, b, n, ++salt);
        upcxx::future<> sf, of;
        std::tie(sf, of) = heap.copy(ga, gb_next, n, source_cx::as_future() | operation_cx::as_future());
        copies++;
        ok = waited("F7.source_cx", sf, what);
        cudaMemset(a, 0xee, n);
        cudaDeviceSynchronize();
        ok = ok && waited("F7.source_cx", of, what);
        barrier();
        check("F7.source_cx", ok && count_wrong(b, n, prev, salt) == 0,
              "%s: source overwritten after source completion, destination right", what);

        // as_promise (operation) | as_lpc (source) | as_future (operation): every one once.
        std::snprintf(what, sizeof what, "%s operation as_promise | source as_lpc | operation as_future", sz(n));
        prepare(a, b, n, ++salt);
        upcxx::promise<> p2;
        std::atomic<int> src_lpc_runs{0};
        upcxx::future<> of2 =
            heap.copy(ga, gb_next, n, operation_cx::as_promise(p2) | source_cx::as_lpc(lpc_target, [&] {
                                          src_lpc_runs++;
                                      }) | operation_cx::as_future());
        copies++;
        ok = waited("F7.combined", upcxx::when_all(of2, p2.finalize()), what) &&
             copy_test::progress_until([&] { return src_lpc_runs.load() > 0; });
        copy_test::progress_until([] { return false; }, 0.05);
        check("F7.combined", ok && src_lpc_runs == 1 && (!peer_b || count_wrong(peer_b, n, me, salt) == 0),
              "%s: all delivered, the source lpc once (%d), bytes right", what, src_lpc_runs.load());
        barrier();

#if COPY_HAS_REMOTE_CX
        // remote_cx::as_rpc: at the target, on its master persona, after the bytes landed.
        std::snprintf(what, sizeof what, "%s remote_cx::as_rpc", sz(n));
        prepare(a, b, n, ++salt);
        long replies0 = g_rpc_replies, wrong0 = g_rpc_wrong, misplaced0 = g_rpc_misplaced;
        heap.copy(ga, gb_next, n, remote_cx::as_rpc(rpc_check_at_target, gb_next, n, me, salt));
        copies++;
        ok = copy_test::progress_until([&] { return g_rpc_replies > replies0; });
        check("F7.as_rpc", ok && g_rpc_wrong == wrong0 && g_rpc_misplaced == misplaced0,
              "%s: ran at the target on its master persona (%s), %ld wrong bytes there", what,
              g_rpc_misplaced == misplaced0 ? "yes" : "no", static_cast<long>(g_rpc_wrong - wrong0));
        barrier();

        // op future | source future | as_rpc, and as_rpc | as_promise.
        std::snprintf(what, sizeof what, "%s operation_cx::as_future | source_cx::as_future | remote_cx::as_rpc",
                      sz(n));
        prepare(a, b, n, ++salt);
        replies0 = g_rpc_replies;
        wrong0 = g_rpc_wrong;
        std::tie(of, sf) = heap.copy(ga, gb_next, n,
                                     operation_cx::as_future() | source_cx::as_future() |
                                         remote_cx::as_rpc(rpc_check_at_target, gb_next, n, me, salt));
        copies++;
        ok = waited("F7.combined_rpc", upcxx::when_all(of, sf), what) &&
             copy_test::progress_until([&] { return g_rpc_replies > replies0; });
        check("F7.combined_rpc", ok && g_rpc_wrong == wrong0 && (!peer_b || count_wrong(peer_b, n, me, salt) == 0),
              "%s: all delivered, bytes right at the target when the RPC ran", what);
        barrier();
        prepare(a, b, n, ++salt);
        replies0 = g_rpc_replies;
        wrong0 = g_rpc_wrong;
        upcxx::promise<> p3;
        heap.copy(ga, gb_next, n,
                  remote_cx::as_rpc(rpc_check_at_target, gb_next, n, me, salt) | operation_cx::as_promise(p3));
        copies++;
        ok = waited("F7.combined_rpc", p3.finalize(), what) &&
             copy_test::progress_until([&] { return g_rpc_replies > replies0; });
        check("F7.combined_rpc", ok && g_rpc_wrong == wrong0,
              "%s remote_cx::as_rpc | operation_cx::as_promise: both delivered, bytes right", sz(n));
        barrier();
        copy_test::progress_until([] { return false; }, 0.05);
        check("F7.as_rpc_once", g_rpc_replies == static_cast<long>(3 * (n == small ? 1 : 2)),
              "every as_rpc ran once (%ld replies)", g_rpc_replies.load());
#else
        skip("F7.as_rpc", "UPC++ 2020.10: upcxx::copy has no remote_cx (it does not compile there)");
#endif
        path_is("F7.path", c0, mapped ? copies : 0, mapped ? 0 : copies, "the completion forms");
        barrier();
    }
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
            cudaLaunchHostFunc(s, sleep_host_fn, &sleep_ms);
            cudaMemsetAsync(a, 0x5a, n, s);
            const double t0 = copy_test::now();
            upcxx::future<> of, sf;
            if (form == 0)
                of = heap.copy_after(s, ga, gb_next, n);
            else
                std::tie(of, sf) =
                    heap.copy_after(s, ga, gb_next, n, operation_cx::as_future() | source_cx::as_future());
            const double took = copy_test::now() - t0;
            if (mapped && !forced)
                // Separate names for the two sizes: a copy waited for in the call would also wait
                // for the stream's work, which is a host synchronisation too.
                check(n == small ? "F8.no_host_sync_small" : "F8.no_host_sync", took < 0.1,
                      "%s returned after %.1f ms, before the stream's %d ms host function ended", what, took * 1e3,
                      sleep_ms);
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
// F2: the user's own device allocator; a global pointer made before update().
static void f2_own_allocator_and_old_pointers(nvshmem_heap &heap, [[maybe_unused]] unsigned char *a,
                                              [[maybe_unused]] unsigned char *b) {
    int salt = 20;
#if HAS_GPU_ALLOCATOR
    {
        const std::size_t n = 2 * MiB;
        auto own = upcxx::make_gpu_allocator<upcxx::cuda_device>(8 * MiB, gpu);  // collective
        dptr mine = own.allocate<unsigned char>(n);
        unsigned char *mine_local = own.local(mine);
        upcxx::dist_object<dptr> d(mine);
        const dptr peer_mine = d.fetch(next).wait();
        const dptr ga = heap.to_global_ptr(a), ga_next = heap.to_global_ptr(a, next),
                   gb_next = heap.to_global_ptr(b, next);

        // heap (next PE's) -> mine (this rank's own device memory): fast.
        fill(a, n, me, ++salt);
        cudaMemset(mine_local, 0, n);
        cudaDeviceSynchronize();
        barrier();
        auto c0 = heap.copies();
        bool ok = waited("F2.own_allocator", heap.copy(ga_next, mine, n), "next's heap -> my own allocator");
        check("F2.own_allocator", ok && count_wrong(mine_local, n, next, salt) == 0,
              "next PE's heap -> this rank's make_gpu_allocator memory: bytes right");
        path_is("F2.own_allocator_path", c0, mapped ? 1 : 0, mapped ? 0 : 1, "heap -> own allocator");
        barrier();
        // mine -> heap (next PE's), as memory_kind::any: fast.
        fill(mine_local, n, me, ++salt);
        cudaMemset(b, 0, n);
        cudaDeviceSynchronize();
        barrier();
        c0 = heap.copies();
        ok = waited("F2.own_allocator", heap.copy(aptr(mine), aptr(gb_next), n), "own allocator -> next's heap (any)");
        barrier();
        check("F2.own_allocator", ok && count_wrong(b, n, prev, salt) == 0,
              "this rank's own allocator -> next PE's heap (memory_kind::any): bytes right");
        path_is("F2.own_allocator_path", c0, mapped ? 1 : 0, mapped ? 0 : 1, "own allocator -> heap");
        // mine -> my own heap with completions.
        c0 = heap.copies();
        upcxx::future<> of, sf;
        std::tie(of, sf) = heap.copy(mine, ga, n, operation_cx::as_future() | source_cx::as_future());
        ok = waited("F2.own_allocator", upcxx::when_all(of, sf), "own allocator -> my heap");
        check("F2.own_allocator", ok && count_wrong(a, n, me, salt) == 0,
              "own allocator -> my heap, op|src futures: bytes right");
        path_is("F2.own_allocator_path", c0, forced ? 0 : 1, forced ? 1 : 0, "own allocator -> my own heap");
        barrier();
        // The next rank's own allocator: not this rank's private memory, the fallback.
        fill(a, n, me, ++salt);
        cudaMemset(mine_local, 0, n);
        cudaDeviceSynchronize();
        barrier();
        c0 = heap.copies();
        ok = waited("F2.peer_allocator", heap.copy(ga, peer_mine, n), "my heap -> next rank's own allocator");
        barrier();
        check("F2.peer_allocator", ok && count_wrong(mine_local, n, prev, salt) == 0,
              "my heap -> the next rank's own allocator: bytes right");
        path_is("F2.peer_allocator_path", c0, 0, 1, "heap -> another rank's own allocator");
        barrier();
        own.deallocate(mine);
        own.destroy();  // collective
    }
#else
    (void)salt;
    skip("F2.own_allocator", "UPC++ before 2022.3: one cuda_device per GPU per process, and the heap owns it");
#endif
    // A global pointer made before update() and the heap's growth, with memory mapped after.
    {
        const std::size_t n = 2 * MiB;
        unsigned char *x = static_cast<unsigned char *>(nvshmem_malloc(n));
        heap.update();
        const dptr old_next = heap.to_global_ptr(x, next);  // made before the growth
        void *grow = nvshmem_malloc(size_t(1) << 30);       // a new chunk under CUDA VMM
        unsigned char *y = static_cast<unsigned char *>(nvshmem_malloc(n));
        const std::size_t ext = heap.update();
        check("F2.old_pointer", x && grow && y && heap.segments() <= 1,
              "update() after 1 GiB more: extent %zu, %zu segment(s)", ext, heap.segments());
        if (x && y) {
            fill(x, n, me, ++salt);
            cudaMemset(y, 0, n);
            cudaDeviceSynchronize();
            barrier();
            auto c0 = heap.copies();
            bool ok =
                waited("F2.old_pointer", heap.copy(old_next, heap.to_global_ptr(y), n), "old pointer -> new memory");
            check("F2.old_pointer", ok && count_wrong(y, n, next, salt) == 0,
                  "a pointer made before update() -> memory mapped after: bytes right");
            fill(y, n, me, ++salt);
            barrier();
            ok = waited("F2.old_pointer", heap.copy(heap.to_global_ptr(y), old_next, n), "new memory -> old pointer");
            barrier();
            check("F2.old_pointer", ok && count_wrong(x, n, prev, salt) == 0,
                  "memory mapped after update() -> a pointer made before: bytes right");
            path_is("F2.old_pointer_path", c0, mapped ? 2 : 0, mapped ? 0 : 2, "old pointers");
            auto back = heap.from_global_ptr(old_next);
            check("F2.old_pointer", back.first == x && back.second == next,
                  "from_global_ptr of the old pointer: (x, next PE)");
        }
        barrier();
        nvshmem_free(y);
        nvshmem_free(grow);
        nvshmem_free(x);
    }
}

// =================================================================================================
// F4: a fast copy failing when it completes (test hook).
static void f4_failed_copy(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    // fail_fast_copies(n): the next n fast copies report a CUDA error when they complete and move
    // no bytes. It stands in for an asynchronous CUDA failure (an ECC error, a peer lost), which a
    // test cannot provoke safely.
    int salt = 40;
    const unsigned char *peer_b = static_cast<const unsigned char *>(nvshmem_ptr(b, next));
    if (!mapped || forced) {
        skip("F4",
             "the fast path is not taken here (NVSHMEM does not map the next PE, UPCXX_EXTRA_NVSHMEM_COPY=upcxx, or "
             "the public-API mode)");
        return;
    }
    for (std::size_t n : {small, big}) {
        const dptr ga = heap.to_global_ptr(a), gb_next = heap.to_global_ptr(b, next);
        char what[64];
        std::snprintf(what, sizeof what, "%s copy failing on completion", sz(n));
        prepare(a, b, n, ++salt);
        try {
            heap.check_copies();  // nothing pending
        } catch (const std::exception &e) {
            check("F4.failed_copy", false, "check_copies() before the test: %s", e.what());
        }
        upcxx::extra::detail::test_hooks::fail_fast_copies(1);
        upcxx::future<> f;
        bool threw = false;
        try {
            f = heap.copy(ga, gb_next, n);
        } catch (const std::exception &e) {
            threw = true;
            check("F4.failed_copy", false, "%s: copy() threw: %s", what, e.what());
        }
        if (threw) {
            barrier();
            continue;
        }
#if UPCXX_THREADMODE
        // Another thread copies meanwhile: none of its copies throws, its bytes are right.
        std::atomic<int> thread_errors{0};
        std::thread other([&] {
            cudaSetDevice(gpu);
            const dptr src = heap.to_global_ptr(a + n), dst = heap.to_global_ptr(b + n);
            for (int k = 0; k < 16; k++) {
                try {
                    if (!wait_for(heap.copy(src, dst, 4096), 30)) thread_errors++;
                } catch (...) {
                    thread_errors++;
                }
            }
        });
#endif
        bool ok = waited("F4.failed_copy", f, what);
        const long wrong_when_ready = peer_b ? count_wrong(peer_b, n, me, salt) : 0;
        check("F4.failed_copy", ok && wrong_when_ready == 0,
              "%s: its future became ready with the bytes right (%ld wrong then)", what, wrong_when_ready);
#if UPCXX_THREADMODE
        other.join();
        check("F4.concurrent", thread_errors == 0, "%s: 16 copies from another thread meanwhile: %d threw or timed out",
              what, thread_errors.load());
#endif
        std::string msg;
        bool thrown = false;
        try {
            heap.check_copies();
        } catch (const heap_error &e) {
            thrown = true;
            msg = e.what();
            check("F4.check_copies", e.status() == UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR,
                  "%s: check_copies() throws CUDA_ERROR: %s", what, e.what());
            check("F4.check_copies_errc", e.errc() == upcxx::extra::nvshmem_errc::cuda,
                  "%s: its errc() is nvshmem_errc::cuda (%d)", what, static_cast<int>(e.errc()));
        }
        if (!thrown) check("F4.check_copies", false, "%s: check_copies() did not throw", what);
        if (thrown)
            check("F4.check_copies_names_it", msg.find(std::to_string(n)) != std::string::npos,
                  "%s: the message names the failed copy by its %zu bytes", what, n);
        bool again = false;
        try {
            heap.check_copies();
        } catch (...) {
            again = true;
        }
        check("F4.check_copies_once", !again, "%s: a second check_copies() does not throw", what);
        // Afterwards: a small copy works, does not throw, and check_copies() stays quiet.
        bool later_ok = false;
        try {
            // A region no other copy writes: [cap - small, cap) of my a and b.
            fill(a + cap - small, small, me, ++salt);
            later_ok =
                wait_for(heap.copy(heap.to_global_ptr(a + cap - small), heap.to_global_ptr(b + cap - small), small),
                         30) &&
                count_wrong(b + cap - small, small, me, salt) == 0;
            heap.check_copies();
        } catch (const std::exception &e) {
            later_ok = false;
            check("F4.afterwards", false, "%s: a copy afterwards threw: %s", what, e.what());
        }
        check("F4.afterwards", later_ok, "%s: a copy afterwards works and check_copies() stays quiet", what);
        barrier();
    }
}

// =================================================================================================
// F6: 40 growths.
static void f6_growth(nvshmem_heap &heap, unsigned char *a) {
    upcxx_extra_nvshmem_heap_info_t info;
    const bool can_grow =
        upcxx_extra_nvshmem_heap_query(&info) == UPCXX_EXTRA_NVSHMEM_STATUS_OK && heap.extent() < info.size;
    const std::size_t chunk = can_grow ? 512 * MiB : 8 * MiB, n = MiB;
    if (!can_grow)
        skip("F6.growth", "the whole heap is mapped (no CUDA VMM): 40 allocations of 8 MiB + update() instead");
    const std::size_t extent0 = heap.extent();
    std::vector<void *> chunks;
    std::size_t max_segments = heap.segments();
    long wrong = 0, failed = 0;
    bool threw = false;
    const dptr ga = heap.to_global_ptr(a);
    for (int k = 0; k < 40; k++) {
        unsigned char *p = static_cast<unsigned char *>(nvshmem_malloc(chunk));
        int ok_here = p != nullptr, ok_all = upcxx::reduce_all(ok_here, upcxx::op_fast_min).wait();
        if (!ok_all) {
            if (p) nvshmem_free(p);
            check("F6.growth", false, "nvshmem_malloc(%zu) failed at growth %d", chunk, k);
            break;
        }
        chunks.push_back(p);
        try {
            heap.update();
            max_segments = std::max(max_segments, heap.segments());
            fill(a, n, me, 600 + k);
            if (!wait_for(heap.copy(ga, heap.to_global_ptr(p + chunk - n, next), n), 30)) failed++;
        } catch (const std::exception &e) {
            if (!threw) check("F6.growth", false, "growth %d: %s", k, e.what());
            threw = true;
        }
        barrier();
        wrong += count_wrong(p + chunk - n, n, prev, 600 + k);
    }
    check("F6.segments", max_segments <= 1, "%zu growths: at most %zu UPC++ device segment(s) (<= 1)", chunks.size(),
          max_segments);
    check("F6.newest_chunk", !threw && failed == 0 && wrong == 0 && chunks.size() == 40,
          "copies into the last MiB of the newest allocation of the next PE after each update(): %ld wrong bytes, %ld "
          "timeouts",
          wrong, failed);
    if (!chunks.empty()) {
        const std::size_t end =
            static_cast<std::size_t>(static_cast<char *>(chunks.back()) + chunk - static_cast<char *>(heap.base()));
        check("F6.extent", end <= heap.extent(),
              "extent %zu -> %zu bytes, covering the newest allocation (ends at offset %zu)%s", extent0, heap.extent(),
              end, can_grow ? "" : " (no growth: the heap is mapped whole)");
    }
    barrier();
    for (auto it = chunks.rbegin(); it != chunks.rend(); ++it) nvshmem_free(*it);
}

// =================================================================================================
// F3: the caller's current device is not the heap's.
static void f3_other_device(unsigned char *a, unsigned char *b) {
    const int ndev = copy_test::visible_gpus();
    const int want = upcxx::reduce_all(ndev >= 2 ? 1 : 0, upcxx::op_fast_min).wait();
    if (!want) {
        skip("F3.other_device",
             "needs 2 GPUs visible (the calling thread's current device set to the one that is not the heap's)");
        return;
    }
    const int other = (gpu + 1) % ndev;
    nvshmem_heap heap;  // fresh: its first copy runs with the other device current
    g_heap = &heap;
    int salt = 30;
    const dptr ga = heap.to_global_ptr(a), gb_next = heap.to_global_ptr(b, next);
    auto c0 = heap.copies();
    std::size_t copies = 0;
    for (int round = 0; round < 3; round++) {
        const int current = round == 1 ? gpu : other;
        prepare(a, b, big, ++salt);
        cudaSetDevice(current);
        std::vector<upcxx::future<>> fs;
        bool ok = true;
        try {
            for (int k = 0; k < 4; k++) fs.push_back(heap.copy(ga + k * (big / 4), gb_next + k * (big / 4), big / 4));
            copies += 4;
            fs.push_back(heap.copy(ga, gb_next + big, small));
            copies++;
            for (auto &f : fs) ok = ok && wait_for(f, 60);
        } catch (const std::exception &e) {
            ok = false;
            check("F3.other_device", false, "round %d: %s", round, e.what());
        }
        int now_dev = -1;
        cudaGetDevice(&now_dev);
        check("F3.device_kept", now_dev == current, "round %d: the caller's current device is still %d (%d)", round,
              current, now_dev);
        cudaSetDevice(gpu);
        barrier();
        check("F3.other_device", ok && count_wrong(b, big, prev, salt) == 0,
              "round %d, current device %d, heap's %d: 4 x 16 MiB copies in flight + 1 small, bytes right", round,
              current, gpu);
    }
    bool quiet = true;
    try {
        heap.check_copies();
    } catch (const std::exception &e) {
        quiet = false;
        check("F3.other_device", false, "check_copies: %s", e.what());
    }
    check("F3.other_device", quiet, "no copy failed later");
    path_is("F3.path", c0, mapped ? copies : 0, mapped ? 0 : copies, "copies with another device current");
    // copy_after(0, ...) with the other device current: after the work on THAT device's legacy
    // default stream (a host function that sleeps, then writes the host source), into this
    // rank's own heap.
    {
        static std::vector<unsigned char> host_src;
        host_src.assign(small, 0);
        prepare(a, b, small, ++salt);
        cudaSetDevice(other);
        static int ms = 300;
        static int fill_salt;
        fill_salt = salt;
        cudaLaunchHostFunc(
            0,
            [](void *) {
                usleep(static_cast<useconds_t>(ms) * 1000u);
                for (std::size_t i = 0; i < host_src.size(); i++) host_src[i] = copy_test::pattern(me, i, fill_salt);
            },
            nullptr);
        bool ok = false;
        try {
            ok = wait_for(heap.copy_after(0, host_src.data(), heap.to_global_ptr(b), small), 60);
        } catch (const std::exception &e) {
            check("F3.copy_after_legacy", false, "copy_after(0, ...): %s", e.what());
        }
        cudaDeviceSynchronize();
        cudaSetDevice(gpu);
        barrier();
        const long wrong = count_wrong(b, small, me, salt);
        check("F3.copy_after_legacy", ok && wrong == 0,
              "copy_after(0, ...) with device %d current (heap's %d): ordered after that device's legacy stream (%ld "
              "wrong bytes)",
              other, gpu, wrong);
    }
    heap.destroy();
    g_heap = nullptr;
}

// =================================================================================================
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
// F10: personas that go away with a fast copy in flight.
static void f10_personas(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    if (!mapped || forced) {
        skip("F10", "the fast path is not taken here (the next PE is not mapped, or every copy falls back)");
        return;
    }
    const dptr src = heap.to_global_ptr(a), dst = heap.to_global_ptr(b, next);
    int same_address = 0, completed = 0;
    const int rounds = 4;
    for (int round = 0; round < rounds; round++) {
        upcxx::persona *p = new upcxx::persona;
        const void *addr = p;
        {
            upcxx::persona_scope s(*p);
            (void)heap.copy(src, dst, small);  // its completion never runs: the persona goes
        }
        delete p;
        upcxx::persona *q = new upcxx::persona;
        same_address += static_cast<const void *>(q) == addr;
        bool ok = false;
        {
            upcxx::persona_scope s(*q);
            ok = wait_for(heap.copy(src, dst, small), 30);
        }
        completed += ok;
        delete q;
    }
    check("F10.persona_reuse", completed == rounds,
          "a new persona after one deleted with a copy in flight (%d of %d at the same address): %d of %d copies "
          "completed",
          same_address, rounds, completed, rounds);
#if UPCXX_THREADMODE
    int done = 0;
    for (int round = 0; round < rounds; round++) {
        std::thread t1([&] {
            cudaSetDevice(gpu);
            (void)heap.copy(src, dst, small);  // the thread exits without progress
        });
        t1.join();
        bool ok = false;
        std::thread t2([&] {
            cudaSetDevice(gpu);
            ok = wait_for(heap.copy(src, dst, small), 30);
        });
        t2.join();
        done += ok;
    }
    check("F10.thread_exit", done == rounds,
          "a thread's copy after another thread exited with one in flight: %d of %d completed", done, rounds);
#endif
    barrier();
}

// =================================================================================================
// F11 (par): upcxx::copy calls with no end in the heap, from a thread that exits: not waited for.
static void f11_untracked(unsigned char *a, unsigned char *b) {
#if UPCXX_THREADMODE
    nvshmem_heap heap;
    g_heap = &heap;
    hptr hg = upcxx::new_array<unsigned char>(64);
    std::vector<unsigned char> host(64, 7);
    const auto c0 = heap.copies();
    std::thread t([&] {
        cudaSetDevice(gpu);
        (void)heap.copy(host.data(), hg, 64);                                    // host -> host
        (void)heap.copy(heap.to_global_ptr(a), heap.to_global_ptr(b, next), 0);  // 0 elements
    });
    t.join();
    const auto c1 = heap.copies();
    check("F11.not_counted", c1.fast == c0.fast && c1.fallback == c0.fallback,
          "host -> host and 0-element copies counted in neither path (%zu fast, %zu fallback)", c1.fast - c0.fast,
          c1.fallback - c0.fallback);
    const double t0 = copy_test::now();
    std::string err;
    try {
        heap.destroy();
    } catch (const std::exception &e) {
        err = e.what();
    }
    const double took = copy_test::now() - t0;
    g_heap = nullptr;
    check("F11.destroy", err.empty() && took < 20, "destroy() after a thread that exited issued them: %.1f s%s%s", took,
          err.empty() ? "" : ": ", err.c_str());
    upcxx::delete_array(hg);
#else
    (void)a, (void)b;
    skip("F11", "threads issuing copies need the par threadmode");
#endif
}

// =================================================================================================
// F12: destroy() waits for the redo of a fast copy that failed after it was issued.
static void f12_redo_before_destroy(unsigned char *a, unsigned char *b) {
    if (!mapped || forced) {
        skip("F12", "the fast path is not taken here");
        return;
    }
    const int salt = 50;
    {
        nvshmem_heap heap;
        g_heap = &heap;
        prepare(a, b, big, salt);
        upcxx::future<> f;
        if (me == 0) {
            upcxx::extra::detail::test_hooks::fail_fast_copies(1);
            f = heap.copy(heap.to_global_ptr(a), heap.to_global_ptr(b, 1), big);
        }
        std::string err;
        try {
            heap.destroy();  // no progress before: the failure is found inside destroy()
        } catch (const std::exception &e) {
            err = e.what();
        }
        g_heap = nullptr;
        check("F12.destroy", err.empty(), "destroy() with a failed copy to redo: %s", err.empty() ? "ok" : err.c_str());
        if (me == 1) {
            const long wrong = count_wrong(b, big, 0, salt);
            check("F12.redo_landed", wrong == 0,
                  "rank 0's failed 64 MiB copy into this heap, redone through upcxx::copy: %ld wrong bytes when "
                  "destroy() returned",
                  wrong);
        }
        if (me == 0) check("F12.future", wait_for(f, 30), "the failed copy's future became ready");
        barrier();
    }
#if UPCXX_THREADMODE
    {
        nvshmem_heap heap;
        g_heap = &heap;
        prepare(a, b, small, salt + 1);
        if (me == 0) {
            std::thread t([&] {
                cudaSetDevice(gpu);
                upcxx::extra::detail::test_hooks::fail_fast_copies(1);
                (void)heap.copy(heap.to_global_ptr(a), heap.to_global_ptr(b, 1), small);
            });
            t.join();  // its persona never makes progress again: the copy cannot be redone
        }
        bool cuda = false;
        std::string err = "no exception";
        try {
            heap.destroy();
        } catch (const heap_error &e) {
            cuda = e.errc() == upcxx::extra::nvshmem_errc::cuda;
            err = e.what();
        }
        g_heap = nullptr;
        check("F12.unredone_reported", cuda,
              "destroy() with a failed copy that can no longer be redone throws errc cuda on every rank: %s",
              err.c_str());
        barrier();
    }
#endif
}

// =================================================================================================
// F13: 0 elements, exactly as upcxx::copy.
static void f13_zero_elements(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    const dptr base = heap.to_global_ptr(static_cast<unsigned char *>(heap.base()));
    // One past the heap. UPC++ 2023.9's debug codemode refuses to form a pointer past its
    // segment's last byte, and without CUDA VMM the segment ends where the heap does: there, the
    // last byte.
    std::ptrdiff_t past = static_cast<std::ptrdiff_t>(heap.extent());
#if !(defined(UPCXX_CODEMODE) && (UPCXX_CODEMODE + 0))
    const char *no_vmm = std::getenv("NVSHMEM_DISABLE_CUDA_VMM");
    if (no_vmm && *no_vmm && std::strcmp(no_vmm, "0") != 0) past -= 1;
#endif
    const dptr end = base + past;
    std::vector<unsigned char> host(16);
    const auto c0 = heap.copies();
    int errors = 0, readiness = 0;
    auto zero = [&](const char *what, auto &&heap_call, auto &&upcxx_call) {
        try {
            auto f1 = heap_call();
            auto f2 = upcxx_call();
            if (ready(f1) != ready(f2)) {
                readiness++;
                check("F13.future", false, "%s: heap.copy's future %s, upcxx::copy's %s", what,
                      ready(f1) ? "ready" : "not ready", ready(f2) ? "ready" : "not ready");
            }
            if (!wait_for(f1, 30) || !wait_for(f2, 30)) errors++;
        } catch (const std::exception &e) {
            errors++;
            check("F13.zero", false, "%s: %s", what, e.what());
        }
    };
    zero(
        "end of heap -> host", [&] { return heap.copy(end, host.data(), 0); },
        [&] { return upcxx::copy(end, host.data(), 0); });
    zero("heap -> end of heap", [&] { return heap.copy(base, end, 0); }, [&] { return upcxx::copy(base, end, 0); });
    const dptr ga = heap.to_global_ptr(a), gb = heap.to_global_ptr(b, next);
    zero("heap -> peer heap", [&] { return heap.copy(ga, gb, 0); }, [&] { return upcxx::copy(ga, gb, 0); });
    const auto c1 = heap.copies();
    check("F13.zero", errors == 0 && readiness == 0 && c1.fast == c0.fast && c1.fallback == c0.fallback,
          "0-element copies at and one past the heap's end: no error, futures as upcxx::copy's, none counted (%zu "
          "fast, %zu fallback)",
          c1.fast - c0.fast, c1.fallback - c0.fallback);
    barrier();
}

// =================================================================================================
// F14: a raw pointer into a peer's heap as NVSHMEM maps it here.
static void f14_peer_mapping(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    unsigned char *peer_b = static_cast<unsigned char *>(nvshmem_ptr(b, next));
    if (!peer_b || next == me) {
        skip("F14", "NVSHMEM does not map the next PE's heap here");
        return;
    }
    std::vector<unsigned char> host(small);
    const hptr hg = upcxx::new_array<unsigned char>(small);
    expect_error("F14.peer_mapping", UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, "to_global_ptr",
                 "a peer's mapping as the source", [&] { (void)heap.copy(peer_b + 8, hg, small); });
    expect_error("F14.peer_mapping", UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, "to_global_ptr",
                 "a peer's mapping as the destination", [&] { (void)heap.copy(heap.to_global_ptr(a), peer_b, small); });
    upcxx::delete_array(hg);
    barrier();
}

// =================================================================================================
// F15: fork().
static void f15_fork(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    const dptr ga = heap.to_global_ptr(a), gb = heap.to_global_ptr(b, next);
    std::vector<unsigned char> host(64);
    const hptr hg = upcxx::new_array<unsigned char>(64);
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        // The child: every call must throw errc forked before touching CUDA or UPC++.
        int wrong = 0;
        auto expect_forked = [&](auto &&call) {
            try {
                call();
                wrong++;
            } catch (const heap_error &e) {
                if (e.errc() != upcxx::extra::nvshmem_errc::forked) wrong++;
            } catch (...) {
                wrong++;
            }
        };
        expect_forked([&] { (void)heap.copy(ga, gb, small); });
        expect_forked([&] { (void)heap.copy(ga, gb, 0); });
        expect_forked([&] { (void)heap.copy_after(0, ga, gb, small); });
        expect_forked([&] { (void)heap.copy_after(0, host.data(), hg, 64); });
        expect_forked([&] { (void)heap.update(); });
        expect_forked([&] { heap.check_copies(); });
        _exit(wrong);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    check("F15.fork", WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "in a fork() child, 4 copies (fast, 0 elements, copy_after of device and of host memory), update() and "
          "check_copies() threw errc forked (%d did not)",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    // destroy(), and the destructor of a heap moved into the child's scope: quiet, no abort.
    for (const bool by_destroy : {true, false}) {
        int err[2] = {-1, -1};
        if (pipe(err) != 0) {
            check("F15.fork_destroy", false, "pipe() failed");
            break;
        }
        std::fflush(stdout);
        const pid_t c = fork();
        if (c == 0) {
            dup2(err[1], 2);
            close(err[0]);
            if (by_destroy) {
                heap.destroy();
                _exit(heap.is_active() ? 3 : 0);
            }
            {
                nvshmem_heap moved(std::move(heap));  // its destructor runs here, in the child
            }
            _exit(heap.is_active() ? 3 : 0);
        }
        close(err[1]);
        std::string said;
        char buf[512];
        for (ssize_t r; (r = read(err[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(r));
        close(err[0]);
        int st = -1;
        waitpid(c, &st, 0);
        check("F15.fork_destroy", WIFEXITED(st) && WEXITSTATUS(st) == 0 && said.empty(),
              "in a fork() child, %s: exit status %d%s, stderr \"%s\"",
              by_destroy ? "heap.destroy()" : "the destructor of the heap moved into the child",
              WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? " (killed by a signal)" : "", said.c_str());
    }
    check("F15.parent_heap", heap.is_active(), "the parent's heap is still active after its children");
    upcxx::delete_array(hg);
    barrier();
}

// =================================================================================================
// F18: upcxx::discharge() after a copy with a remote completion.
static void f18_discharge(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
#if COPY_HAS_REMOTE_CX
    const dptr ga = heap.to_global_ptr(a), gb_next = heap.to_global_ptr(b, next);
    for (std::size_t n : {std::size_t(64), small, big}) {
        const int salt = 180 + static_cast<int>(n % 7);
        prepare(a, b, n, salt);
        const long replies0 = g_rpc_replies, wrong0 = g_rpc_wrong;
        heap.copy(ga, gb_next, n, remote_cx::as_rpc(rpc_check_at_target, gb_next, n, me, salt));
        // What upcxx::discharge() does, with a deadline: internal-level progress only.
        const double end = copy_test::now() + 60;
        while (upcxx::progress_required() && copy_test::now() < end) upcxx::progress(upcxx::progress_level::internal);
        const bool discharged = !upcxx::progress_required();
        if (discharged) upcxx::discharge();  // returns at once now
        check("F18.discharge", discharged,
              "%zu B with remote_cx::as_rpc: internal-level progress alone discharged it (progress_required() %d)", n,
              static_cast<int>(upcxx::progress_required()));
        const bool ran = copy_test::progress_until([&] { return g_rpc_replies > replies0; });
        check("F18.rpc", ran && g_rpc_wrong == wrong0, "%zu B: the RPC ran at the target (%s), %ld wrong bytes there",
              n, ran ? "yes" : "no", static_cast<long>(g_rpc_wrong - wrong0));
        barrier();
    }
#else
    (void)heap, (void)a, (void)b;
    skip("F18", "upcxx::copy has no remote_cx in this UPC++ release");
#endif
}

// =================================================================================================
// F19: a raw range that runs into a heap.
static void f19_raw_ranges(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    const upcxx_extra_nvshmem_status_t INV = UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT;
    const std::size_t half = 65536, n = 2 * half;
    unsigned char *below = static_cast<unsigned char *>(heap.base()) - half;  // [base - 64 KiB, base + 64 KiB)
    const hptr hg = upcxx::new_array<unsigned char>(n);
    std::memset(hg.local(), 0x33, n);
    cudaMemset(b, 0, n);
    cudaDeviceSynchronize();
    expect_error("F19.raw_range", INV, "to_global_ptr", "heap.copy(raw range into the heap, UPC++ host gp)",
                 [&] { (void)heap.copy(below, hg, n); });
    expect_error("F19.raw_range", INV, "to_global_ptr", "heap.copy(UPC++ host gp, raw range into the heap)",
                 [&] { (void)heap.copy(hg, below, n); });
    expect_error("F19.raw_range", INV, "to_global_ptr", "heap.copy(raw range into the heap, my heap gp)",
                 [&] { (void)heap.copy(static_cast<const unsigned char *>(below), heap.to_global_ptr(b), n); });
    expect_error("F19.raw_range", INV, "heap offset 0", "the message names the first heap byte of the range",
                 [&] { (void)heap.copy(below, hg, half + 1); });
    check("F19.nothing_copied",
          count_not(b, n, 0) == 0 && count_not(static_cast<unsigned char *>(hg.local()), n, 0x33) == 0,
          "the refused copies wrote nothing");
    (void)a;
    unsigned char *peer_b = static_cast<unsigned char *>(nvshmem_ptr(b, next));
    if (peer_b && next != me && peer_b != b) {
        expect_error("F19.peer_range", INV, "to_global_ptr", "a raw range that runs into a peer's mapping",
                     [&] { (void)heap.copy(peer_b - 64, hg, 128); });
        expect_error("F19.peer_range", INV, "to_global_ptr", "a raw destination range into a peer's mapping",
                     [&] { (void)heap.copy(hg, peer_b - 64, 128); });
    }
    upcxx::delete_array(hg);
    barrier();
}

// =================================================================================================
// F22-F25: the stream operations.
static const std::size_t so_n = 1 * MiB;
static const std::size_t so_off = 96 * MiB;  // a and b: [so_off, so_off + 2 so_n) is theirs

// The streams to try: 0, legacy, per-thread, a created one (made and destroyed by the caller).
struct named_stream {
    const char *name;
    cudaStream_t s;
};

// One ordering case on `s`: slow work writes the source, the copy, then a read of the destination
// queued on s; waits through after(s) (never cudaStreamSynchronize: a copy that is upcxx::copy
// needs progress before s can go on). `copy` issues the copy and returns a future of it. Host
// memory (`host_mem`) is written and read by host functions on s, device memory by CUDA copies.
struct so_host_op {
    unsigned char *to;
    const unsigned char *from;  // nullptr: fill `to` with 0x5a
};
static void CUDART_CB so_host_fn(void *arg) {
    const so_host_op *op = static_cast<const so_host_op *>(arg);
    if (op->from)
        std::memcpy(op->to, op->from, so_n);
    else
        std::memset(op->to, 0x5a, so_n);
}
template <class Copy>
static void so_case(nvshmem_heap &heap, const char *name, cudaStream_t s, unsigned char *src, unsigned char *dst_local,
                    bool host_mem, bool expect_fast, Copy copy) {
    static int ms = 150;
    static so_host_op fill_op, read_op;
    unsigned char *check_buf = nullptr;
    if (cudaMallocHost(reinterpret_cast<void **>(&check_buf), so_n) != cudaSuccess) {
        check("F22.setup", false, "%s: cudaMallocHost failed", name);
        return;
    }
    std::memset(check_buf, 0, so_n);
    if (host_mem) {
        std::memset(src, 0, so_n);
        std::memset(dst_local, 0, so_n);
    } else {
        cudaMemset(src, 0, so_n);
        cudaMemset(dst_local, 0, so_n);
        cudaDeviceSynchronize();
    }
    cudaLaunchHostFunc(s, sleep_host_fn, &ms);
    fill_op = so_host_op{src, nullptr};
    if (host_mem)
        cudaLaunchHostFunc(s, so_host_fn, &fill_op);
    else
        cudaMemsetAsync(src, 0x5a, so_n, s);
    const auto t0 = copy_test::now();
    upcxx::future<> f = copy();
    const double call_s = copy_test::now() - t0;
    read_op = so_host_op{check_buf, dst_local};
    if (host_mem)
        cudaLaunchHostFunc(s, so_host_fn, &read_op);
    else
        cudaMemcpyAsync(check_buf, dst_local, so_n, cudaMemcpyDefault, s);
    const bool done = waited("F22.wait", heap.after(s), name) && waited("F22.wait", f, name);
    const long wrong = count_not(check_buf, so_n, 0x5a);
    check("F22.order", done && wrong == 0, "%s: the read queued after copy_on_stream saw %ld of %zu bytes wrong", name,
          wrong, so_n);
    if (expect_fast)
        check("F22.no_host_wait", call_s < 0.1,
              "%s: copy_on_stream returned in %.3f s (the stream's 150 ms not waited for)", name, call_s);
    cudaFreeHost(check_buf);
}

static void f22_copy_on_stream(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    unsigned char *src = a + so_off, *dst = b + so_off;
    const dptr gs = heap.to_global_ptr(src), gd = heap.to_global_ptr(dst);
    cudaStream_t created = nullptr;
    cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking);
    const named_stream streams[] = {{"stream 0", nullptr},
                                    {"cudaStreamLegacy", cudaStreamLegacy},
                                    {"cudaStreamPerThread", cudaStreamPerThread},
                                    {"a created stream", created}};
    const auto c0 = heap.copies();
    for (const named_stream &ns : streams)
        so_case(heap, ns.name, ns.s, src, dst, false, !forced, [&] { return heap.copy_on_stream(ns.s, gs, gd, so_n); });
    path_is("F22.path", c0, 4, 0, "4 copy_on_stream copies within my heap");
    // Completion forms.
    so_case(heap, "as_promise", created, src, dst, false, !forced, [&] {
        upcxx::promise<> p;
        heap.copy_on_stream(created, gs, gd, so_n, operation_cx::as_promise(p));
        return p.finalize();
    });
    so_case(heap, "as_lpc", created, src, dst, false, !forced, [&] {
        auto p = std::make_shared<upcxx::promise<>>();
        heap.copy_on_stream(created, gs, gd, so_n,
                            operation_cx::as_lpc(upcxx::current_persona(), [p] { p->fulfill_anonymous(1); }));
        return p->get_future();
    });
    so_case(heap, "source_cx::as_future | operation_cx::as_future", created, src, dst, false, !forced, [&] {
        upcxx::future<> sf, of;
        std::tie(sf, of) =
            heap.copy_on_stream(created, gs, gd, so_n, source_cx::as_future() | operation_cx::as_future());
        return upcxx::when_all(sf, of);
    });
    // A copy that is upcxx::copy: UPC++ host global pointers at both ends; the stream waits on the
    // GPU for its operation completion.
    const hptr hs = upcxx::new_array<unsigned char>(so_n), hd = upcxx::new_array<unsigned char>(so_n);
    so_case(heap, "upcxx::copy between host global pointers", created, hs.local(), hd.local(), true, false,
            [&] { return heap.copy_on_stream(created, hs, hd, so_n); });
    // Two such copies back to back, the second reading what the first wrote: the second call waits
    // for the stream's earlier work, which waits on the GPU for the first copy's completion, which
    // needs progress. Naive: cudaStreamSynchronize there (a deadlock).
    {
        const hptr h2 = upcxx::new_array<unsigned char>(so_n);
        std::memset(hs.local(), 0x77, so_n);
        std::memset(hd.local(), 0, so_n);
        std::memset(h2.local(), 0, so_n);
        upcxx::future<> f1 = heap.copy_on_stream(created, hs, hd, so_n);
        upcxx::future<> f2 = heap.copy_on_stream(created, hd, h2, so_n);
        const bool done = waited("F22.back_to_back", upcxx::when_all(f1, f2, heap.after(created)),
                                 "two upcxx::copy copies on one stream");
        check("F22.back_to_back", done && count_not(h2.local(), so_n, 0x77) == 0,
              "two upcxx::copy copies back to back on one stream, the second reading the first's destination: "
              "%ld wrong bytes",
              count_not(h2.local(), so_n, 0x77));
        upcxx::delete_array(h2);
    }
    upcxx::delete_array(hs);
    upcxx::delete_array(hd);
#if COPY_HAS_REMOTE_CX
    // remote_cx::as_rpc into the next PE's heap, on the stream: the RPC finds the bytes there.
    {
        const int salt = 220;
        prepare(a, b, so_n, salt);
        const long replies0 = g_rpc_replies, wrong0 = g_rpc_wrong;
        const dptr gb_next = heap.to_global_ptr(b, next);
        heap.copy_on_stream(created, heap.to_global_ptr(a), gb_next, so_n,
                            remote_cx::as_rpc(rpc_check_at_target, gb_next, so_n, me, salt));
        const bool ran = copy_test::progress_until([&] { return g_rpc_replies > replies0; });
        check("F22.as_rpc", ran && g_rpc_wrong == wrong0, "copy_on_stream with remote_cx::as_rpc: ran (%s), %ld wrong",
              ran ? "yes" : "no", static_cast<long>(g_rpc_wrong - wrong0));
        barrier();
    }
#endif
    // A stream of the other GPU (2 GPUs): the copy runs on the heap's stream between two events.
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    if (ndev >= 2) {
        const int other = (heap.device() + 1) % ndev;
        cudaStream_t foreign = nullptr;
        cudaSetDevice(other);
        cudaStreamCreateWithFlags(&foreign, cudaStreamNonBlocking);
        so_case(heap, "a stream of the other GPU", foreign, src, dst, false, !forced,
                [&] { return heap.copy_on_stream(foreign, gs, gd, so_n); });
        cudaStreamDestroy(foreign);
        cudaSetDevice(heap.device());
    } else {
        skip("F22.other_device", "needs 2 GPUs visible");
    }
    cudaStreamDestroy(created);
    barrier();
}

static void f23_after(nvshmem_heap &heap) {
    // The public-API mode has no UPC++ internal to complete later: after() waits on the host.
    const bool host_waits = !nvshmem_heap::fast_copies();
    cudaStream_t created = nullptr;
    cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking);
    static int ms = 300;
    const named_stream streams[] = {{"stream 0", nullptr},
                                    {"cudaStreamLegacy", cudaStreamLegacy},
                                    {"cudaStreamPerThread", cudaStreamPerThread},
                                    {"a created stream", created}};
    for (const named_stream &ns : streams) {
        cudaLaunchHostFunc(ns.s, sleep_host_fn, &ms);
        upcxx::future<> f = heap.after(ns.s);
        const bool early = ready(f);
        copy_test::progress_until([] { return false; }, 0.1);
        const bool mid = ready(f);
        const bool done = waited("F23.ready", f, ns.name);
        check("F23.after", (host_waits || (!early && !mid)) && done,
              "%s: after() not ready in the call (%d), nor 100 ms into the 300 ms (%d), then ready (%d)", ns.name,
              early, mid, done);
    }
    // Completion forms, never delivered inside the call.
    cudaLaunchHostFunc(created, sleep_host_fn, &ms);
    upcxx::promise<> p;
    heap.after(created, operation_cx::as_promise(p));
    std::atomic<int> lpc_runs{0};
    heap.after(created, operation_cx::as_lpc(upcxx::current_persona(), [&] { lpc_runs++; }));
    const bool lpc_early = lpc_runs.load() != 0;
    upcxx::future<> f2 = heap.after(created, operation_cx::as_future());
    bool ok = waited("F23.forms", p.finalize(), "as_promise") && waited("F23.forms", f2, "as_future") &&
              copy_test::progress_until([&] { return lpc_runs.load() == 1; });
    check("F23.forms", ok && (host_waits || !lpc_early) && lpc_runs.load() == 1,
          "as_promise, as_lpc (once, not in the call), as_future");
#if COPY_HAS_EAGER
    upcxx::future<> fe = heap.after(created, operation_cx::as_eager_future());
    upcxx::future<> fd = heap.after(created, operation_cx::as_defer_future());
    check("F23.eager",
          !ready(fd) && waited("F23.eager", fe, "as_eager_future") && waited("F23.eager", fd, "as_defer_future"),
          "as_eager_future and as_defer_future become ready");
#endif
    // A CUDA error of the stream's work (stand-in): after() is ready, check_copies() says so.
    const auto fail_copies = reinterpret_cast<standin_fail_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_fail_next_copies"));
    if (fail_copies) {
        std::vector<unsigned char> x(64), y(64);
        try {
            heap.check_copies();
        } catch (...) {
        }
        fail_copies(1);
        cudaMemcpyAsync(y.data(), x.data(), 64, cudaMemcpyDefault, created);
        bool ready = false;
        std::string said;
        try {
            ready = waited("F23.error", heap.after(created), "after() of a failed copy");
            heap.check_copies();
        } catch (const heap_error &e) {
            said = e.what();
            ready = ready || host_waits;  // the public-API mode: the host's wait in the call throws
        }
        check("F23.error",
              ready && (said.find("before after()") != std::string::npos ||
                        said.find("nvshmem_heap::after") != std::string::npos),
              "a failed copy on the stream: after() ready, check_copies(): %s",
              said.empty() ? "(nothing)" : said.c_str());
    } else {
        skip("F23.error", "the CUDA stand-in's failure control (a GPU cannot fail a copy safely)");
    }
#if UPCXX_THREADMODE
    // A thread with its own persona: its after() completes at its own progress.
    bool thread_ok = false;
    std::thread t([&] {
        cudaSetDevice(gpu);
        cudaLaunchHostFunc(cudaStreamPerThread, sleep_host_fn, &ms);
        upcxx::future<> f = heap.after(cudaStreamPerThread);
        thread_ok = (host_waits || !ready(f)) && wait_for(f, 60);
    });
    t.join();
    check("F23.thread", thread_ok, "after() from another thread, on its per-thread stream, completed at its progress");
#endif
    cudaStreamDestroy(created);
    barrier();
}

static void f24_capture(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const dptr gs = heap.to_global_ptr(a + so_off), gd = heap.to_global_ptr(b + so_off);
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        skip("F24", "cudaStreamBeginCapture failed");
        cudaStreamDestroy(s);
        return;
    }
    auto refused = [&](const char *what, auto &&call) {
        std::string said = "no exception";
        bool ok = false;
        try {
            call();
        } catch (const heap_error &e) {
            ok = e.errc() == upcxx::extra::nvshmem_errc::stream_capture;
            said = e.what();
        }
        check("F24.refused", ok, "%s on a capturing stream: errc stream_capture: %s", what, said.c_str());
    };
    const auto c0 = heap.copies();
    refused("copy_on_stream", [&] { (void)heap.copy_on_stream(s, gs, gd, 64); });
    refused("after", [&] { (void)heap.after(s); });
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(s, &g);
    check("F24.end", e == cudaSuccess && heap.copies().fast == c0.fast && heap.copies().fallback == c0.fallback,
          "the capture ends cleanly (%s), nothing counted", cudaGetErrorString(e));
    if (g) cudaGraphDestroy(g);
    cudaStreamDestroy(s);
}

static void f25_failed_stream_copy(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    if (!mapped || forced) {
        skip("F25", "the fast path is not taken here");
        return;
    }
    try {
        heap.check_copies();
    } catch (...) {
    }
    const int salt = 250;
    prepare(a + so_off, b + so_off, so_n, salt);
    upcxx::extra::detail::test_hooks::fail_fast_copies(1);
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const bool done = waited(
        "F25.redone", heap.copy_on_stream(s, heap.to_global_ptr(a + so_off), heap.to_global_ptr(b + so_off), so_n),
        "a failed copy_on_stream");
    std::string said;
    try {
        heap.check_copies();
    } catch (const heap_error &e) {
        said = e.what();
    }
    check("F25.redone",
          done && count_wrong(b + so_off, so_n, me, salt) == 0 && said.find("copy_on_stream") != std::string::npos,
          "a copy_on_stream CUDA failed: bytes right once complete (%ld wrong), check_copies(): %s",
          count_wrong(b + so_off, so_n, me, salt), said.empty() ? "(nothing)" : said.c_str());
    cudaStreamDestroy(s);
    barrier();
}

// =================================================================================================
// F20, F21: failed batch launches (the CUDA stand-in's controls).
// The stand-in's failure control `name` (standin_control.h) when batched fast copies run here;
// else nullptr, and group `group` says it is skipped.
static standin_fail_fn batched_standin_control(const char *group, const char *name) {
    const auto fn = reinterpret_cast<standin_fail_fn>(dlsym(RTLD_DEFAULT, name));
    const char *knob = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY");
    if (fn && mapped && !forced && !(knob && std::string(knob) == "unbatched")) return fn;
    skip(group, "needs the CUDA stand-in's failure controls and batched fast copies");
    return nullptr;
}

static void f20_refused_launch(unsigned char *a, unsigned char *b) {
    const standin_fail_fn fail_launches = batched_standin_control("F20", "uxn_standin_fail_next_launches");
    if (!fail_launches) return;
    nvshmem_heap heap;
    g_heap = &heap;
    const int salt = 200;
    prepare(a, b, small, salt);
    const std::size_t limit = heap.copy_batch_bytes();
    fail_launches(1);
    std::vector<upcxx::future<>> fs;
    for (std::size_t i = 0; i < 16; i++)
        fs.push_back(heap.copy(heap.to_global_ptr(a + i * 256), heap.to_global_ptr(b + i * 256, next), 256));
    bool ok = true;
    for (auto &f : fs) ok = waited("F20.complete", f, "a copy of the refused batch") && ok;
    barrier();
    check("F20.bytes", ok && count_wrong(b, 16 * 256, prev, salt) == 0, "the refused batch's 16 copies landed");
    check("F20.batch_bytes", limit > 0 && heap.copy_batch_bytes() == 0,
          "copy_batch_bytes() was %zu, is %zu once the launch was refused (batching off)", limit,
          heap.copy_batch_bytes());
    std::string said;
    try {
        heap.check_copies();
    } catch (const heap_error &e) {
        said = e.what();
    }
    check("F20.check_copies", said.find("batching is off") != std::string::npos, "check_copies(): %s",
          said.empty() ? "(nothing)" : said.c_str());
    const auto c0 = heap.copies();
    ok = waited("F20.after", heap.copy(heap.to_global_ptr(a), heap.to_global_ptr(b, next), 64), "a copy after");
    check("F20.after", ok && heap.copies().batched == c0.batched, "a small copy after it is not batched");
    barrier();
    heap.destroy();
    g_heap = nullptr;
}

static void f21_failed_launch_then_thread(unsigned char *a, unsigned char *b) {
#if UPCXX_THREADMODE
    const standin_fail_fn fail_copies = batched_standin_control("F21", "uxn_standin_fail_next_copies");
    if (!fail_copies) return;
    nvshmem_heap heap;
    g_heap = &heap;
    const int salt = 210;
    prepare(a, b, small, salt);
    bool ok = true;
    if (me == 0) {
        fail_copies(1);  // the batch's launch fails when it runs
        ok = waited("F21.redone", heap.copy(heap.to_global_ptr(a), heap.to_global_ptr(b, 1), 512), "the failed batch");
        try {
            heap.check_copies();
            ok = false;  // the failure must have been seen
        } catch (const heap_error &) {
        }
        std::thread t([&] {
            cudaSetDevice(gpu);
            for (std::size_t i = 1; i <= 4; i++)
                (void)heap.copy(heap.to_global_ptr(a + i * 512), heap.to_global_ptr(b + i * 512, 1), 512);
        });
        t.join();  // its persona makes no progress again; its copies are good
    }
    std::string err;
    try {
        heap.destroy();
    } catch (const std::exception &e) {
        err = e.what();
    }
    g_heap = nullptr;
    check("F21.destroy", ok && err.empty(),
          "a batch failed and redone, then 4 good copies from a thread that exited: destroy() %s",
          err.empty() ? "succeeded" : err.c_str());
    if (me == 1)
        check("F21.bytes", count_wrong(b, 5 * 512, 0, salt) == 0, "the redone copy and the 4 good ones landed");
    barrier();
#else
    (void)a, (void)b;
    skip("F21", "threads issuing copies need the par threadmode");
#endif
}

// =================================================================================================
// F16: batched small copies.
static void f16_batching(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    constexpr std::size_t W = 300, slot = 65536 + 64;  // every copy has its own slot
    const std::size_t sizes[] = {1, 8, 13, 64, 255, 4096, 4099, 65536 + 3};
    const std::size_t n_sizes = sizeof(sizes) / sizeof(sizes[0]);
    auto size_of = [&](std::size_t i) { return sizes[i % n_sizes]; };
    auto src_off = [&](std::size_t i) { return i * slot + i % 3; };
    auto dst_off = [&](std::size_t i) { return i * slot + i % 5; };
    const std::size_t region = W * slot;  // b: puts land in [0, region), gets in [region, 2 region)
    const int salt = 16;
    fill(a, region, me, salt);
    cudaMemset(b, 0, 2 * region);
    cudaDeviceSynchronize();
    barrier();
    const char *knob = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY");
    const char *bytes_knob = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES");
    // The copies the policy batches (docs/copy.md: at most UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES).
    const std::size_t limit =
        bytes_knob ? std::strtoull(bytes_knob, nullptr, 10) : upcxx::extra::detail::copy_policy::default_batch_bytes;
    const bool batching = mapped && !forced && !(knob && std::string(knob) == "unbatched") && limit > 0;
    std::size_t expect_batched = 0;
    for (std::size_t i = 0; batching && i < W; i++) expect_batched += size_of(i) <= limit ? 2 : 0;
    using launches_fn = long (*)();
    const auto launches = reinterpret_cast<launches_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_batch_launches"));
    const long l0 = launches ? launches() : 0;
    const auto c0 = heap.copies();
    const dptr ga = heap.to_global_ptr(a), ga_next = heap.to_global_ptr(a, next);
    const dptr gb = heap.to_global_ptr(b), gb_next = heap.to_global_ptr(b, next);
    std::vector<upcxx::future<>> futures;
    upcxx::promise<> all;
    for (std::size_t i = 0; i < W; i++) {
        if (i % 2)
            futures.push_back(heap.copy(ga + src_off(i), gb_next + dst_off(i), size_of(i)));
        else
            heap.copy(ga + src_off(i), gb_next + dst_off(i), size_of(i), upcxx::operation_cx::as_promise(all));
        futures.push_back(heap.copy(ga_next + src_off(i), gb + region + dst_off(i), size_of(i)));
    }
    bool complete = waited("F16.complete", all.finalize(), "the promise of 150 puts");
    for (auto &f : futures) complete = complete && waited("F16.complete", f, "a future of a batched copy");
    const auto c1 = heap.copies();
    const long l1 = launches ? launches() : 0;
    barrier();  // the next PE's puts into my b have completed
    std::vector<unsigned char> got(2 * region);
    cudaMemcpy(got.data(), b, 2 * region, cudaMemcpyDefault);
    long wrong_put = 0, wrong_get = 0;
    for (std::size_t i = 0; i < W; i++)
        for (std::size_t j = 0; j < size_of(i); j++) {
            wrong_put += got[dst_off(i) + j] != copy_test::pattern(prev, src_off(i) + j, salt);
            wrong_get += got[region + dst_off(i) + j] != copy_test::pattern(next, src_off(i) + j, salt);
        }
    check("F16.bytes", complete && wrong_put == 0 && wrong_get == 0,
          "%zu puts and %zu gets of 1 B to 64 KiB + 3 at odd offsets: %ld wrong bytes put here, %ld got", W, W,
          wrong_put, wrong_get);
    if (!mapped || forced) {
        path_is("F16.path", c0, 0, 2 * W, "600 small copies");
    } else {
        check("F16.path", c1.fast - c0.fast == 2 * W && c1.batched - c0.batched == expect_batched,
              "600 small copies: %zu fast, %zu of them batched (expected %zu, batching %s)", c1.fast - c0.fast,
              c1.batched - c0.batched, expect_batched, batching ? "on" : "off");
    }
    // set_copy_batch_bytes(0): the next small copy is not batched; then the old limit again.
    const std::size_t keep = heap.copy_batch_bytes();
    const std::size_t policy_limit = knob && std::string(knob) == "unbatched" ? 0 : limit;
    check("F16.batch_bytes", keep == policy_limit, "copy_batch_bytes() is %zu (the environment's %zu)", keep,
          policy_limit);
    heap.set_copy_batch_bytes(0);
    const auto c2 = heap.copies();
    bool one = waited("F16.set_batch_bytes", heap.copy(ga, gb_next, 8), "an 8-byte copy with batching set off");
    const auto c3 = heap.copies();
    heap.set_copy_batch_bytes(keep);
    check("F16.set_batch_bytes", one && c3.batched == c2.batched && heap.copy_batch_bytes() == keep,
          "after set_copy_batch_bytes(0) an 8-byte copy is not batched (%zu batched), the limit restored (%zu)",
          c3.batched - c2.batched, heap.copy_batch_bytes());
    if (launches)
        check("F16.launches", expect_batched ? (l1 - l0 >= 1 && l1 - l0 <= 8) : l1 == l0,
              "the CUDA stand-in ran %ld batch kernel launches for 600 copies (batching %s)", l1 - l0,
              batching ? "on: 1 to 8" : "off: none");
    barrier();
}

// =================================================================================================
// F17: knob values heap.copy does not take fail the heap's construction on every rank.
static void f17_bad_knobs() {
    struct knob {
        const char *name, *value;
    };
    const char *bytes = "UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES";
    for (const knob k :
         {knob{"UPCXX_EXTRA_NVSHMEM_COPY", "bogus"}, knob{"UPCXX_EXTRA_NVSHMEM_COPY", " fast"}, knob{bytes, "12x"},
          knob{bytes, " -1"}, knob{bytes, "\t-5"}, knob{bytes, "+7"}, knob{bytes, " 12"}, knob{bytes, "-1"},
          knob{bytes, "12 "}, knob{bytes, ""}, knob{bytes, "18446744073709551616"}}) {
        const char *old = std::getenv(k.name);
        const std::string saved = old ? old : "";
        setenv(k.name, k.value, 1);
        bool refused = false;
        std::string what;
        try {
            nvshmem_heap heap;
        } catch (const heap_error &e) {
            refused = e.errc() == upcxx::extra::nvshmem_errc::bad_environment && std::strstr(e.what(), k.name);
            what = e.what();
        }
        if (old)
            setenv(k.name, saved.c_str(), 1);
        else
            unsetenv(k.name);
        check("F17.refused", refused, "%s=%s: the heap's construction throws errc bad_environment naming it: %s",
              k.name, k.value, what.empty() ? "(no exception)" : what.c_str());
    }
    bool built = false;
    try {
        nvshmem_heap heap;
        built = true;
        heap.destroy();
        expect_error("F17.set_batch_bytes", UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, "destroyed",
                     "set_copy_batch_bytes on a destroyed heap", [&] { heap.set_copy_batch_bytes(0); });
    } catch (const std::exception &e) {
        check("F17.next_heap", false, "%s", e.what());
    }
    check("F17.next_heap", built, "a heap built after the refused ones");
}

// One check group. An exception out of it (heap.copy throwing where it must not) is a FAIL line
// naming the group, then an abort: the other ranks may be waiting in a collective of the group,
// and UPC++ / GASNet end the whole job on the abort instead of leaving them to the watchdog.
template <class F>
static void group(const char *name, F f) {
    try {
        f();
    } catch (const std::exception &e) {
        check(name, false, "an exception left the check group: %s", e.what());
        std::fflush(stdout);
        std::abort();
    }
}

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
    group("F26", [] {
        // Stand-in only: every heap of this run (and its engine) destroyed its stream with nothing
        // left on it (a drain that returned before its copies landed leaves work queued there).
        using count_fn = long (*)();
        const auto busy = reinterpret_cast<count_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_busy_stream_destroys"));
        if (!busy) return skip("F26.drained_idle", "not on the CUDA stand-in");
        check("F26.drained_idle", busy() == 0, "%ld stream(s) destroyed with work queued on them", busy());
    });
    nvshmem_free(b);
    nvshmem_free(a);
    nvshmem_finalize();
    check("F1.finalize", true, "nvshmem_free + nvshmem_finalize after destroy(): no crash");
    const int rc = copy_test::finish();
    upcxx::finalize();
    return rc;
}
