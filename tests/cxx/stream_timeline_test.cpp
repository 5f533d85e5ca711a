// stream_timeline_test: the stream operations (copy_on_stream, copy_after, after) where a stream
// waits for a copy_on_stream that is upcxx::copy (a stream ticket, done by UPC++ progress), and
// their refusals (docs/streams.md, "The ordering rules" and "Errors, graphs, threads"). One check
// group per promise:
//   T1 destroy(), and the destructor, after a copy_on_stream that is upcxx::copy and a fast
//      copy_on_stream / copy_after queued behind it on the same stream: they make the progress
//      that does the ticket (or release it), and return with the fast copy landed. Without the
//      fast path both copies are upcxx::copy: destroy() waits for them; after the destructor,
//      which makes no progress, the second lands at UPC++'s pace.
//   T2 copy_on_stream / copy_after on a stream of another device (2 GPUs), the heap's device
//      current: no host wait for that stream's earlier work (a 500 ms host function), also
//      while that stream waits for a ticket; the bytes are in order.
//   T3 (par) a worker thread's copy_on_stream that is upcxx::copy: heap.after(s).wait() in that
//      thread returns while the master thread is in join().
//   T4 upcxx::discharge() returns after a fast copy with remote_cx::as_rpc that CUDA fails
//      (stand-in: the engine issues it again from internal-level progress), and after a fast
//      as_rpc copy_on_stream behind a stream ticket on one stream.
//   T5 copy_after on a stream being captured into a CUDA graph: errc stream_capture, nothing
//      copied, the capture ends cleanly.
//   T6 in a fork() child, copy_on_stream, copy_after, after() and copies_on_stream throw errc forked.
//   T7 (stand-in) after() is one stream write and no event, on a stream of the heap's device and
//      of another device; a fast copy_on_stream (at most copy_batch_bytes() or larger) is one
//      launch of the copy kernel and one event, and with batching off one cudaMemcpyAsync and one
//      event, no stream write; a copy failed before after() on the stream is still reported by
//      check_copies().
//   T8 copies_on_stream: 16 small copies and a large one, in the stream's order (after a 150 ms
//      host function and the sources' write, before a read queued behind them); on the fast path
//      the call not waiting and the small ones in one launch of the batch kernel (stand-in).
// A hang is a FAIL (the watchdog, 120 s). Runs over the CUDA stand-in in CI (tests/cxx's
// uxn_standin_test), 2 ranks; on a GPU host as well. Arguments: the groups to run (none: all).
//   upcxx-run -n 2 ./stream_timeline_test [T1 T2 ...]
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvshmem.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "copy_test_util.hpp"

using copy_test::check;
using copy_test::heap_error;
using copy_test::ready;
using copy_test::skip;
using copy_test::wait_for;
using upcxx::extra::nvshmem_errc;
using upcxx::extra::nvshmem_heap;
using dptr = upcxx::global_ptr<unsigned char, upcxx::memory_kind::cuda_device>;
using hptr = upcxx::global_ptr<unsigned char>;

static const std::size_t n = 64 * 1024;
static int gpu = 0;
static bool fast = true;  // the fast path is allowed (not the public-API mode, not UPCXX_EXTRA_NVSHMEM_COPY=upcxx)

static void CUDART_CB sleep_host_fn(void *ms) { usleep(static_cast<useconds_t>(*static_cast<int *>(ms)) * 1000u); }

// Device bytes of [p, p + n) that are not `v` (read back through CUDA).
static long wrong_bytes(const unsigned char *p, unsigned char v) {
    std::vector<unsigned char> h(n);
    if (cudaMemcpy(h.data(), p, n, cudaMemcpyDefault) != cudaSuccess) return static_cast<long>(n);
    long w = 0;
    for (unsigned char c : h) w += c != v;
    return w;
}
static void set_bytes(unsigned char *p, unsigned char v) {
    cudaMemset(p, v, n);
    cudaDeviceSynchronize();
}

template <class F>
static bool throws_errc(F &&call, nvshmem_errc want, std::string &said) {
    try {
        call();
        said = "no exception";
        return false;
    } catch (const heap_error &e) {
        said = e.what();
        return e.errc() == want;
    } catch (const std::exception &e) {
        said = e.what();
        return false;
    }
}

