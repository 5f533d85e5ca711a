// stream_bench: the stream operations against NVSHMEM's own on-stream API on the same memory, in
// one process (docs/streams.md).
//
// For each size, rank 0 puts into the next PE's heap on its own CUDA stream `s`, alternating
// between
//   copy_on_stream  W x heap.copy_on_stream(s, src, dst, n), then cudaStreamSynchronize(s)
//   putmem_on_stream W x nvshmemx_putmem_on_stream(dst, src, n, next, s), then
//                    nvshmemx_quiet_on_stream(s) and cudaStreamSynchronize(s)
// after warm-up windows, R repetitions each (ABAB order, so drift hits both alike). W = 1 is one
// copy; W = 100 is the back-to-back case. One line per (size, window), times in us:
//   copies_on_stream one heap.copies_on_stream(s, copies) of the W copies, then
//                    cudaStreamSynchronize(s)
// One line per (size, window), times in us:
//   STREAM <bytes> <window> <copy_on_stream min> <max> <putmem_on_stream min> <max>
//          <putmem_on_stream min / copy_on_stream min> <copies_on_stream min> <max>
//          <putmem_on_stream min / copies_on_stream min>
//          <copy_on_stream call, us> <putmem_on_stream call, us>
// (the last two: the host's time per call, issuing the window, before the synchronize; min)
// After each size's first window, one copy_on_stream of a pattern is read back from the target
// (the run fails on a wrong byte).
// A ratio above 1 means the library finished the window sooner. The completions of the
// library's copies run at the next progress (they are not part of the time).
//
// Then, with -c C (default 4194304, 0: none), where a copy_on_stream's host time goes, at each
// size from max(-s, 512 KiB) to C (where copy_on_stream is one cudaMemcpyAsync): the host's time
// per call while issuing 100 copies back to back on `s` (best of R windows, alternating), layer by
// layer, down to the driver calls it makes and NVSHMEM's put:
//   COST <bytes> <heap.copy_on_stream> <upcxx_extra_nvshmem_engine_copy (ON_STREAM)>
//        <cuMemcpyAsync + cuEventRecord> <cuMemcpyAsync> <nvshmemx_putmem_on_stream>
// The engine is one of the C ABI's own (upcxx_extra_nvshmem_engine_new, no batching), its tickets
// polled and completed after each window; the driver calls come from libcuda.so.1 (dlsym).
//
// Then the cost of one heap.after(s) call on an idle stream (-a calls, default 1000), and the
// time until all are ready:
//   AFTERCALL <calls> <us per call> <us until the last is ready>
//
// Then the host time after() frees: a device-to-device copy of -b bytes (default 256 MiB) is
// queued on s, and the host either blocks in cudaStreamSynchronize(s), or calls heap.after(s)
// and makes progress until it is ready, counting what it spends inside the library (the call and
// each upcxx::progress()) against the copy's time. Right before heap.after(s) the benchmark has
// the stream write a word of its own (cuStreamWriteValue32 into mapped host memory), which the
// host reads between its polls: the last column is the time from seeing that word (the stream
// reached the point after() waits for) until the future is ready:
//   AFTER <bytes> <stream time us> <cudaStreamSynchronize blocked us> <after() call us>
//         <progress us until ready> <host time freed, %> <progress() calls> <us per progress() call>
//         <us from the stream reaching the point until ready>
//
//   upcxx-run -n 2 ./stream_bench [-w 1,100] [-s 8] [-m 4194304] [-r 6] [-W 2] [-b 268435456] [-a 1000]
//                                 [-c 4194304]
//
// Without a GPU it says SKIPPED and exits 77.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "upcxx_extra_nvshmem.h"
#include "bench_util.hpp"

