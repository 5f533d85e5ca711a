// flood_bench: heap.copy against NVSHMEM's own host API on the same memory, in one process.
//
// For each size, rank 0 issues a window of W copies to (put) or from (get) the next PE's heap and
// waits for all of them, alternating between
//   batched     W x heap.copy(...) futures, then each waited for (small copies batched: the
//               heap's default copy_batch_bytes())
//   unbatched   the same with set_copy_batch_bytes(0): one cudaMemcpyAsync per copy
//   putmem_nbi  W x nvshmem_putmem_nbi / nvshmem_getmem_nbi, then nvshmem_quiet()
//   region      (NVSHMEM 3.8 and later) the same calls inside a host RMA region with the hint
//               NVSHMEMX_REGION_HINT_BATCH_RMA (nvshmemx_region_start ... nvshmemx_region_stop),
//               then nvshmem_quiet(): NVSHMEM's own batching of the window, beside ours
// after warm-up windows, R repetitions each (in ABCDABCD order, so drift hits all alike). W = 1
// is one blocking copy (its latency). One line per (direction, size, window), times in us:
//   FLOOD <dir> <bytes> <window> <batched min> <batched max> <unbatched min> <unbatched max>
//         <putmem_nbi min> <putmem_nbi max> <putmem_nbi min / batched min>
//         <unbatched min / batched min> [<region min> <region max> <region min / batched min>]
// A ratio above 1 means the batched heap.copy moved the window faster. The region columns are
// there when the program was built against NVSHMEM 3.8 or later headers (the first line says so);
// "n/a" when nvshmemx_region_start refused the region at run time. "both" runs put and get at
// once (rank 0 puts while rank 1 gets, and the reverse), each rank timing its own direction.
//
//   upcxx-run -n 2 ./flood_bench [-w 1,10,100,1000] [-s 8] [-m 4194304] [-r 6] [-W 2] [-d put,get,both]
// Against NVSHMEM's regions, the small copies they batch: -w 10,100,1000 -s 8 -m 262144.
//
// Without a GPU it says SKIPPED and exits 77 (the CUDA + NVSHMEM stand-in of tests/standin runs it,
// with no meaning in its figures).
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "bench_util.hpp"

// NVSHMEM 3.8.0 added host RMA regions (nvshmemx_region_start/stop, host/nvshmemx_api.h).
#if NVSHMEM_VENDOR_MAJOR_VERSION * 100 + NVSHMEM_VENDOR_MINOR_VERSION >= 308
#define UXN_FLOOD_REGION 1
#else
#define UXN_FLOOD_REGION 0
#endif

using bench::now;
using bench::parse_list;
using bench::stats;