// T1: a stream ticket (copy_on_stream that is upcxx::copy), then on the same stream a fast copy
// that waits behind it; then destroy() (or the destructor) with no progress in between.
static void t1_destroy_behind_ticket(unsigned char *a, unsigned char *b) {
    for (int how = 0; how < 3; how++) {
        const char *what = how == 0   ? "fast copy_on_stream, then destroy()"
                           : how == 1 ? "copy_after, then destroy()"
                                      : "fast copy_on_stream, then the destructor";
        const unsigned char want = static_cast<unsigned char>(0x40 + how);
        set_bytes(a, want);
        set_bytes(b, 0);
        cudaStream_t s = nullptr;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        const hptr hs = upcxx::new_array<unsigned char>(n), hd = upcxx::new_array<unsigned char>(n);
        bool ok = true;
        std::string said;
        {
            auto heap = std::make_unique<nvshmem_heap>();
            const dptr gs = heap->to_global_ptr(a), gd = heap->to_global_ptr(b);
            (void)heap->copy_on_stream(s, hs, hd, n);  // upcxx::copy: s waits for its ticket
            if (how == 1) {
                (void)heap->copy_after(s, gs, gd, n);  // the heap's stream waits for s
            } else {
                (void)heap->copy_on_stream(s, gs, gd, n);  // on s, behind the ticket's wait
            }
            const double t0 = copy_test::now();
            if (how < 2) {
                try {
                    heap->destroy();
                } catch (const std::exception &e) {
                    ok = false;
                    said = e.what();
                }
            }
            heap.reset();
            check("T1.returns", ok, "%s: returned in %.2f s %s", what, copy_test::now() - t0, said.c_str());
        }
        long wrong = 0;
        if (fast || how < 2) {
            wrong = wrong_bytes(b, want);
            check("T1.landed", wrong == 0, "%s: the fast copy landed by then (%ld bytes wrong)", what, wrong);
        } else {
            // Without the fast path the second copy is upcxx::copy too: the destructor makes no
            // progress (destroy() does), so it lands as any upcxx::copy does, at UPC++'s pace.
            copy_test::progress_until([&] { return (wrong = wrong_bytes(b, want)) == 0; }, 10);
            check("T1.landed", wrong == 0,
                  "%s (every copy upcxx::copy): the second copy landed within 10 s of progress after it "
                  "(%ld bytes wrong)",
                  what, wrong);
        }
        // The stream goes on (its ticket done or released): nothing left waiting on it.
        check("T1.stream", cudaStreamSynchronize(s) == cudaSuccess, "%s: the stream is not stuck", what);
        copy_test::progress_until([] { return false; }, 0.05);  // the ticket's LPCs, if still queued
        cudaStreamDestroy(s);
        upcxx::delete_array(hs);
        upcxx::delete_array(hd);
        upcxx::barrier();
    }
}

// T2: a stream of the other device, the heap's device current.
static void t2_other_device(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    if (ndev < 2) return skip("T2", "needs 2 GPUs visible (UXN_STANDIN_GPUS=2 on the stand-in)");
    if (!fast) return skip("T2", "the fast path (every copy here is upcxx::copy, whose call waits for the stream)");
    const int other = (heap.device() + 1) % ndev;
    cudaStream_t foreign = nullptr;
    cudaSetDevice(other);
    cudaStreamCreateWithFlags(&foreign, cudaStreamNonBlocking);
    cudaSetDevice(heap.device());
    const dptr gs = heap.to_global_ptr(a), gd = heap.to_global_ptr(b);
    static int ms = 500;
    for (const bool on : {true, false}) {
        const char *what = on ? "copy_on_stream" : "copy_after";
        set_bytes(a, 0);
        set_bytes(b, 0);
        cudaLaunchHostFunc(foreign, sleep_host_fn, &ms);
        cudaSetDevice(other);
        cudaMemsetAsync(a, 0x6b, n, foreign);  // the source, written by the stream's earlier work
        cudaSetDevice(heap.device());
        const double t0 = copy_test::now();
        upcxx::future<> f = on ? heap.copy_on_stream(foreign, gs, gd, n) : heap.copy_after(foreign, gs, gd, n);
        const double call_s = copy_test::now() - t0;
        check("T2.no_host_wait", call_s < 0.25, "%s on a stream of device %d (heap's: %d): the call took %.3f s", what,
              other, heap.device(), call_s);
        const bool done = wait_for(f, 60) && wait_for(heap.after(foreign), 60);
        const long wrong = wrong_bytes(b, 0x6b);
        check("T2.order", done && wrong == 0, "%s: the copy read the stream's earlier write (%ld bytes wrong)", what,
              wrong);
    }
    // The stream waits for a ticket (copy_on_stream that is upcxx::copy): the fast call returns,
    // and the work lands once progress does the ticket.
    const hptr hs = upcxx::new_array<unsigned char>(n), hd = upcxx::new_array<unsigned char>(n);
    set_bytes(a, 0x2c);
    set_bytes(b, 0);
    (void)heap.copy_on_stream(foreign, hs, hd, n);
    const double t0 = copy_test::now();
    upcxx::future<> f1 = heap.copy_on_stream(foreign, gs, gd, n);
    upcxx::future<> f2 = heap.copy_after(foreign, gs, gd, n);
    const double call_s = copy_test::now() - t0;
    const bool done = wait_for(upcxx::when_all(f1, f2, heap.after(foreign)), 60);
    check("T2.behind_ticket", call_s < 0.25 && done && wrong_bytes(b, 0x2c) == 0,
          "copy_on_stream + copy_after on the other device's stream behind a ticket: calls %.3f s, done %d", call_s,
          static_cast<int>(done));
    upcxx::delete_array(hs);
    upcxx::delete_array(hd);
    cudaStreamDestroy(foreign);
    upcxx::barrier();
}

