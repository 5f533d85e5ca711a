// copy_semantics_test, errors and redo: a copy CUDA fails is redone (also before destroy(), and one
// owing a remote completion whose reissue fails too), bad knobs.
// Part of copy_semantics_test.cpp, which includes every file of semantics/ into one translation unit
// (one compile of UPC++ and the layer) and runs the groups; the helpers are common.hpp's.
//
//   F4 (stand-in) a fast copy that CUDA fails when it runs (the CUDA stand-in's
//      uxn_standin_fail_next_copies: the copy, or the batch kernel's launch holding it, moves NO
//      bytes and reports an error asynchronously; a real asynchronous CUDA failure cannot be
//      provoked safely on a GPU, where this is skipped): its future becomes ready only once the
//      bytes are right (redone through upcxx::copy); check_copies() throws CUDA_ERROR naming it
//      (its byte count) once; copies issued afterwards (and, par, concurrently from another thread)
//      do not throw. One initiator at a time (the stand-in counts failures per process, and another
//      rank's upcxx::copy served here must not take one).
//   F12 (stand-in) a fast copy that fails after it was issued, destroy() called at once:
//      destroy() waits for its redo through upcxx::copy; the target's bytes are right when
//      destroy() returns there. Naive: the redo left in flight while the segment goes (SIGSEGV).
//      (par) The same copy issued by a thread that never makes progress again: it cannot be
//      redone, and destroy() says so on every rank (errc cuda). Naive: reported as success.
//   F17 a knob value heap.copy does not take (UPCXX_EXTRA_NVSHMEM_COPY=bogus,
//      UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES=12x, " -1", "\t-5", "+7", " 12", "-1", "12 ") fails the heap's construction
//      on every rank with errc bad_environment naming the variable; the next heap is built fine. Naive: the value
//      ignored, or one rank throwing while the others wait in the next collective.
//   F27 (stand-in, UPC++ >= 2021.3) a fast copy with remote_cx::as_rpc that CUDA fails, and whose
//      reissue by the engine (at internal-level progress) fails too: it is redone through
//      upcxx::copy at user level, and its RPC and operation completion come once the bytes are at
//      the target (one initiator at a time: the stand-in counts injected failures per process).
//      Naive: the copy moved to user level still finishing as an internal-level one (the RPC
//      sent, the future ready, no byte moved).
#ifndef UXN_SEMANTICS_ERRORS_HPP
#define UXN_SEMANTICS_ERRORS_HPP

#include "common.hpp"

// F4 for one initiator (this rank): its copy of n bytes to the next rank fails when it runs.
static void f4_one_failed_copy(nvshmem_heap &heap, unsigned char *a, unsigned char *b, dptr ga, dptr gb_next,
                               const unsigned char *peer_b, std::size_t n, int salt, const char *what,
                               standin_fail_fn fail_copies) {
    try {
        heap.check_copies();  // nothing pending
    } catch (const std::exception &e) {
        check("F4.failed_copy", false, "check_copies() before the test: %s", e.what());
    }
    fail_copies(1);  // this copy (or its batch's launch) is the next one enqueued in this process
    upcxx::future<> f;
    try {
        f = heap.copy(ga, gb_next, n);
    } catch (const std::exception &e) {
        fail_copies(0);
        check("F4.failed_copy", false, "%s: copy() threw: %s", what, e.what());
        return;
    }
#if UPCXX_THREADMODE
    // Another thread copies meanwhile: none of its copies throws, its bytes are right (a copy of
    // it that joined the failed copy's batch failed with it and is redone too).
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
    const int unused = fail_copies(0);
    check("F4.failed_copy", ok && wrong_when_ready == 0 && unused == 0,
          "%s: the stand-in failed it (%d injected failure(s) unused), its future became ready with the bytes right "
          "(%ld wrong then)",
          what, unused, wrong_when_ready);
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
              "%s: the message names the failed copy by its %zu bytes: %s", what, n, msg.c_str());
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
        fill(a + cap - small, small, me, salt + 1000);
        later_ok =
            wait_for(heap.copy(heap.to_global_ptr(a + cap - small), heap.to_global_ptr(b + cap - small), small), 30) &&
            count_wrong(b + cap - small, small, me, salt + 1000) == 0;
        heap.check_copies();
    } catch (const std::exception &e) {
        later_ok = false;
        check("F4.afterwards", false, "%s: a copy afterwards threw: %s", what, e.what());
    }
    check("F4.afterwards", later_ok, "%s: a copy afterwards works and check_copies() stays quiet", what);
}