namespace {

template <class F>
bool is_ready(const F &f) {
#if UPCXX_VERSION >= 20230305L
    return f.is_ready();
#else
    return f.ready();
#endif
}

// The two driver calls copy_on_stream makes for a copy above copy_batch_bytes(), and the stream
// write of the AFTER lines, from the driver itself (the program links no libcuda of its own).
struct driver_calls {
    CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
    CUresult (*event_create)(CUevent *, unsigned) = nullptr;
    CUresult (*event_record)(CUevent, CUstream) = nullptr;
    CUresult (*event_destroy)(CUevent) = nullptr;
    CUresult (*write_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned) = nullptr;
    bool tried = false;
    bool cost_calls() const { return memcpy_async && event_create && event_record && event_destroy; }
    // Looks the calls up once; true when the COST lines' calls are all there.
    bool load() {
        if (tried) return cost_calls();
        tried = true;
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
        if (!lib) return false;
        memcpy_async = reinterpret_cast<decltype(memcpy_async)>(dlsym(lib, "cuMemcpyAsync"));
        event_create = reinterpret_cast<decltype(event_create)>(dlsym(lib, "cuEventCreate"));
        event_record = reinterpret_cast<decltype(event_record)>(dlsym(lib, "cuEventRecord"));
        event_destroy = reinterpret_cast<decltype(event_destroy)>(dlsym(lib, "cuEventDestroy_v2"));
        write_value32 = reinterpret_cast<decltype(write_value32)>(dlsym(lib, "cuStreamWriteValue32_v2"));
        return cost_calls();
    }
};

}  // namespace

using bench::now;
using bench::parse_list;
using bench::stats;