// T3: a worker thread's ticket, waited for in that thread while the master thread is in join().
static void t3_worker_ticket(nvshmem_heap &heap) {
#if UPCXX_THREADMODE
    bool returned = false;
    std::thread t([&] {
        cudaSetDevice(gpu);
        cudaStream_t s = nullptr;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        const hptr hs = upcxx::new_array<unsigned char>(n), hd = upcxx::new_array<unsigned char>(n);
        std::memset(hs.local(), 0x19, n);
        upcxx::future<> f = heap.copy_on_stream(s, hs, hd, n);
        returned = wait_for(heap.after(s), 20) && wait_for(f, 20);
        if (returned) {
            long w = 0;
            for (std::size_t i = 0; i < n; i++) w += hd.local()[i] != 0x19;
            returned = w == 0;
        }
        upcxx::delete_array(hs);
        upcxx::delete_array(hd);
        cudaStreamDestroy(s);
    });
    t.join();
    check("T3.worker", returned,
          "a worker thread's copy_on_stream (upcxx::copy): after(s) waited in that thread returned, the bytes there");
    upcxx::barrier();
#else
    (void)heap;
    skip("T3", "a worker thread's persona needs UPCXX_THREADMODE=par");
#endif
}

// T4: discharge() after fast copies with remote_cx::as_rpc whose completion takes another path.
static long g_rpcs = 0;
static void t4_discharge(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
#if UPCXX_VERSION >= 20210300L
    if (!fast) return skip("T4", "the fast path (every copy here is upcxx::copy, discharged by UPC++)");
    const int next = (upcxx::rank_me() + 1) % upcxx::rank_n();
    const dptr ga = heap.to_global_ptr(a), gb_next = heap.to_global_ptr(b, next);
    auto discharged = [] {
        const double end = copy_test::now() + 20;  // upcxx::discharge(), with a deadline
        while (upcxx::progress_required() && copy_test::now() < end) upcxx::progress(upcxx::progress_level::internal);
        return !upcxx::progress_required();
    };
    using fail_fn = int (*)(int);
    const auto fail_next = reinterpret_cast<fail_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_fail_next_copies"));
    if (fail_next) {
        const long before = g_rpcs;
        upcxx::barrier();  // no rank's RPC arrives here before `before` was read
        fail_next(1);
        (void)heap.copy(ga, gb_next, n, upcxx::remote_cx::as_rpc([] { g_rpcs++; }));
        const bool ok = discharged();
        fail_next(0);
        check("T4.failed_as_rpc", ok, "discharge() after a fast as_rpc copy that CUDA failed (redone)");
        const bool ran = copy_test::progress_until([&] { return g_rpcs > before; }, 20);
        check("T4.rpc", ran, "the previous rank's redone copy's RPC ran here");
        upcxx::barrier();
    } else {
        skip("T4.failed_as_rpc", "the CUDA stand-in's failure control");
    }
    // An as_rpc copy_on_stream after a copy_on_stream that is upcxx::copy on the same stream.
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const hptr hs = upcxx::new_array<unsigned char>(n), hd = upcxx::new_array<unsigned char>(n);
    const long before = g_rpcs;
    upcxx::barrier();                         // as above
    (void)heap.copy_on_stream(s, hs, hd, n);  // a ticket s waits for
    (void)heap.copy_on_stream(s, ga, gb_next, n, upcxx::remote_cx::as_rpc([] { g_rpcs++; }));
    check("T4.behind_ticket", discharged(), "discharge() after an as_rpc copy_on_stream behind a stream ticket");
    const bool ran = copy_test::progress_until([&] { return g_rpcs > before; }, 20);
    check("T4.behind_ticket_rpc", ran && wait_for(heap.after(s), 20), "its RPC ran here, the stream went on");
    upcxx::delete_array(hs);
    upcxx::delete_array(hd);
    cudaStreamDestroy(s);
    upcxx::barrier();
#else
    (void)heap, (void)a, (void)b;
    skip("T4", "upcxx::copy has no remote_cx in this UPC++ release");
#endif
}

