// copy_semantics_test, the stream operations: copy_on_stream, after(), graph capture, a failed copy_on_stream.
// Part of copy_semantics_test.cpp, which includes every file of semantics/ into one translation unit
// (one compile of UPC++ and the layer) and runs the groups; the helpers are common.hpp's.
//
//   F22 copy_on_stream(s, ...): s = a host function sleeping 150 ms, then cudaMemsetAsync(src,
//      0x5a); the copy; then cudaMemcpyAsync(check, dst) queued on s: `check` must be all 0x5a (a
//      copy not ordered after s's earlier work reads the old bytes; one that s's later work does
//      not wait for is read before it lands: the stand-in delays every copy). For s = 0,
//      cudaStreamLegacy, cudaStreamPerThread, a created stream, a stream of the other GPU (2
//      GPUs); a copy that is upcxx::copy (host global pointers at both ends: s waits on the GPU
//      for its completion: a host function queued after it runs only once this rank has made
//      progress, which it holds back for 200 ms; and, stand-in, a get from the next rank's device
//      memory, whose last step lands 300 ms after its source completed: s's later work sees every
//      byte); every completion form (future, promise, lpc, remote_cx::as_rpc); on the fast path
//      the call returns before s's earlier work ran (common.hpp's gate, first on s). Naive: copy_after (no wait after),
//      a stream that waits for nothing, or one released at the copy's source completion.
//   F23 after(s): not ready while a host function runs on s (one that returns when the test lets
//      it: no timing asserted; a 300 ms sleep in the public-API mode), ready after it, never inside
//      the call; as_promise, as_lpc, as_future (and 2023.9's as_eager_future / as_defer_future);
//      every stream value; a CUDA error on s (stand-in) makes it ready and check_copies() throws
//      naming after(); a thread with its own persona (par). Naive: a future made ready at once,
//      or one that waits on the host.
//   F24 graph capture: copy_on_stream and after() on a stream being captured throw errc
//      stream_capture, nothing captured is left behind, the capture ends cleanly. Naive: an event
//      recorded into the graph and polled for ever.
//   F25 (stand-in) a copy_on_stream that fails after it was issued (uxn_standin_fail_next_copies;
//      skipped on a GPU): its completion still means the bytes landed (redone), check_copies()
//      names copy_on_stream once.
#ifndef UXN_SEMANTICS_STREAMS_HPP
#define UXN_SEMANTICS_STREAMS_HPP

#include "common.hpp"

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
    // On the fast path s's earlier work starts with common.hpp's gate (no host wait allowed: the
    // call must return while it is closed); a copy that is upcxx::copy waits for s on the host.
    gate_close();
    if (expect_fast) cudaLaunchHostFunc(s, gate_host_fn, nullptr);
    cudaLaunchHostFunc(s, sleep_host_fn, &ms);  // then slow: a copy not ordered after it reads zeros
    fill_op = so_host_op{src, nullptr};
    if (host_mem)
        cudaLaunchHostFunc(s, so_host_fn, &fill_op);
    else
        cudaMemsetAsync(src, 0x5a, so_n, s);
    upcxx::future<> f = copy();
    const bool returned_first = !gate_passed();
    gate_open();
    const bool ready_at_return = ready(f);
    read_op = so_host_op{check_buf, dst_local};
    if (host_mem)
        cudaLaunchHostFunc(s, so_host_fn, &read_op);
    else
        cudaMemcpyAsync(check_buf, dst_local, so_n, cudaMemcpyDefault, s);
    // A copy that is upcxx::copy completes only in UPC++ progress (UPC++ may move host bytes
    // inside the call, so the bytes alone cannot show a stream that does not wait): this rank
    // makes none for 200 ms, and a host function queued after the read must find that progress
    // has been made since (or the copy complete at return: where CUDA cannot enqueue the wait,
    // the call makes progress until the copy completed). Naive: the stream's wait left out.
    static std::atomic<bool> progressed{false}, seen{false};
    progressed = false;
    seen = false;
    if (!expect_fast) {
        cudaLaunchHostFunc(s, [](void *) { seen = progressed.load(); }, nullptr);
        usleep(200 * 1000);
        progressed = true;
    }
    const bool done = waited("F22.wait", heap.after(s), name) && waited("F22.wait", f, name);
    const long wrong = count_not(check_buf, so_n, 0x5a);
    check("F22.order", done && wrong == 0, "%s: the read queued after copy_on_stream saw %ld of %zu bytes wrong", name,
          wrong, so_n);
    if (!expect_fast)
        check("F22.upcxx_copy_waited", done && (seen || ready_at_return),
              "%s (upcxx::copy): the stream's work after it ran only after this rank's progress completed it (%s)",
              name,
              seen              ? "yes"
              : ready_at_return ? "complete at return"
                                : "no: it ran while no progress was made");
    if (expect_fast)
        check("F22.no_host_wait", returned_first,
              "%s: copy_on_stream returned before the stream's earlier work (a host function waiting for this "
              "thread) ran",
              name);
    cudaFreeHost(check_buf);
}