int main(int argc, char **argv) {
    upcxx::init();
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 || upcxx::rank_n() < 2) {
        if (!upcxx::rank_me()) std::printf("SKIPPED: stream_bench needs a GPU and 2 ranks\n");
        upcxx::finalize();
        return 77;
    }
    std::vector<std::size_t> windows{1, 100};
    std::size_t min_size = 8, max_size = std::size_t(4) << 20, big = std::size_t(256) << 20;
    int reps = 6, warm = 2, after_calls = 1000;
    std::size_t cost_max = std::size_t(4) << 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "-w")
            windows = parse_list(argv[i + 1]);
        else if (a == "-s")
            min_size = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "-m")
            max_size = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "-r")
            reps = std::atoi(argv[i + 1]);
        else if (a == "-W")
            warm = std::atoi(argv[i + 1]);
        else if (a == "-b")
            big = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "-c")
            cost_max = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "-a")
            after_calls = std::atoi(argv[i + 1]);
    }
    if (windows.empty() || min_size == 0 || max_size < min_size || reps < 1 || big == 0) {
        if (!upcxx::rank_me()) std::printf("RESULT stream_bench FAIL: bad arguments\n");
        upcxx::finalize();
        return 2;
    }
    const std::size_t max_window = *std::max_element(windows.begin(), windows.end());
    cudaSetDevice(upcxx::local_team().rank_me() % ndev);
    int rc = 0;
    try {
        upcxx::extra::nvshmem_init();
        const int me = upcxx::rank_me(), next = (me + 1) % upcxx::rank_n();
        const std::size_t span = std::max(std::min(max_size * max_window, std::size_t(256) << 20), big);
        char *src = static_cast<char *>(nvshmem_malloc(span));
        char *dst = static_cast<char *>(nvshmem_malloc(span));
        cudaMemset(src, me + 1, span);
        cudaDeviceSynchronize();
        cudaStream_t s = nullptr;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        {
            upcxx::extra::nvshmem_heap heap;
            const auto lsrc = heap.to_global_ptr(src), rdst = heap.to_global_ptr(dst, next);
            if (me == 0)
                std::printf("stream_bench: %d ranks, %d GPU(s) visible, heap.copy %s, NVSHMEM %d.%d\n", upcxx::rank_n(),
                            ndev, upcxx::extra::nvshmem_heap::fast_copies() ? "fast mode" : "public-API mode",
                            NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION);
            for (std::size_t w : windows)
                for (std::size_t n = min_size; n <= max_size; n *= 2) {
                    const std::size_t slots = std::max<std::size_t>(1, span / n);
                    auto off = [&](std::size_t k) { return (k % slots) * n; };
                    stats hc, vc;  // the calls alone
                    auto run_heap = [&] {
                        const double t0 = now();
                        for (std::size_t k = 0; k < w; k++)
                            heap.copy_on_stream(s, lsrc + static_cast<std::ptrdiff_t>(off(k)),
                                                rdst + static_cast<std::ptrdiff_t>(off(k)), n,
                                                upcxx::operation_cx::as_lpc(upcxx::current_persona(), [] {}));
                        hc.add((now() - t0) / static_cast<double>(w));
                        cudaStreamSynchronize(s);
                        const double t = now() - t0;
                        upcxx::progress();  // the copies' completions, outside the time
                        return t;
                    };
                    std::vector<upcxx::extra::stream_copy<char>> copies(w);
                    for (std::size_t k = 0; k < w; k++)
                        copies[k] = {lsrc + static_cast<std::ptrdiff_t>(off(k)),
                                     rdst + static_cast<std::ptrdiff_t>(off(k)), n};
                    auto run_batch = [&] {
                        const double t0 = now();
                        heap.copies_on_stream(s, copies, upcxx::operation_cx::as_lpc(upcxx::current_persona(), [] {}));
                        cudaStreamSynchronize(s);
                        const double t = now() - t0;
                        upcxx::progress();
                        return t;
                    };
                    auto run_nvshmem = [&] {
                        const double t0 = now();
                        for (std::size_t k = 0; k < w; k++)
                            nvshmemx_putmem_on_stream(dst + off(k), src + off(k), n, next, s);
                        vc.add((now() - t0) / static_cast<double>(w));
                        nvshmemx_quiet_on_stream(s);
                        cudaStreamSynchronize(s);
                        return now() - t0;
                    };
                    upcxx::barrier();
                    stats h, v, b;
                    if (me == 0) {
                        for (int r = 0; r < warm; r++) run_heap(), run_nvshmem(), run_batch();
                        for (int r = 0; r < reps; r++) {
                            h.add(run_heap());
                            v.add(run_nvshmem());
                            b.add(run_batch());
                        }
                        std::printf("STREAM %zu %zu %.2f %.2f %.2f %.2f %.3f %.2f %.2f %.3f %.3f %.3f\n", n, w,
                                    h.lo * 1e6, h.hi * 1e6, v.lo * 1e6, v.hi * 1e6, v.lo / h.lo, b.lo * 1e6, b.hi * 1e6,
                                    v.lo / b.lo, hc.lo * 1e6, vc.lo * 1e6);
                        std::fflush(stdout);
                        // The bytes: a pattern through one copy_on_stream of this size, read back
                        // through the peer mapping (a wrong byte fails the run).
                        if (void *peer = nvshmem_ptr(dst, next); peer && w == windows.front()) {
                            std::vector<unsigned char> pattern(n), got(n);
                            for (std::size_t i = 0; i < n; i++) pattern[i] = static_cast<unsigned char>(i * 7 + n);
                            cudaMemcpyAsync(src, pattern.data(), n, cudaMemcpyHostToDevice, s);  // in s's order
                            heap.copy_on_stream(s, lsrc, rdst, n).wait();
                            cudaMemcpy(got.data(), peer, n, cudaMemcpyDeviceToHost);
                            if (got != pattern)
                                throw std::runtime_error("copy_on_stream of " + std::to_string(n) +
                                                         " bytes: the target holds other bytes");
                        }
                    }
                    upcxx::barrier();
                }
            // Where a copy_on_stream's host time goes (rank 0 alone; -c).
            driver_calls cu;
            if (me == 0 && cost_max > 0 && !cu.load()) std::printf("COST SKIPPED: no driver calls from libcuda.so.1\n");
            if (me == 0 && cost_max > 0 && cu.memcpy_async) {
                constexpr std::size_t w = 100;
                int dev = 0;
                cudaGetDevice(&dev);
                upcxx_extra_nvshmem_engine_t *eng = nullptr;
                if (upcxx_extra_nvshmem_engine_new(dev, 0, &eng) != UPCXX_EXTRA_NVSHMEM_STATUS_OK)
                    throw std::runtime_error("upcxx_extra_nvshmem_engine_new failed");
                std::vector<CUevent> evs(w);
                for (auto &e : evs) cu.event_create(&e, CU_EVENT_DISABLE_TIMING);
                std::vector<std::uint64_t> tickets(w);
                char *peer = static_cast<char *>(nvshmem_ptr(dst, next));
                const auto cs = reinterpret_cast<CUstream>(s);
                for (std::size_t n = std::max<std::size_t>(min_size, 512 << 10); n <= cost_max && peer; n *= 2) {
                    const std::size_t slots = std::max<std::size_t>(1, span / n);
                    auto off = [&](std::size_t k) { return (k % slots) * n; };
                    long done = 0;
                    // One window of 100 calls of `layer`: the host's time per call.
                    auto window = [&](int layer) {
                        const double t0 = now();
                        for (std::size_t k = 0; k < w; k++) {
                            switch (layer) {
                                case 0:
                                    heap.copy_on_stream(
                                        s, lsrc + static_cast<std::ptrdiff_t>(off(k)),
                                        rdst + static_cast<std::ptrdiff_t>(off(k)), n,
                                        upcxx::operation_cx::as_lpc(upcxx::current_persona(), [&done] { done++; }));
                                    break;
                                case 1: {
                                    upcxx_extra_nvshmem_engine_copy_t c{};
                                    c.dst = peer + off(k);
                                    c.src = src + off(k);
                                    c.bytes = n;
                                    c.src_rank = me;
                                    c.dst_rank = next;
                                    c.flags = UPCXX_EXTRA_NVSHMEM_ENGINE_FLAG_ON_STREAM |
                                              UPCXX_EXTRA_NVSHMEM_ENGINE_FLAG_DEVICE_ENDS;
                                    c.stream = s;
                                    if (upcxx_extra_nvshmem_engine_copy(eng, &c, &tickets[k]) !=
                                        UPCXX_EXTRA_NVSHMEM_STATUS_OK)
                                        throw std::runtime_error("upcxx_extra_nvshmem_engine_copy failed");
                                    break;
                                }
                                case 2:
                                    cu.memcpy_async(reinterpret_cast<CUdeviceptr>(peer + off(k)),
                                                    reinterpret_cast<CUdeviceptr>(src + off(k)), n, cs);
                                    cu.event_record(evs[k], cs);
                                    break;
                                case 3:
                                    cu.memcpy_async(reinterpret_cast<CUdeviceptr>(peer + off(k)),
                                                    reinterpret_cast<CUdeviceptr>(src + off(k)), n, cs);
                                    break;
                                default:
                                    nvshmemx_putmem_on_stream(dst + off(k), src + off(k), n, next, s);
                            }
                        }
                        const double t = (now() - t0) / static_cast<double>(w);
                        if (layer == 4) nvshmemx_quiet_on_stream(s);
                        cudaStreamSynchronize(s);
                        if (layer == 0) {
                            while (done < static_cast<long>(w)) upcxx::progress();
                            done = 0;
                        }
                        if (layer == 1)
                            for (std::uint64_t t_k : tickets) {
                                int r = UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_NOT_READY;
                                while (r == UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_NOT_READY)
                                    upcxx_extra_nvshmem_engine_poll(eng, t_k, nullptr, &r);
                                upcxx_extra_nvshmem_engine_settled_t settled;
                                upcxx_extra_nvshmem_engine_complete(eng, t_k, r, nullptr, &settled);
                            }
                        return t;
                    };
                    stats layers[5];
                    for (int r = 0; r < warm + reps; r++)
                        for (int layer = 0; layer < 5; layer++) {
                            const double t = window(layer);
                            if (r >= warm) layers[layer].add(t);
                        }
                    std::printf("COST %zu %.3f %.3f %.3f %.3f %.3f\n", n, layers[0].lo * 1e6, layers[1].lo * 1e6,
                                layers[2].lo * 1e6, layers[3].lo * 1e6, layers[4].lo * 1e6);
                    std::fflush(stdout);
                }
                for (auto &e : evs) cu.event_destroy(e);
                upcxx_extra_nvshmem_engine_free(eng);
            }
            // One after() call's cost, on rank 0 alone, on an idle stream.
            if (me == 0 && after_calls > 0) {
                cudaStreamSynchronize(s);
                std::vector<upcxx::future<>> fs;
                fs.reserve(std::size_t(after_calls));
                const double t0 = now();
                for (int k = 0; k < after_calls; k++) fs.push_back(heap.after(s));
                const double calls = now() - t0;
                for (auto &f : fs) f.wait();
                std::printf("AFTERCALL %d %.3f %.1f\n", after_calls, calls * 1e6 / after_calls, (now() - t0) * 1e6);
                std::fflush(stdout);
            }
            // The word the stream writes right before after()'s point, in mapped host memory.
            std::uint32_t *reached = nullptr;
            CUdeviceptr reached_dev = 0;
            if (me == 0) cu.load();
            if (me == 0 && cu.write_value32 &&
                cudaHostAlloc(reinterpret_cast<void **>(&reached), sizeof *reached, cudaHostAllocMapped) ==
                    cudaSuccess &&
                cudaHostGetDevicePointer(reinterpret_cast<void **>(&reached_dev), reached, 0) == cudaSuccess)
                *reached = 0;
            else if (me == 0)
                std::printf("AFTER: no stream write of the benchmark's own: the last column is 0\n");
            // The host time after() frees, on rank 0 alone (a copy within its own heap).
            if (me == 0) {
                for (int r = 0; r < warm + reps; r++) {
                    cudaMemcpyAsync(dst, src, big, cudaMemcpyDeviceToDevice, s);
                    const double t0 = now();
                    cudaStreamSynchronize(s);
                    const double blocked = now() - t0;
                    cudaMemcpyAsync(dst, src, big, cudaMemcpyDeviceToDevice, s);
                    const std::uint32_t mark = static_cast<std::uint32_t>(r + 1);
                    if (reached_dev) cu.write_value32(s, reached_dev, mark, 0);
                    const double t1 = now();
                    upcxx::future<> f = heap.after(s);
                    const double call = now() - t1;
                    double in_progress = 0, seen = 0;
                    long calls = 0;
                    auto look = [&] {
                        if (reached_dev && seen == 0 && __atomic_load_n(reached, __ATOMIC_ACQUIRE) == mark)
                            seen = now();
                    };
                    while (!is_ready(f)) {
                        const double p0 = now();
                        upcxx::progress();
                        in_progress += now() - p0;
                        calls++;
                        // The host's own work would go here: spin briefly between polls.
                        for (const double until = now() + 2e-6; now() < until;) look();
                    }
                    const double ready = now();
                    look();
                    const double total = ready - t1;
                    if (r >= warm)
                        std::printf("AFTER %zu %.1f %.1f %.2f %.1f %.1f %ld %.2f %.1f\n", big, total * 1e6,
                                    blocked * 1e6, call * 1e6, in_progress * 1e6,
                                    100.0 * (1.0 - (call + in_progress) / total), calls,
                                    calls ? in_progress * 1e6 / static_cast<double>(calls) : 0.0,
                                    seen > 0 ? (ready - seen) * 1e6 : 0.0);
                }
                heap.check_copies();
            }
            if (reached) cudaFreeHost(reached);
            upcxx::barrier();
            heap.destroy();
        }
        cudaStreamDestroy(s);
        nvshmem_free(dst);
        nvshmem_free(src);
        upcxx::extra::nvshmem_finalize();
        if (me == 0) std::printf("RESULT stream_bench PASS\n");
    } catch (const std::exception &e) {
        std::printf("RESULT stream_bench FAIL (rank %d): %s\n", upcxx::rank_me(), e.what());
        rc = 1;
    }
    upcxx::finalize();
    return rc;
}