// T5: copy_after on a capturing stream.
static void t5_capture(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const dptr gs = heap.to_global_ptr(a), gd = heap.to_global_ptr(b);
    std::vector<unsigned char> host(64);
    const hptr hg = upcxx::new_array<unsigned char>(64);
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaStreamDestroy(s);
        return skip("T5", "cudaStreamBeginCapture failed");
    }
    const auto c0 = heap.copies();
    std::string said;
    bool ok = throws_errc([&] { (void)heap.copy_after(s, gs, gd, 64); }, nvshmem_errc::stream_capture, said);
    check("T5.fast", ok, "copy_after(capturing stream, heap ends): errc stream_capture: %s", said.c_str());
    ok = throws_errc([&] { (void)heap.copy_after(s, host.data(), hg, 64); }, nvshmem_errc::stream_capture, said);
    check("T5.host", ok, "copy_after(capturing stream, host ends): errc stream_capture: %s", said.c_str());
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(s, &g);
    check("T5.end", e == cudaSuccess && heap.copies().fast == c0.fast && heap.copies().fallback == c0.fallback,
          "the capture ends cleanly (%s), nothing counted", cudaGetErrorString(e));
    if (g) cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    upcxx::delete_array(hg);
}

// T6: the stream calls in a fork() child.
static void t6_fork(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const dptr gs = heap.to_global_ptr(a), gd = heap.to_global_ptr(b);
    std::vector<unsigned char> host(64);
    const hptr hg = upcxx::new_array<unsigned char>(64);
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        int wrong = 0;
        std::string said;
        wrong += !throws_errc([&] { (void)heap.copy_on_stream(s, gs, gd, 64); }, nvshmem_errc::forked, said);
        wrong += !throws_errc([&] { (void)heap.copy_on_stream(s, host.data(), hg, 64); }, nvshmem_errc::forked, said);
        wrong += !throws_errc([&] { (void)heap.copy_after(s, gs, gd, 64); }, nvshmem_errc::forked, said);
        wrong += !throws_errc([&] { (void)heap.after(s); }, nvshmem_errc::forked, said);
        const std::vector<upcxx::extra::stream_copy<unsigned char>> copies{{gs, gd, 64}}, none;
        wrong += !throws_errc([&] { (void)heap.copies_on_stream(s, copies); }, nvshmem_errc::forked, said);
        wrong += !throws_errc([&] { (void)heap.copies_on_stream(s, none); }, nvshmem_errc::forked, said);
        _exit(wrong);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    check("T6.forked", WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "in a fork() child, copy_on_stream (fast, host ends), copy_after, after() and copies_on_stream (one copy, "
          "none) threw errc forked (%d did not)",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    cudaStreamDestroy(s);
    upcxx::delete_array(hg);
}

// The groups named on the command line (none: all of them).
// T7: after()'s completion is a word the stream writes, not an event; a copy_on_stream's is an event
// after its launch or its cudaMemcpyAsync (a lone copy is done sooner than with the kernel's word).
static void t7_stream_words(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    using count_fn = long (*)();
    const auto writes = reinterpret_cast<count_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_stream_writes"));
    const auto records = reinterpret_cast<count_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_event_records"));
    const auto launches = reinterpret_cast<count_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_batch_launches"));
    using fail_fn = int (*)(int);
    const auto fail_next = reinterpret_cast<fail_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_fail_next_copies"));
    if (!writes || !records || !launches || !fail_next)
        return skip("T7", "counts the CUDA stand-in's stream writes, events and launches");
    if (!fast) return skip("T7", "the fast path");
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const dptr gs = heap.to_global_ptr(a), gd = heap.to_global_ptr(b);
    long w0 = writes(), e0 = records();
    bool done = wait_for(heap.after(s), 60);
    check("T7.after_word", done && writes() - w0 == 1 && records() - e0 == 0,
          "after(s): %ld stream writes, %ld events recorded (want 1 and 0), done %d", writes() - w0, records() - e0,
          static_cast<int>(done));
    set_bytes(a, 0x3d);
    w0 = writes(), e0 = records();
    long l0 = launches();
    done = wait_for(heap.copy_on_stream(s, gs, gd, n), 60);
    check("T7.copy_small_launch_event",
          done && launches() - l0 == 1 && writes() - w0 == 0 && records() - e0 == 1 && wrong_bytes(b, 0x3d) == 0,
          "copy_on_stream of at most copy_batch_bytes(): %ld launches, %ld stream writes, %ld events recorded (want "
          "1, 0 and 1), done %d",
          launches() - l0, writes() - w0, records() - e0, static_cast<int>(done));
    const std::size_t batch_bytes = heap.copy_batch_bytes();
    heap.set_copy_batch_bytes(n / 2);  // the same copy, larger than the batch: a launch, then an event
    set_bytes(a, 0x3f);
    w0 = writes(), e0 = records(), l0 = launches();
    done = wait_for(heap.copy_on_stream(s, gs, gd, n), 60);
    check("T7.copy_launch_event",
          done && launches() - l0 == 1 && writes() - w0 == 0 && records() - e0 == 1 && wrong_bytes(b, 0x3f) == 0,
          "copy_on_stream above copy_batch_bytes(): %ld launches, %ld stream writes, %ld events recorded (want 1, 0 "
          "and 1), done %d",
          launches() - l0, writes() - w0, records() - e0, static_cast<int>(done));
    heap.set_copy_batch_bytes(0);  // the same copy as one cudaMemcpyAsync
    set_bytes(a, 0x3e);
    w0 = writes(), e0 = records(), l0 = launches();
    done = wait_for(heap.copy_on_stream(s, gs, gd, n), 60);
    check("T7.copy_event",
          done && launches() == l0 && writes() - w0 == 0 && records() - e0 == 1 && wrong_bytes(b, 0x3e) == 0,
          "copy_on_stream by cudaMemcpyAsync: %ld launches, %ld stream writes, %ld events recorded (want 0, 0 and "
          "1), done %d",
          launches() - l0, writes() - w0, records() - e0, static_cast<int>(done));
    heap.set_copy_batch_bytes(batch_bytes);
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    if (ndev >= 2) {  // a stream of another device is written in its own context
        cudaStream_t foreign = nullptr;
        cudaSetDevice((heap.device() + 1) % ndev);
        cudaStreamCreateWithFlags(&foreign, cudaStreamNonBlocking);
        cudaSetDevice(heap.device());
        w0 = writes(), e0 = records();
        done = wait_for(heap.after(foreign), 60);
        check("T7.other_device", done && writes() - w0 == 1 && records() - e0 == 0,
              "after(a stream of another device): %ld stream writes, %ld events, done %d", writes() - w0,
              records() - e0, static_cast<int>(done));
        cudaStreamDestroy(foreign);
    }
    try {  // an earlier group's failure, not this one's
        heap.check_copies();
    } catch (const heap_error &) {
    }
    fail_next(1);
    cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s);  // fails (stand-in), not reported by any event
    done = wait_for(heap.after(s), 60);
    std::string said;
    const bool reported = throws_errc([&] { heap.check_copies(); }, nvshmem_errc::cuda, said);
    check("T7.fault_reported", done && reported, "a failed copy before after(s): done %d, check_copies: %s",
          static_cast<int>(done), said.c_str());
    fail_next(0);
    cudaStreamDestroy(s);
    upcxx::barrier();
}