int main(int argc, char **argv) {
    upcxx::init();
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 || upcxx::rank_n() < 2) {
        if (!upcxx::rank_me()) std::printf("SKIPPED: flood_bench needs a GPU and 2 ranks\n");
        upcxx::finalize();
        return 77;
    }
    std::vector<std::size_t> windows{1, 10, 100, 1000};
    std::vector<std::string> dirs{"put", "get", "both"};
    std::size_t min_size = 8, max_size = std::size_t(4) << 20;
    int reps = 6, warm = 2;
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
        else if (a == "-d") {
            dirs.clear();
            for (std::string l = argv[i + 1]; !l.empty();) {
                const std::size_t c = l.find(',');
                dirs.push_back(l.substr(0, c));
                l = c == std::string::npos ? "" : l.substr(c + 1);
            }
        }
    }
    const std::size_t max_window = *std::max_element(windows.begin(), windows.end());
    cudaSetDevice(upcxx::local_team().rank_me() % ndev);
    int rc = 0;
    try {
        upcxx::extra::nvshmem_init();
        const int me = upcxx::rank_me(), next = (me + 1) % upcxx::rank_n();
        // Each copy of a window has its own bytes: max_size per copy, the window's copies side by side
        // up to 256 MiB (larger windows reuse the space modulo).
        const std::size_t span = std::min(max_size * max_window, std::size_t(256) << 20);
        char *src = static_cast<char *>(nvshmem_malloc(span));
        char *dst = static_cast<char *>(nvshmem_malloc(span));
        cudaMemset(src, me + 1, span);
        cudaDeviceSynchronize();
        {
            upcxx::extra::nvshmem_heap heap;
            const auto lsrc = heap.to_global_ptr(src), rdst = heap.to_global_ptr(dst, next);
            const auto rsrc = heap.to_global_ptr(src, next), ldst = heap.to_global_ptr(dst);
            const std::size_t batch_bytes = heap.copy_batch_bytes();
#if UXN_FLOOD_REGION
            // Whether this NVSHMEM opens a batching region here (one try; its status otherwise).
            const nvshmemx_region_attrs_t region_attrs = {NVSHMEMX_REGION_HINT_BATCH_RMA, {0}};
            int region_status = 0;
            {
                nvshmemx_region_handle_t rh = 0;
                region_status = nvshmemx_region_start(&rh, &region_attrs);
                if (region_status == 0) region_status = nvshmemx_region_stop(rh);
            }
            const bool region = region_status == 0;
            const std::string region_note = region ? "NVSHMEM's host RMA regions (BATCH_RMA) measured"
                                                   : "nvshmemx_region_start/stop returned " +
                                                         std::to_string(region_status) + ": region columns n/a";
#else
            const bool region = false;
            const std::string region_note = "no host RMA regions in these NVSHMEM headers (3.8 and later have them)";
#endif
            if (me == 0)
                std::printf(
                    "flood_bench: %d ranks, %d GPU(s) visible, heap.copy %s, batched up to %zu bytes, NVSHMEM "
                    "%d.%d, %s\n",
                    upcxx::rank_n(), ndev, upcxx::extra::nvshmem_heap::fast_copies() ? "fast mode" : "public-API mode",
                    batch_bytes, NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION, region_note.c_str());
            for (const std::string &d : dirs) {
                const char *dir = d.c_str();
                // Who times what: put and get on rank 0 alone; both: rank 0 puts, rank 1 gets.
                const bool active = d == "both" ? me < 2 : me == 0;
                const bool putting = d == "put" || (d == "both" && me == 0);
                for (std::size_t w : windows)
                    for (std::size_t n = min_size; n <= max_size; n *= 2) {
                        const std::size_t slots = std::max<std::size_t>(1, span / n);
                        auto off = [&](std::size_t k) { return static_cast<std::ptrdiff_t>((k % slots) * n); };
                        auto run_heap = [&](std::size_t batch) {
                            heap.set_copy_batch_bytes(batch);
                            std::vector<upcxx::future<>> fs;
                            fs.reserve(w);
                            const double t0 = now();
                            for (std::size_t k = 0; k < w; k++)
                                fs.push_back(putting ? heap.copy(lsrc + off(k), rdst + off(k), n)
                                                     : heap.copy(rsrc + off(k), ldst + off(k), n));
                            for (auto &f : fs) f.wait();
                            return now() - t0;
                        };
                        auto run_nvshmem = [&] {
                            const double t0 = now();
                            for (std::size_t k = 0; k < w; k++) {
                                const std::size_t o = static_cast<std::size_t>(off(k));
                                if (putting)
                                    nvshmem_putmem_nbi(dst + o, src + o, n, next);
                                else
                                    nvshmem_getmem_nbi(dst + o, src + o, n, next);
                            }
                            nvshmem_quiet();
                            return now() - t0;
                        };
                        // The same calls in one NVSHMEM batching region (stopped before the quiet).
                        auto run_region = [&] {
                            const double t0 = now();
#if UXN_FLOOD_REGION
                            nvshmemx_region_handle_t rh = 0;
                            const bool opened = nvshmemx_region_start(&rh, &region_attrs) == 0;
                            for (std::size_t k = 0; k < w; k++) {
                                const std::size_t o = static_cast<std::size_t>(off(k));
                                if (putting)
                                    nvshmem_putmem_nbi(dst + o, src + o, n, next);
                                else
                                    nvshmem_getmem_nbi(dst + o, src + o, n, next);
                            }
                            if (opened) nvshmemx_region_stop(rh);
                            nvshmem_quiet();
#endif
                            return now() - t0;
                        };
                        upcxx::barrier();
                        stats h, u, v, g;
                        if (active) {
                            for (int i = 0; i < warm; i++) {
                                run_heap(batch_bytes), run_heap(0), run_nvshmem();
                                if (region) run_region();
                            }
                            for (int i = 0; i < reps; i++) {
                                h.add(run_heap(batch_bytes));
                                u.add(run_heap(0));
                                v.add(run_nvshmem());
                                if (region) g.add(run_region());
                            }
                        }
                        upcxx::barrier();
                        if (active && (d != "both" || me == 0 || me == 1)) {
                            const char *label = d == "both" ? (putting ? "both/put" : "both/get") : dir;
                            std::printf("FLOOD %s %zu %zu %.2f %.2f %.2f %.2f %.2f %.2f %.3f %.3f", label, n, w,
                                        h.lo * 1e6, h.hi * 1e6, u.lo * 1e6, u.hi * 1e6, v.lo * 1e6, v.hi * 1e6,
                                        v.lo / h.lo, u.lo / h.lo);
                            if (region)
                                std::printf(" %.2f %.2f %.3f\n", g.lo * 1e6, g.hi * 1e6, g.lo / h.lo);
                            else if (UXN_FLOOD_REGION)
                                std::printf(" n/a n/a n/a\n");
                            else
                                std::printf("\n");
                            std::fflush(stdout);
                        }
                        upcxx::barrier();
                    }
            }
            heap.destroy();
        }
        nvshmem_free(dst);
        nvshmem_free(src);
        upcxx::extra::nvshmem_finalize();
    } catch (const upcxx::extra::nvshmem_error &e) {
        std::fprintf(stderr, "flood_bench (rank %d): %s\n", upcxx::rank_me(), e.what());
        rc = 1;
    }
    if (!upcxx::rank_me()) std::printf("RESULT flood_bench %s\n", rc ? "FAIL" : "DONE");
    upcxx::finalize();
    return rc;
}
