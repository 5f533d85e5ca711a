// copy_semantics_test, personas and threads: those that go away with copies in flight, and where a
// worker thread's copy completes.
// Part of copy_semantics_test.cpp, which includes every file of semantics/ into one translation unit
// (one compile of UPC++ and the layer) and runs the groups; the helpers are common.hpp's.
//
//   F10 personas that go away with a fast copy in flight: a persona deleted (and, par, a thread
//      that exits) before its copy completed, then a new one, very likely at the same address:
//      the new one's copies complete. Naive: lanes keyed by the persona's address, the new
//      persona inheriting a poll that never runs (a hang).
//   F11 (par) a worker thread copies host -> host and 0 elements, then exits: destroy() returns at
//      once. Naive: those upcxx::copy calls tracked by an LPC on the dead thread's persona, destroy()
//      waiting 60 s and throwing copies_in_flight.
//   F28 (par) a copy completes at its initiator persona's progress: a worker thread copies (heap to
//      the next PE's heap, then a raw host pointer to this rank's heap), then makes no progress
//      while the master thread makes 200 ms of it: the copy is not complete when the worker looks
//      (the master's progress completed nothing of it); then the worker's own progress completes
//      it while the master makes none. Naive: the copy's completion poll queued on the master
//      persona (the worker's copy completes only when the master progresses, and there).
#ifndef UXN_SEMANTICS_THREADS_HPP
#define UXN_SEMANTICS_THREADS_HPP

#include "common.hpp"

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
// F28 (par): a worker thread's copy completes at that thread's progress, never at the master's.
static void f28_initiator_persona(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
#if UPCXX_THREADMODE
    const int salt = 280;
    prepare(a, b, small, salt);
    std::vector<unsigned char> host = copy_test::host_pattern(small, me, salt + 1);
    const dptr ga = heap.to_global_ptr(a), gb_next = heap.to_global_ptr(b, next), gb = heap.to_global_ptr(b);
    std::atomic<int> stage{0};  // 1: the worker issued its copies; 2: the master's progress is over
    bool early = true, completed = false;
    std::thread worker([&] {
        cudaSetDevice(gpu);
        upcxx::future<> f1 = heap.copy(ga, gb_next, small);
        upcxx::future<> f2 = heap.copy(host.data(), gb + small, small);
        stage = 1;
        while (stage.load() != 2) std::this_thread::yield();  // no progress here meanwhile
        early = ready(f1) || ready(f2);
        completed = wait_for(upcxx::when_all(f1, f2), 30);  // the master makes none now
    });
    while (stage.load() != 1) std::this_thread::yield();
    copy_test::progress_until([] { return false; }, 0.2);  // the master persona's progress
    stage = 2;
    worker.join();
    check("F28.not_master", !early, "a worker thread's 2 copies were %scomplete after 200 ms of the master's progress",
          early ? "" : "not ");
    check("F28.initiator", completed, "the worker's own progress completed them (the master making none): %s",
          completed ? "yes" : "no, 30 s");
    barrier();
    check("F28.bytes", count_wrong(b, small, prev, salt) == 0 && count_wrong(b + small, small, me, salt + 1) == 0,
          "their bytes landed");
    barrier();
#else
    (void)heap, (void)a, (void)b;
    skip("F28", "threads issuing copies need the par threadmode");
#endif
}

#endif  // UXN_SEMANTICS_THREADS_HPP