// T8: many copies in a stream's order, one call.
static void t8_copies_on_stream(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    using count_fn = long (*)();
    const auto launches = reinterpret_cast<count_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_batch_launches"));
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    set_bytes(a, 0);
    set_bytes(b, 0);
    const std::size_t small = 256, large = 32 * 1024;
    std::vector<upcxx::extra::stream_copy<unsigned char>> copies;
    for (std::size_t i = 0; i < 16; i++)
        copies.push_back({heap.to_global_ptr(a + i * small), heap.to_global_ptr(b + i * small), small});
    copies.push_back({heap.to_global_ptr(a + 16 * small), heap.to_global_ptr(b + 16 * small), large});
    const std::size_t total = 16 * small + large;
    static int ms = 150;
    unsigned char *host = nullptr;
    cudaMallocHost(&host, total);
    std::memset(host, 0, total);
    cudaLaunchHostFunc(s, sleep_host_fn, &ms);
    cudaMemsetAsync(a, 0x71, total, s);  // the sources, written by the stream's earlier work
    const long l0 = launches ? launches() : 0;
    const double t0 = copy_test::now();
    upcxx::future<> f = heap.copies_on_stream(s, copies);
    const double call_s = copy_test::now() - t0;
    cudaMemcpyAsync(host, b, total, cudaMemcpyDeviceToHost, s);  // the stream's later work reads them
    const bool done = wait_for(f, 60) && wait_for(heap.after(s), 60);
    long wrong = 0;
    for (std::size_t i = 0; i < total; i++) wrong += host[i] != 0x71;
    // The call waits for the stream only on the upcxx::copy path (the public-API mode).
    check("T8.order", done && wrong == 0 && (call_s < 0.1 || !fast),
          "copies_on_stream: the call took %.3f s, done %d, %ld bytes read wrong by the stream's later work", call_s,
          static_cast<int>(done), wrong);
    if (launches && fast)
        check("T8.one_launch", launches() - l0 == 1, "16 small copies: %ld launches of the batch kernel (want 1)",
              launches() - l0);
    const std::vector<upcxx::extra::stream_copy<unsigned char>> none;
    check("T8.empty", wait_for(heap.copies_on_stream(s, none), 60), "copies_on_stream of no copy never completed");
    cudaFreeHost(host);
    cudaStreamDestroy(s);
    upcxx::barrier();
}