// F4: a fast copy failing when it runs (the CUDA stand-in).
static void f4_failed_copy(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    // fail_copies(n): the next n copies enqueued in this process (a batch's launch is one) move no
    // bytes and report a CUDA error asynchronously, as an ECC error or a lost peer would; a test
    // cannot provoke one safely on a GPU.
    int salt = 40;
    const unsigned char *peer_b = static_cast<const unsigned char *>(nvshmem_ptr(b, next));
    const standin_fail_fn fail_copies = standin_fail_copies("F4", "a copy");
    if (!fail_copies) return;
    if (!mapped || forced) {
        skip("F4",
             "the fast path is not taken here (NVSHMEM does not map the next PE, UPCXX_EXTRA_NVSHMEM_COPY=upcxx, or "
             "the public-API mode)");
        return;
    }
    for (std::size_t n : {small, big}) {
        const dptr ga = heap.to_global_ptr(a), gb_next = heap.to_global_ptr(b, next);
        char what[64];
        std::snprintf(what, sizeof what, "%s copy failing when it runs", sz(n));
        prepare(a, b, n, ++salt);
        for (int initiator = 0; initiator < nranks; initiator++) {
            if (me == initiator) f4_one_failed_copy(heap, a, b, ga, gb_next, peer_b, n, salt, what, fail_copies);
            barrier();  // the others make progress here: they serve the initiator's redo
        }
    }
}

// =================================================================================================
// F12: destroy() waits for the redo of a fast copy that failed after it was issued.
static void f12_redo_before_destroy(unsigned char *a, unsigned char *b) {
    const standin_fail_fn fail_copies = standin_fail_copies("F12", "a copy");
    if (!fail_copies) return;
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
            fail_copies(1);  // the copy's cuMemcpyAsync, enqueued in the call
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
        if (me == 0) {
            const int unused = fail_copies(0);
            check("F12.future", wait_for(f, 30) && unused == 0,
                  "the failed copy's future became ready (%d injected failure(s) unused)", unused);
        }
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
                fail_copies(1);  // the launch of the batch holding it, at the drain
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
        if (me == 0) {
            const int unused = fail_copies(0);
            check("F12.injected", unused == 0, "the thread's copy was failed by the stand-in (%d unused)", unused);
        }
        check("F12.unredone_reported", cuda,
              "destroy() with a failed copy that can no longer be redone throws errc cuda on every rank: %s",
              err.c_str());
        barrier();
    }
#endif
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

// =================================================================================================
// F27: a remote-completion copy that fails twice (the engine's reissue too) is redone at user level.
static void f27_rpc_copy_failing_twice(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
#if COPY_HAS_REMOTE_CX
    const standin_fail_fn fail_copies = standin_fail_control("uxn_standin_fail_next_copies");
    if (!fail_copies || !mapped || forced)
        return skip("F27", "needs the CUDA stand-in's failure control and the fast path");
    try {
        heap.check_copies();
    } catch (...) {
    }
    const int salt = 270;
    const std::size_t n = 256 * 1024;
    prepare(a, b, n, salt);
    const unsigned char *peer_b = static_cast<const unsigned char *>(nvshmem_ptr(b, next));
    const dptr ga = heap.to_global_ptr(a), gb_next = heap.to_global_ptr(b, next);
    // One initiator at a time, the others in a barrier (their progress serves it): the stand-in
    // counts injected failures per process, and another rank's upcxx::copy arriving here (its
    // redo's host-to-device step) must not take one of them.
    for (int initiator = 0; initiator < nranks; initiator++) {
        if (me == initiator) {
            const long replies0 = g_rpc_replies, wrong0 = g_rpc_wrong;
            fail_copies(2);  // the copy, then the engine's reissue of it
            upcxx::future<> f =
                heap.copy(ga, gb_next, n,
                          remote_cx::as_rpc(rpc_check_at_target, gb_next, n, me, salt) | operation_cx::as_future());
            const bool done = waited("F27.redone", f, "a copy with as_rpc failing twice");
            const long wrong_when_ready = done && peer_b ? count_wrong(peer_b, n, me, salt) : static_cast<long>(n);
            const bool ran = copy_test::progress_until([&] { return g_rpc_replies > replies0; });
            const int left = fail_copies(0);
            check("F27.redone", done && wrong_when_ready == 0 && left == 0,
                  "its operation completion came with the bytes at the target (%ld wrong then; %d injected failure(s) "
                  "unused)",
                  wrong_when_ready, left);
            check("F27.rpc", ran && g_rpc_wrong == wrong0, "its RPC ran at the target (%s) with %ld wrong bytes there",
                  ran ? "yes" : "no", static_cast<long>(g_rpc_wrong - wrong0));
            std::string said;
            try {
                heap.check_copies();
            } catch (const heap_error &e) {
                said = e.what();
            }
            check("F27.check_copies", !said.empty(), "check_copies() reports the failure: %s",
                  said.empty() ? "(nothing)" : said.c_str());
        }
        barrier();
    }
#else
    (void)heap, (void)a, (void)b;
    skip("F27", "upcxx::copy has no remote_cx in this UPC++ release");
#endif
}

#endif  // UXN_SEMANTICS_ERRORS_HPP