// F22, a copy_on_stream that is upcxx::copy with the next rank's device memory as its source:
// UPC++ gets it through host bounce buffers, so the copy's source completes (here) before its
// last step, a host-to-device copy into the destination, which the stand-in lands 300 ms late
// here. A host function queued on s after the copy reads the destination (the stand-in's device
// memory is host memory): every byte must be there. Naive: the stream released at the copy's
// source completion instead of its operation completion.
static void f22_upcxx_get_on_stream(nvshmem_heap &heap, unsigned char *a, unsigned char *b, cudaStream_t s) {
    using delay_fn = unsigned (*)(unsigned);
    const auto set_delay = reinterpret_cast<delay_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_set_copy_delay_us"));
    if (!set_delay)
        return skip("F22.upcxx_copy_landed",
                    "needs the CUDA stand-in (its copy delay; a host function reading device memory)");
    const int salt = 225;
    static std::vector<unsigned char> want;
    static std::atomic<long> wrong_then{-1};
    static unsigned char *dst;
    want = copy_test::host_pattern(so_n, next, salt);
    wrong_then = -1;
    dst = b + so_off;
    auto run = [&](unsigned char *src_local, dptr src_next) {
        fill(src_local, so_n, me, salt);
        cudaMemset(dst, 0, so_n);
        cudaDeviceSynchronize();
        barrier();
        const auto c0 = heap.copies();
        const unsigned old = set_delay(300 * 1000);
        upcxx::future<> f = heap.copy_on_stream(s, src_next, heap.to_global_ptr(dst), so_n);
        cudaLaunchHostFunc(
            s,
            [](void *) {
                long w = 0;
                for (std::size_t i = 0; i < so_n; i++) w += dst[i] != want[i];
                wrong_then = w;
            },
            nullptr);
        const bool done = waited("F22.upcxx_copy_landed", upcxx::when_all(f, heap.after(s)), "a get on the stream");
        set_delay(old);
        check("F22.upcxx_copy_landed", done && wrong_then == 0,
              "copy_on_stream as upcxx::copy from the next rank's device memory: the stream's later work saw %ld of "
              "%zu bytes wrong",
              wrong_then.load(), so_n);
        path_is("F22.upcxx_copy_path", c0, 0, 1, "a get from the next rank's device memory");
        barrier();
    };
    if (forced) {  // every copy is upcxx::copy: the next rank's heap
        run(a + so_off, heap.to_global_ptr(a + so_off, next));
        return;
    }
#if HAS_GPU_ALLOCATOR
    // The next rank's own device memory (not the heap's): upcxx::copy.
    auto own = upcxx::make_gpu_allocator<upcxx::cuda_device>(4 * MiB, gpu);  // collective
    const dptr mine = own.allocate<unsigned char>(so_n);
    upcxx::dist_object<dptr> d(mine);
    run(own.local(mine), d.fetch(next).wait());
    own.deallocate(mine);
    own.destroy();  // collective
#else
    (void)a;
    skip("F22.upcxx_copy_landed", "UPC++ before 2022.3: no device memory outside the heap here (make_gpu_allocator)");
#endif
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
    // Its future deferred (UPC++ >= 2023.3; 2020.10 defers every one): ready at return would mean
    // the call made progress (so_case).
    so_case(heap, "upcxx::copy between host global pointers", created, hs.local(), hd.local(), true, false, [&] {
#if COPY_HAS_EAGER
        return heap.copy_on_stream(created, hs, hd, so_n, operation_cx::as_defer_future());
#else
        return heap.copy_on_stream(created, hs, hd, so_n);
#endif
    });
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
    f22_upcxx_get_on_stream(heap, a, b, created);
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
    // The stream's work: a host function that returns only once this thread opens its gate
    // (common.hpp), so "not ready while it runs" holds however late anything is scheduled; no
    // timing is asserted. The public-API mode's after() waits on the host: a sleep there.
    for (const named_stream &ns : streams) {
        gate_close();
        if (host_waits)
            cudaLaunchHostFunc(ns.s, sleep_host_fn, &ms);
        else
            cudaLaunchHostFunc(ns.s, gate_host_fn, nullptr);
        upcxx::future<> f = heap.after(ns.s);
        const bool early = ready(f);
        copy_test::progress_until([] { return false; }, 0.1);
        const bool mid = ready(f);
        // Meanwhile the wait is the watcher's, not polled by progress: one parked.
        const std::size_t parked_mid = heap.copies().parked;
        gate_open();
        const bool done = waited("F23.ready", f, ns.name);
        check("F23.after", (host_waits || (!early && !mid)) && done,
              "%s: after() not ready in the call (%d), nor after 100 ms of progress while the stream's host function "
              "waits (%d), then ready (%d)",
              ns.name, early, mid, done);
        if (!host_waits) {
            const bool unparked = copy_test::progress_until([&] { return heap.copies().parked == 0; }, 1.0);
            check("F23.parked", parked_mid == 1 && unparked,
                  "%s: while the stream's host function waits, the after() is parked with the engine's watcher "
                  "(%zu parked, 1 expected), and no longer once ready (%d)",
                  ns.name, parked_mid, unparked);
        }
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
    const standin_fail_fn fail_copies = standin_fail_control("uxn_standin_fail_next_copies");
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
            // The engine's own status and message, passed through (issue 52).
            ok = e.errc() == upcxx::extra::nvshmem_errc::stream_capture &&
                 e.status() == UPCXX_EXTRA_NVSHMEM_STATUS_STREAM_CAPTURE && std::strstr(e.what(), "captured");
            said = e.what();
        }
        check("F24.refused", ok, "%s on a capturing stream: errc stream_capture, status STREAM_CAPTURE: %s", what,
              said.c_str());
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
    const standin_fail_fn fail_copies = standin_fail_copies("F25", "a copy_on_stream");
    if (!fail_copies) return;
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
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    fail_copies(1);  // the copy_on_stream's copy (its launch or cuMemcpyAsync on s), enqueued in the call
    const bool done = waited(
        "F25.redone", heap.copy_on_stream(s, heap.to_global_ptr(a + so_off), heap.to_global_ptr(b + so_off), so_n),
        "a failed copy_on_stream");
    std::string said;
    try {
        heap.check_copies();
    } catch (const heap_error &e) {
        said = e.what();
    }
    const int unused = fail_copies(0);
    check("F25.redone",
          done && unused == 0 && count_wrong(b + so_off, so_n, me, salt) == 0 &&
              said.find("copy_on_stream") != std::string::npos,
          "a copy_on_stream CUDA failed (%d injected failure(s) unused): bytes right once complete (%ld wrong), "
          "check_copies(): %s",
          unused, count_wrong(b + so_off, so_n, me, salt), said.empty() ? "(nothing)" : said.c_str());
    cudaStreamDestroy(s);
    barrier();
}

#endif  // UXN_SEMANTICS_STREAMS_HPP