static int g_argc = 0;
static char **g_argv = nullptr;
static bool wanted(const char *group) {
    if (g_argc < 2) return true;
    for (int i = 1; i < g_argc; i++)
        if (std::strcmp(g_argv[i], group) == 0) return true;
    return false;
}

int main(int argc, char **argv) {
    g_argc = argc;
    g_argv = argv;
    upcxx::init();
    copy_test::program() = "stream_timeline_test";
    if (upcxx::rank_n() < 2) {
        if (upcxx::rank_me() == 0)
            std::printf("SKIPPED: stream_timeline_test needs 2 ranks\nRESULT stream_timeline_test SKIPPED\n");
        upcxx::finalize();
        return 77;
    }
    gpu = copy_test::select_gpu_or_skip();  // exits 77 without a GPU
    copy_test::start_watchdog(120);
    copy_test::nvshmem_init_from_upcxx();
    const char *knob = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY");
    fast = nvshmem_heap::fast_copies() && !(knob && std::string(knob) == "upcxx");
    unsigned char *a = static_cast<unsigned char *>(nvshmem_malloc(n));
    unsigned char *b = static_cast<unsigned char *>(nvshmem_malloc(n));
    if (!check("setup", a && b, "nvshmem_malloc of 2 x %zu bytes", n)) return 2;
    {
        nvshmem_heap heap;
        if (wanted("T5")) t5_capture(heap, a, b);
        if (wanted("T6")) t6_fork(heap, a, b);
        if (wanted("T2")) t2_other_device(heap, a, b);
        if (wanted("T3")) t3_worker_ticket(heap);
        if (wanted("T4")) t4_discharge(heap, a, b);
        if (wanted("T7")) t7_stream_words(heap, a, b);
        if (wanted("T8")) t8_copies_on_stream(heap, a, b);
        heap.destroy();
    }
    if (wanted("T1"))
        t1_destroy_behind_ticket(a, b);  // last: its destructor case leaves a UPC++ segment until finalize
    nvshmem_free(b);
    nvshmem_free(a);
    nvshmem_finalize();
    const int rc = copy_test::finish();
    upcxx::finalize();
    return rc;
}
