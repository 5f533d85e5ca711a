// copy_semantics_test, when and where the completions come: deferral, every completion form, discharge().
// Part of copy_semantics_test.cpp, which includes every file of semantics/ into one translation unit
// (one compile of UPC++ and the layer) and runs the groups; the helpers are common.hpp's.
//
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
//   F18 upcxx::discharge() after a copy with remote_cx::as_rpc (UPC++ >= 2021.3): internal-level
//      progress alone (what discharge() makes) brings progress_required() to false, with no
//      user-level progress on the initiator; the RPC then runs at the target with the bytes right.
//      Naive: the remote completion sent from a user-level LPC, discharge() spinning forever.
#ifndef UXN_SEMANTICS_COMPLETIONS_HPP
#define UXN_SEMANTICS_COMPLETIONS_HPP

#include "common.hpp"

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

#endif  // UXN_SEMANTICS_COMPLETIONS_HPP
