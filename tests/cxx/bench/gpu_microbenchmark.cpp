// gpu_microbenchmark: UPC++ 2023.9.0's bench/gpu_microbenchmark.cpp, ported onto NVSHMEM's symmetric
// heap (upcxx::extra::nvshmem_heap) and heap.copy.
//
// Derived from gpu_microbenchmark.cpp of the UPC++ 2023.9.0 release (bench/), which carries the
// following notice (the UPC++ LICENSE.txt):
//
//   UPC++ Copyright (c) 2017-2023, The Regents of the University of California,
//   through Lawrence Berkeley National Laboratory (subject to receipt of any
//   required approvals from the U.S. Dept. of Energy).  All rights reserved.
//
//   Redistribution and use in source and binary forms, with or without
//   modification, are permitted provided that the following conditions are met:
//
//   (1) Redistributions of source code must retain the above copyright notice, this
//   list of conditions and the following disclaimer.
//
//   (2) Redistributions in binary form must reproduce the above copyright notice,
//   this list of conditions and the following disclaimer in the documentation
//   and/or other materials provided with the distribution.
//
//   (3) Neither the name of the University of California, Lawrence Berkeley
//   National Laboratory, U.S. Dept. of Energy, nor the names of its contributors
//   may be used to endorse or promote products derived from this software without
//   specific prior written permission.
//
//   THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND
//   ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED
//   WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
//   DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT OWNER OR CONTRIBUTORS BE LIABLE FOR
//   ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES
//   (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES;
//   LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON
//   ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT
//   (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS
//   SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
//
//   (The full text, with its "Enhancements" clause, is UPC++'s LICENSE.txt; the unmodified
//   original is in ../shared/upcxx/bench-2023.9.0/.)
//
// ONE source, five programs, chosen at compile time with -DUXN_BENCH_VARIANT=<variant>:
//   upcxx_own   as UPC++ ships it: the GPU segment is UPC++'s own (make_gpu_allocator, or
//               device_allocator before 2022.3), copies are upcxx::copy. NVSHMEM is not initialised.
//   upcxx_heap  the GPU segment is nvshmem_malloc'd memory wrapped by upcxx::extra::nvshmem_heap
//               (heap.to_global_ptr), copies are upcxx::copy on the heap's global pointers.
//   heap_copy   the same segment, copies are heap.copy (the drop-in for upcxx::copy).
//   nvshmem     the same segment, NVSHMEM's own host-initiated operations at the same sizes and
//               windows (NVSHMEM's perftest/host/pt-to-pt/bw.cpp measures the same way):
//                 blocking:  nvshmem_putmem / nvshmem_getmem, then nvshmem_quiet, per copy;
//                 flood:     a window of nvshmem_putmem_nbi / nvshmem_getmem_nbi closed by one
//                            nvshmem_quiet;
//               only where the remote end is NVSHMEM memory (RGpu); the remote end of the RSh
//               columns (UPC++'s shared host segment) is no NVSHMEM memory: NA. NVSHMEM has no
//               remote_cx: the "flood remote_cx" tables are NA.
//   paired      the segment of heap_copy; for every measured cell (test, column, size) helper() runs
//               heap.copy and upcxx::copy on the same memory alternately in this one process, R
//               rounds (-r), heap.copy first in even rounds, upcxx::copy first in odd ones (a flag
//               read once per window picks the copy). Each copy's window loop is a function of its
//               own (paired_window / paired_remote_window, never inlined), so each is compiled as in
//               its own program; one loop holding both copies would share one register allocation
//               between them, and whichever copy it favours runs faster. CSV only (-csv): per cell a
//               line of variant heap_copy and one of upcxx_heap (value: the median of the R rounds in
//               the test's unit; note: median-of-R;min=..;max=..), then one of variant ratio (unit x,
//               value: the median over the rounds of that round's upcxx::copy time / heap.copy time,
//               > 1: heap.copy faster; note: min=..;max=.. of the per-round ratios). It skips what
//               upcxx_heap skips.
//
// The timing logic (helper(): warmup, trials, windows, barriers, the remote_cx flood with its
// promises and acks; trials_for_size) is UPC++'s, unchanged; the copy call and its completion are
// the variant's (bench_copy / bench_complete). What the port adds:
//   -csv         machine-readable lines instead of the tables:
//                  CSV,variant,upcxx,pattern,test,column,bytes,window,trials,unit,value,note
//                (value NA with a note where a column is not applicable or skipped; a header
//                line "CSV,variant,..." first); scripts/plot-microbench.py reads them.
//   -s <bytes>   the smallest copy of the bandwidth tables (UPC++: 1; scripts/gpu-microbench.sh: 8)
//   -x <bytes>   one extra row after the doubling ones (64 MiB in scripts/gpu-microbench.sh), run with
//   -xw <n>      its own window (default 4: 100 copies of 64 MiB in flight would need UPC++ bounce
//                buffers beyond a 1 GB shared heap)
//   -bind <cpu>  rank r pins its thread to CPU cpu + r (sched_setaffinity) once NVSHMEM and the
//                segments are set up, before the tests (threads started earlier keep their CPUs);
//                off by default
//   -r <rounds>  paired only: the rounds of each cell (default 9)
// With UPC++ 2020.10 (no remote_cx on copy) the "flood remote_cx" tables are skipped, visibly
// (NA, note "no-remote_cx-on-copy-in-2020.10"); so are the columns on which that release's
// upcxx::copy is known to crash or move wrong bytes between private host memory and another
// rank's memory (docs/gpu-results.md): Priv<->RSh in every UPC++ variant, Priv<->RGpu in
// upcxx_own and upcxx_heap (heap_copy moves those through NVSHMEM's mapping).
// Without a GPU every variant prints SKIPPED and exits 77.
//
//   UPCXX_SHARED_HEAP_SIZE=1GB NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo NVSHMEM_DISABLE_NVLS=1
//     upcxx-run -n 2 -- ./gpu_microbenchmark_heap_copy -csv -s 8 -x 67108864   (or GASNET_PSHM_NODES=2 ./...)
#include <upcxx/upcxx.hpp>
#include <iostream>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <string>
#include <unistd.h>
#include <sched.h>
#include <algorithm>
#include <vector>

#include <cuda_runtime_api.h>

// The variant.
#define UXN_V_upcxx_own 1
#define UXN_V_upcxx_heap 2
#define UXN_V_heap_copy 3
#define UXN_V_nvshmem 4
#define UXN_V_paired 5
#define UXN_V_CAT_(a, b) a##b
#define UXN_V_CAT(a, b) UXN_V_CAT_(a, b)
#define UXN_STR_(x) #x
#define UXN_STR(x) UXN_STR_(x)
#ifndef UXN_BENCH_VARIANT
#error "define UXN_BENCH_VARIANT: upcxx_own, upcxx_heap, heap_copy, nvshmem or paired"
#endif
#define UXN_VARIANT UXN_V_CAT(UXN_V_, UXN_BENCH_VARIANT)
#if UXN_VARIANT < 1 || UXN_VARIANT > 5
#error "UXN_BENCH_VARIANT must be upcxx_own, upcxx_heap, heap_copy, nvshmem or paired"
#endif
#define UXN_USES_HEAP (UXN_VARIANT != UXN_V_upcxx_own)
static const char *const variant_name = UXN_STR(UXN_BENCH_VARIANT);

#if UXN_USES_HEAP
#include <nvshmem.h>
#include <nvshmemx.h>
#include "upcxx_extra/nvshmem.hpp"
#endif

// upcxx::copy takes remote_cx from UPC++ 2021.3.0 on.
#if UPCXX_VERSION >= 20210300L
#define UXN_COPY_REMOTE_CX 1
#else
#define UXN_COPY_REMOTE_CX 0
#endif

using namespace std;
using namespace upcxx;

#ifndef DEVICE
#if UPCXX_KIND_ZE
#define DEVICE ze_device
#elif UPCXX_KIND_HIP
#define DEVICE hip_device
#elif UPCXX_KIND_CUDA || UPCXX_CUDA_ENABLED
#define DEVICE cuda_device
#else
#error This test requires UPC++ built with device support.
#endif
#endif
using Device = upcxx::DEVICE;
#ifndef STRINGIFY
#define STRINGIFY_HELPER(x) #x
#define STRINGIFY(x) STRINGIFY_HELPER(x)
#endif
std::string DeviceStr(STRINGIFY(DEVICE));

bool run_gg = false;
bool run_sg = false;
bool run_gs = false;
bool run_ss = false;
bool run_ps = false;
bool run_pg = false;
bool run_uni = false;
bool run_bi = false;
bool run_put = false;
bool run_get = false;
bool run_block = false;
bool run_flood = false;
bool run_remote = false;
bool use_downcast_self = false;
bool use_downcast_peer = false;
bool use_concise = false;
bool use_firstlast = false;
bool use_csv = false;

const char *Private() {
    if (use_downcast_self)
        return "Downcast-Self";
    else if (use_downcast_peer)
        return "Downcast-Peer";
    else
        return "Private";
}
std::string Priv() {
    if (use_downcast_self)
        return "DShS";
    else if (use_downcast_peer)
        return "DShP";
    else
        return "Priv";
}

static bool is_active_rank;
static long max_warmup, window_size, max_trials, max_volume;

long trials_for_size(long msg_sz) {
    if (!max_volume)
        return max_trials;
    else {
        long window_volume = window_size * msg_sz;
        if (!window_volume) return 1;  // error in cmdline parsing
        long trial_cap = (max_volume + window_volume - 1) / window_volume;
        return std::min(trial_cap, max_trials);
    }
}

template <typename T>
intrank_t owner(T *) {
    return rank_me();
}
template <typename T, memory_kind K>
intrank_t owner(global_ptr<T, K> p) {
    return p.where();
}

enum class sync_type { blocking_op, flood_op, flood_remote };

using gp_gpu_t = global_ptr<uint8_t, Device::kind>;
using gp_host_t = global_ptr<uint8_t, memory_kind::host>;

// ---- the variant's copy and completion ----------------------------------------------------------
#if UXN_USES_HEAP
static upcxx::extra::nvshmem_heap *the_heap;
#endif
#if UXN_VARIANT == UXN_V_nvshmem
// The symmetric array behind local_gpu_array / remote_gpu_array (the same symmetric address on
// every PE) and the partner's PE.
static uint8_t *gpu_sym;
static int partner_pe = -1;
// The local end as a raw address: the symmetric array for a GPU pointer, the host memory itself.
static void *local_raw(gp_gpu_t) { return gpu_sym; }
static void *local_raw(gp_host_t p) { return p.local(); }
static void *local_raw(uint8_t *p) { return p; }
// put: the destination is the partner's GPU array; get: the source is.
// Never called (skip_reason() leaves the columns whose remote end is not NVSHMEM memory out).
template <sync_type sync, typename S, typename D>
static void nvshmem_op(S, D, long) {
    UPCXX_ASSERT_ALWAYS(false, "no NVSHMEM operation for this column");
}
template <sync_type sync, typename S>
static void nvshmem_op(S src, gp_gpu_t dst, long len) {
    (void)dst;
    if (sync == sync_type::blocking_op)
        nvshmem_putmem(gpu_sym, local_raw(src), len, partner_pe);
    else
        nvshmem_putmem_nbi(gpu_sym, local_raw(src), len, partner_pe);
}
template <sync_type sync, typename D>
static void nvshmem_op(gp_gpu_t src, D dst, long len) {
    (void)src;
    if (sync == sync_type::blocking_op)
        nvshmem_getmem(local_raw(dst), gpu_sym, len, partner_pe);
    else
        nvshmem_getmem_nbi(local_raw(dst), gpu_sym, len, partner_pe);
}
template <sync_type sync>
static void nvshmem_op(gp_gpu_t src, gp_gpu_t dst, long len) {
    (void)dst;
    if (src.where() == rank_me()) {  // LGpu -> RGpu
        if (sync == sync_type::blocking_op)
            nvshmem_putmem(gpu_sym, gpu_sym, len, partner_pe);
        else
            nvshmem_putmem_nbi(gpu_sym, gpu_sym, len, partner_pe);
    } else {  // RGpu -> LGpu
        if (sync == sync_type::blocking_op)
            nvshmem_getmem(gpu_sym, gpu_sym, len, partner_pe);
        else
            nvshmem_getmem_nbi(gpu_sym, gpu_sym, len, partner_pe);
    }
}
#endif

#if UXN_VARIANT == UXN_V_paired
// The copy that helper() times now: heap.copy (true) or upcxx::copy (false); set by measure().
static bool paired_heap_copy = true;
#endif

// One copy of the window, its operation completion notifying `prom`.
template <sync_type sync, typename src_ptr_type, typename dst_ptr_type>
static void bench_copy(src_ptr_type src_ptr, dst_ptr_type dst_ptr, long len, upcxx::promise<> &prom) {
#if UXN_VARIANT == UXN_V_heap_copy
    the_heap->copy(src_ptr, dst_ptr, len, upcxx::operation_cx::as_promise(prom));
#elif UXN_VARIANT == UXN_V_nvshmem
    (void)prom;
    nvshmem_op<sync>(src_ptr, dst_ptr, len);
#else
    upcxx::copy(src_ptr, dst_ptr, len, upcxx::operation_cx::as_promise(prom));
#endif
}
// Waits for the copies notifying `prom` (one copy when blocking, the window when flooding).
static void bench_complete(upcxx::promise<> &prom) {
#if UXN_VARIANT == UXN_V_nvshmem
    nvshmem_quiet();
#endif
    prom.finalize().wait();
}
#if UXN_COPY_REMOTE_CX && UXN_VARIANT != UXN_V_nvshmem
template <typename src_ptr_type, typename dst_ptr_type, typename Cx>
static void bench_copy_remote(src_ptr_type src_ptr, dst_ptr_type dst_ptr, long len, const Cx &rem_cx) {
#if UXN_VARIANT == UXN_V_heap_copy
    the_heap->copy(src_ptr, dst_ptr, len, rem_cx);
#else
    upcxx::copy(src_ptr, dst_ptr, len, rem_cx);
#endif
}
#endif

#if UXN_VARIANT == UXN_V_paired
// One window of copies (each its own promise round when blocking), every copy heap.copy (heap) or
// upcxx::copy (!heap): a function per copy, so neither loop shares the other's registers.
template <sync_type sync, bool heap, typename src_ptr_type, typename dst_ptr_type>
[[gnu::noinline]] static void paired_window(src_ptr_type src_ptr, dst_ptr_type dst_ptr, long len,
                                            upcxx::promise<> &prom) {
    for (long j = 0; j < window_size; j++) {
        if constexpr (heap)
            the_heap->copy(src_ptr, dst_ptr, len, upcxx::operation_cx::as_promise(prom));
        else
            upcxx::copy(src_ptr, dst_ptr, len, upcxx::operation_cx::as_promise(prom));
        if (sync == sync_type::blocking_op) {
            bench_complete(prom);
            prom = upcxx::promise<>();
        }
    }
}
#if UXN_COPY_REMOTE_CX
template <bool heap, typename src_ptr_type, typename dst_ptr_type, typename Cx>
[[gnu::noinline]] static void paired_remote_window(src_ptr_type src_ptr, dst_ptr_type dst_ptr, long len,
                                                   const Cx &rem_cx) {
    for (long j = 0; j < window_size; j++) {
        if constexpr (heap)
            the_heap->copy(src_ptr, dst_ptr, len, rem_cx);
        else
            upcxx::copy(src_ptr, dst_ptr, len, rem_cx);
    }
}
#endif
#endif

// Why a column is not measured in this build ("" when it is).
static const char *skip_reason(sync_type sync, bool private_end, bool remote_gpu_end) {
#if UXN_VARIANT == UXN_V_nvshmem
    (void)private_end;
    if (sync == sync_type::flood_remote) return "nvshmem-has-no-remote_cx";
    if (!remote_gpu_end) return "remote-end-is-not-nvshmem-memory";
#else
    if (!UXN_COPY_REMOTE_CX && sync == sync_type::flood_remote) return "no-remote_cx-on-copy-in-2020.10";
#if UPCXX_VERSION < 20210300L
    // (paired times upcxx::copy too: it skips what upcxx_heap skips.)
    if (private_end && (!remote_gpu_end || UXN_VARIANT != UXN_V_heap_copy))
        return "upcxx-2020.10-copy-of-private-memory-crashes";
#endif
    (void)private_end;
    (void)remote_gpu_end;
#endif
    return "";
}

template <sync_type sync, typename src_ptr_type, typename dst_ptr_type>
static double helper(long len, src_ptr_type src_ptr, dst_ptr_type dst_ptr) {
    double elapsed = 0.0;
    long trials = trials_for_size(len);
    long warmup = std::min(max_warmup, trials);
    // if (!rank_me()) std::cout << len << ":" << trials << std::endl;

    if (sync == sync_type::flood_remote) {
#if UXN_COPY_REMOTE_CX && UXN_VARIANT != UXN_V_nvshmem
        static promise<> data_arrival;
        static promise<> ack;
        static int my_sender;
        my_sender = -1;

        upcxx::barrier();
        if (is_active_rank) {  // inform target ranks of their sender
            rpc(
                owner(dst_ptr),
                [](int me) {
                    UPCXX_ASSERT(my_sender == -1);
                    my_sender = me;              // register sender
                    data_arrival = promise<>();  // setup for first window
                    data_arrival.require_anonymous(window_size);
                },
                rank_me())
                .wait();
        }
        upcxx::barrier();

        std::chrono::steady_clock::time_point start;

        for (long i = 0; i < warmup + trials; i++) {  // all ranks run trial loop
            if (i == warmup) {                        // done with warmup
                upcxx::barrier();
                start = std::chrono::steady_clock::now();  // begin timed region
            }

            if (is_active_rank) {
                static auto rem_cx = remote_cx::as_rpc([]() { data_arrival.fulfill_anonymous(1); });
                ack = promise<>();  // prepare for ack
                ack.require_anonymous(1);
#if UXN_VARIANT == UXN_V_paired
                if (paired_heap_copy)
                    paired_remote_window<true>(src_ptr, dst_ptr, len, rem_cx);
                else
                    paired_remote_window<false>(src_ptr, dst_ptr, len, rem_cx);
#else
                for (long j = 0; j < window_size; j++) {  // send copies
                    bench_copy_remote(src_ptr, dst_ptr, len, rem_cx);
                }
#endif
            }
            if (my_sender >= 0) {                // this process is a target
                data_arrival.finalize().wait();  // await arrival of all copies
                data_arrival = promise<>();      // reset for next window
                data_arrival.require_anonymous(window_size);
                rpc_ff(my_sender, []() { ack.fulfill_anonymous(1); });  // send ack
            }
            if (is_active_rank) {
                ack.finalize().wait();  // await acknowledgment
            }
        }

        upcxx::barrier();  // ensure timed region includes comms from all ranks

        std::chrono::steady_clock::time_point end = std::chrono::steady_clock::now();
        elapsed = std::chrono::duration<double>(end - start).count();

        return elapsed;
#else
        (void)src_ptr;
        (void)dst_ptr;
        return 0.0;  // not reached: skip_reason() names why
#endif

    } else {  // blocking_op, flood_op

        upcxx::barrier();

        if (is_active_rank) {
            std::chrono::steady_clock::time_point start;

            for (long i = 0; i < warmup + trials; i++) {
                if (i == warmup) {  // done with warmup
                    upcxx::barrier();
                    start = std::chrono::steady_clock::now();  // begin timed region
                }

                upcxx::promise<> prom;
#if UXN_VARIANT == UXN_V_paired
                if (paired_heap_copy)
                    paired_window<sync, true>(src_ptr, dst_ptr, len, prom);
                else
                    paired_window<sync, false>(src_ptr, dst_ptr, len, prom);
#else
                for (long j = 0; j < window_size; j++) {
                    bench_copy<sync>(src_ptr, dst_ptr, len, prom);
                    if (sync == sync_type::blocking_op) {
                        bench_complete(prom);
                        prom = upcxx::promise<>();
                    }
                }
#endif
                bench_complete(prom);
            }

            upcxx::barrier();  // ensure timed region includes comms from all ranks

            std::chrono::steady_clock::time_point end = std::chrono::steady_clock::now();
            elapsed = std::chrono::duration<double>(end - start).count();
        } else {
            upcxx::barrier();
            upcxx::barrier();
        }

        return elapsed;
    }
}

// The 12 columns, in UPC++'s order. time < 0: not measured (skip says why).
enum col_id {
    local_gpu_to_remote_gpu,
    remote_gpu_to_local_gpu,
    local_shared_to_remote_gpu,
    remote_gpu_to_local_shared,
    local_gpu_to_remote_shared,
    remote_shared_to_local_gpu,
    local_shared_to_remote_shared,
    remote_shared_to_local_shared,
    local_private_to_remote_shared,
    remote_shared_to_local_private,
    local_private_to_remote_gpu,
    remote_gpu_to_local_private,
    n_cols
};
struct column {
    double time;
    const char *skip;
};
static column cols[n_cols];
static bool col_selected(int c) {
    const bool put = c % 2 == 0;
    if (!(put ? run_put : run_get)) return false;
    switch (c / 2) {
        case 0:
            return run_gg;
        case 1:
            return run_sg;
        case 2:
            return run_gs;
        case 3:
            return run_ss;
        case 4:
            return run_ps;
        default:
            return run_pg;
    }
}
static std::string col_name(int c) {
    switch (c) {
        case local_gpu_to_remote_gpu:
            return "LGpu->RGpu";
        case remote_gpu_to_local_gpu:
            return "RGpu->LGpu";
        case local_shared_to_remote_gpu:
            return "LSh->RGpu";
        case remote_gpu_to_local_shared:
            return "RGpu->LSh";
        case local_gpu_to_remote_shared:
            return "LGpu->RSh";
        case remote_shared_to_local_gpu:
            return "RSh->LGpu";
        case local_shared_to_remote_shared:
            return "LSh->RSh";
        case remote_shared_to_local_shared:
            return "RSh->LSh";
        case local_private_to_remote_shared:
            return Priv() + "->RSh";
        case remote_shared_to_local_private:
            return "RSh->" + Priv();
        case local_private_to_remote_gpu:
            return Priv() + "->RGpu";
        default:
            return "RGpu->" + Priv();
    }
}
static double row_time() {
    double t = 0;
    for (int c = 0; c < n_cols; c++)
        if (col_selected(c) && cols[c].time > 0) t += cols[c].time;
    return t;
}

gp_gpu_t local_gpu_array;
gp_gpu_t remote_gpu_array;
gp_host_t local_shared_array;
gp_host_t remote_shared_array;
uint8_t *local_private_array;

#if UXN_VARIANT == UXN_V_paired
// The rounds of each column of the current row: heap.copy's and upcxx::copy's times (seconds).
static long paired_rounds = 9;
struct paired_column {
    std::vector<double> heap, upcxx;
};
static paired_column paired_cols[n_cols];
#endif

template <sync_type sync, typename S, typename D>
static void measure(int c, long msg_len, S src, D dst, bool private_end, bool remote_gpu_end) {
    cols[c].skip = skip_reason(sync, private_end, remote_gpu_end);
    cols[c].time = -1;
#if UXN_VARIANT == UXN_V_paired
    // heap.copy and upcxx::copy alternately, R rounds: heap.copy first in even rounds. time: 1
    // (measured; the rounds are in paired_cols).
    paired_column &pc = paired_cols[c];
    pc.heap.assign(paired_rounds, -1);
    pc.upcxx.assign(paired_rounds, -1);
    if (*cols[c].skip) return;
    for (long r = 0; r < paired_rounds; r++) {
        for (int k = 0; k < 2; k++) {
            paired_heap_copy = (k == 0) == (r % 2 == 0);
            const double t = helper<sync>(msg_len, src, dst);
            (paired_heap_copy ? pc.heap : pc.upcxx)[r] = t;
        }
    }
    paired_heap_copy = true;
    cols[c].time = 1;
#else
    if (!*cols[c].skip) cols[c].time = helper<sync>(msg_len, src, dst);
#endif
}

template <sync_type sync>
static void run_all_copies(long msg_len) {
    if (run_gg) {
        if (run_put) measure<sync>(local_gpu_to_remote_gpu, msg_len, local_gpu_array, remote_gpu_array, false, true);
        if (run_get) measure<sync>(remote_gpu_to_local_gpu, msg_len, remote_gpu_array, local_gpu_array, false, true);
    }

    if (run_sg) {
        if (run_put)
            measure<sync>(local_shared_to_remote_gpu, msg_len, local_shared_array, remote_gpu_array, false, true);
        if (run_get)
            measure<sync>(remote_gpu_to_local_shared, msg_len, remote_gpu_array, local_shared_array, false, true);
    }

    if (run_gs) {
        if (run_put)
            measure<sync>(local_gpu_to_remote_shared, msg_len, local_gpu_array, remote_shared_array, false, false);
        if (run_get)
            measure<sync>(remote_shared_to_local_gpu, msg_len, remote_shared_array, local_gpu_array, false, false);
    }

    if (run_ss) {
        if (run_put)
            measure<sync>(local_shared_to_remote_shared, msg_len, local_shared_array, remote_shared_array, false,
                          false);
        if (run_get)
            measure<sync>(remote_shared_to_local_shared, msg_len, remote_shared_array, local_shared_array, false,
                          false);
    }

    if (run_ps) {
        if (run_put)
            measure<sync>(local_private_to_remote_shared, msg_len, local_private_array, remote_shared_array, true,
                          false);
        if (run_get)
            measure<sync>(remote_shared_to_local_private, msg_len, remote_shared_array, local_private_array, true,
                          false);
    }

    if (run_pg) {
        if (run_put)
            measure<sync>(local_private_to_remote_gpu, msg_len, local_private_array, remote_gpu_array, true, true);
        if (run_get)
            measure<sync>(remote_gpu_to_local_private, msg_len, remote_gpu_array, local_private_array, true, true);
    }
}

static void legend() {
    if (!use_concise || rank_me()) return;
    std::cout << "\n=== Output Legend ===\n" << std::endl;
    std::cout << "Copy-Size : Size of each copy() operation payload, in bytes" << std::endl;
    std::cout << "Row-Time : Sum of timed region durations for this row (at this Copy-Size), in seconds" << std::endl;
    std::cout << "X->Y : Performance measured for copy from memory region X to memory region Y" << std::endl;
    std::cout << "LGpu : Local GPU memory (owned by this process)" << std::endl;
    std::cout << "RGpu : Remote GPU memory (owned by another process)" << std::endl;
    std::cout << "LSh  : Local Shared Host memory (owned by this process)" << std::endl;
    std::cout << "RSh  : Remote Shared Host memory (owned by another process)" << std::endl;
    if (use_downcast_self)
        std::cout << "DShS : Downcast Shared Host memory (owned by this process)" << std::endl;
    else if (use_downcast_peer)
        std::cout << "DShP : Downcast Shared Host memory (owned by a local_team peer)" << std::endl;
    else
        std::cout << "Priv : Private Host memory (owned by this process)" << std::endl;
    std::cout << "NA   : not measured in this build (see the program's header)" << std::endl;
}

static const char *desc;
static const char *csv_pattern, *csv_test;  // the current table, for -csv
static void test_header(const char *_desc, const char *pattern, const char *test) {
    desc = _desc;
    csv_pattern = pattern;
    csv_test = test;
    if (rank_me()) return;
    if (use_csv) return;

    std::cout << "\n=== Testing " << desc << " ===\n" << std::endl;
    if (use_concise) {
        auto col = std::setw(12);
        std::cout << col << "Copy-Size";
        for (int c = 0; c < n_cols; c++)
            if (col_selected(c)) std::cout << col << col_name(c);
        std::cout << col << "Row-Time" << std::endl;
        return;
    }
}

// A CSV line up to its value: CSV,variant,upcxx,pattern,test,column,bytes,window,trials,unit,
static void csv_head(std::ostringstream &oss, const char *variant, int c, long msg_len, long trials, const char *unit) {
    oss << "CSV," << variant << "," << UPCXX_VERSION << "," << csv_pattern << "," << csv_test << "," << col_name(c)
        << "," << msg_len << "," << window_size << "," << trials << "," << unit << ",";
}

#if UXN_VARIANT == UXN_V_paired
static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
// The three lines of column c: heap_copy and upcxx_heap (the median of the rounds of `per_col`),
// ratio (the median of the rounds' upcxx::copy time / heap.copy time); NA with the reason.
template <typename F>
static void print_csv_paired(int c, long msg_len, long trials, const char *unit, F per_col) {
    const paired_column &pc = paired_cols[c];
    bool timed = cols[c].time > 0;
    for (long r = 0; r < paired_rounds; r++) timed = timed && pc.heap[r] > 0 && pc.upcxx[r] > 0;
    std::vector<double> ratio;
    for (long r = 0; timed && r < paired_rounds; r++) ratio.push_back(pc.upcxx[r] / pc.heap[r]);
    const std::vector<double> *times[2] = {&pc.heap, &pc.upcxx};
    const char *names[2] = {"heap_copy", "upcxx_heap"};
    std::ostringstream oss;
    oss << std::setprecision(6);
    for (int k = 0; k < 3; k++) {
        csv_head(oss, k < 2 ? names[k] : "ratio", c, msg_len, trials, k < 2 ? unit : "x");
        if (!timed) {
            oss << "NA," << (*cols[c].skip ? cols[c].skip : "not-timed") << "\n";
            continue;
        }
        std::vector<double> v;
        if (k < 2)
            for (double t : *times[k]) v.push_back(per_col(t));
        else
            v = ratio;
        oss << median(v) << ",";
        if (k < 2) oss << "median-of-" << paired_rounds << ";";
        oss << "min=" << *std::min_element(v.begin(), v.end()) << ";max=" << *std::max_element(v.begin(), v.end())
            << "\n";
    }
    std::cout << oss.str();
}
#endif

// One CSV line per selected column: value is `per_col(time)` or NA with the reason.
template <typename F>
static void print_csv(long msg_len, long trials, const char *unit, F per_col) {
    for (int c = 0; c < n_cols; c++) {
        if (!col_selected(c)) continue;
#if UXN_VARIANT == UXN_V_paired
        print_csv_paired(c, msg_len, trials, unit, per_col);
#else
        std::ostringstream oss;
        csv_head(oss, variant_name, c, msg_len, trials, unit);
        if (cols[c].time > 0)
            oss << std::setprecision(6) << per_col(cols[c].time) << ",";
        else
            oss << "NA," << (*cols[c].skip ? cols[c].skip : "not-timed");
        std::cout << oss.str() << "\n";
#endif
    }
    std::cout << std::flush;
}

static void print_latency_results() {
    long nmsgs = trials_for_size(8) * window_size;
    double Mmsgs = double(nmsgs) / 1.0e6;

    if (use_csv) {
        print_csv(8, trials_for_size(8), "us", [&](double t) { return t / Mmsgs; });
        return;
    }
    if (use_concise) {
        auto col = std::setw(12);
        std::cout << col << 8;
        for (int c = 0; c < n_cols; c++) {
            if (!col_selected(c)) continue;
            if (cols[c].time > 0)
                std::cout << col << cols[c].time / Mmsgs;
            else
                std::cout << col << "NA";
        }
        std::cout << col << row_time() << std::endl;
        return;
    }

    for (int c = 0; c < n_cols; c++) {
        if (!col_selected(c)) continue;
        std::cout << "  " << col_name(c) << ": ";
        if (cols[c].time > 0)
            std::cout << (cols[c].time / Mmsgs) << " us" << std::endl;
        else
            std::cout << "NA (" << cols[c].skip << ")" << std::endl;
    }
}

static void print_bandwidth_results(long msg_len, bool bidirectional) {
    long nmsgs = trials_for_size(msg_len) * window_size;
    if (bidirectional) nmsgs *= 2;

    long nbytes = nmsgs * msg_len;
    double gbytes = double(nbytes) / (1024.0 * 1024.0 * 1024.0);

    if (use_csv) {
        print_csv(msg_len, trials_for_size(msg_len), "GiB/s", [&](double t) { return gbytes / t; });
        return;
    }
    if (use_concise) {
        auto col = std::setw(12);
        std::cout << col << msg_len;
        for (int c = 0; c < n_cols; c++) {
            if (!col_selected(c)) continue;
            if (cols[c].time > 0)
                std::cout << col << gbytes / cols[c].time;
            else
                std::cout << col << "NA";
        }
        std::cout << col << row_time() << std::endl;
        return;
    }

    std::cout << desc << " bandwidth results for " << "message size = " << msg_len << " byte(s)" << std::endl;

    for (int c = 0; c < n_cols; c++) {
        if (!col_selected(c)) continue;
        std::cout << "  " << col_name(c) << ": ";
        if (cols[c].time > 0)
            std::cout << (double(nmsgs) / cols[c].time) << " msgs/s, " << (double(gbytes) / cols[c].time) << " GiB/s"
                      << std::endl;
        else
            std::cout << "NA (" << cols[c].skip << ")" << std::endl;
    }
    std::cout << std::endl;
}

// The doubling rows from min_msg_size to max_msg_size, then the extra row (its own window).
static long min_msg_size = 1, extra_msg_size = 0, extra_window = 4;
// -bind: rank r's thread runs on CPU bind_cpu + r (-1: not pinned).
static long bind_cpu = -1;
template <sync_type sync>
static void bandwidth_table(long max_msg_size, bool bidirectional) {
    for (long msg_len = min_msg_size; msg_len <= max_msg_size; msg_len *= 2) {
        run_all_copies<sync>(msg_len);

        if (rank_me() == 0) print_bandwidth_results(msg_len, bidirectional);
    }
    if (extra_msg_size > 0) {
        const long w = window_size;
        window_size = extra_window;
        run_all_copies<sync>(extra_msg_size);
        if (rank_me() == 0) print_bandwidth_results(extra_msg_size, bidirectional);
        window_size = w;
    }
}

int do_main(int argc, char **argv) {
    // Assign partner via "cross-machine" pairing, to help ensure
    // that "Remote" memory regions are over a network (if one exists)
    // The special case of shared-memory pairing can be measured
    // by running all processes on a single node.
    intrank_t partner;
    bool active_half = false;
    if (rank_n() % 2 && rank_me() == rank_n() - 1) {
        partner = rank_me();
        active_half = true;
    } else {
        int half = rank_n() / 2;
        if (rank_me() < half) {
            partner = rank_me() + half;
            active_half = true;
        } else {
            partner = rank_me() - half;
            active_half = false;
        }
    }
    long max_msg_size = 4 * 1024 * 1024;  // 4MB

    max_warmup = 10;
    max_trials = 100;
    window_size = 100;

    int arg_index = 1;
    auto number = [&](const char *flag, long &v) {
        if (arg_index + 1 == argc || !std::isdigit(*argv[arg_index + 1])) {
            if (!rank_me()) fprintf(stderr, "Missing argument to %s\n", flag);
            return false;
        }
        arg_index++;
        v = atol(argv[arg_index]);
        return true;
    };
    while (arg_index < argc) {
        char *arg = argv[arg_index];
        if (strcmp(arg, "-t") == 0) {
            if (!number("-t", max_trials)) return 1;
        } else if (strcmp(arg, "-w") == 0) {
            if (!number("-w", window_size)) return 1;
        } else if (strcmp(arg, "-m") == 0) {
            if (!number("-m", max_msg_size)) return 1;
        } else if (strcmp(arg, "-v") == 0) {
            if (!number("-v", max_volume)) return 1;
        } else if (strcmp(arg, "-s") == 0) {
            if (!number("-s", min_msg_size)) return 1;
        } else if (strcmp(arg, "-x") == 0) {
            if (!number("-x", extra_msg_size)) return 1;
        } else if (strcmp(arg, "-xw") == 0) {
            if (!number("-xw", extra_window)) return 1;
        } else if (strcmp(arg, "-bind") == 0) {
            if (!number("-bind", bind_cpu)) return 1;
#if UXN_VARIANT == UXN_V_paired
        } else if (strcmp(arg, "-r") == 0) {
            if (!number("-r", paired_rounds)) return 1;
#endif
        } else if (strcmp(arg, "-gg") == 0) {
            run_gg = true;
        } else if (strcmp(arg, "-sg") == 0) {
            run_sg = true;
        } else if (strcmp(arg, "-gs") == 0) {
            run_gs = true;
        } else if (strcmp(arg, "-ss") == 0) {
            run_ss = true;
        } else if (strcmp(arg, "-ps") == 0) {
            run_ps = true;
        } else if (strcmp(arg, "-pg") == 0) {
            run_pg = true;
        } else if (strcmp(arg, "-ds") == 0) {
            use_downcast_self = true;
        } else if (strcmp(arg, "-dp") == 0) {
            use_downcast_peer = true;
        } else if (strcmp(arg, "-c") == 0) {
            use_concise = true;
        } else if (strcmp(arg, "-csv") == 0) {
            use_csv = true;
        } else if (strcmp(arg, "-f") == 0) {
            use_firstlast = true;
        } else if (strcmp(arg, "-uni") == 0) {
            run_uni = true;
        } else if (strcmp(arg, "-bi") == 0) {
            run_bi = true;
        } else if (strcmp(arg, "-p") == 0) {
            run_put = true;
        } else if (strcmp(arg, "-g") == 0) {
            run_get = true;
        } else if (strcmp(arg, "-block") == 0) {
            run_block = true;
        } else if (strcmp(arg, "-flood") == 0) {
            run_flood = true;
        } else if (strcmp(arg, "-remote") == 0) {
            run_remote = true;
        } else {
            if (!rank_me()) {
                fprintf(stderr, "usage: %s ...\n", argv[0]);
                fprintf(stderr, "  Iteration control:\n");
                fprintf(stderr, "       -t <max_trials>: Run up to `trials` number of windows per measurement\n");
                fprintf(stderr, "       -w <window>: Issue `window` number of copies per window\n");
                fprintf(stderr, "       -m <max_msg_size>: Cap copy payloads at `max_msg_size` bytes\n");
                fprintf(stderr,
                        "       -v <max_volume>: Cap trials at larger payloads so each rank sends only enough windows "
                        "to reach `max_volume` bytes\n");
                fprintf(stderr,
                        "       -s <min_msg_size>: Start the bandwidth tables at `min_msg_size` bytes (default 1)\n");
                fprintf(stderr, "       -x <bytes>: One more row of `bytes` after the doubling rows, with window\n");
                fprintf(stderr, "       -xw <window>: (default 4)\n");
#if UXN_VARIANT == UXN_V_paired
                fprintf(stderr,
                        "       -r <rounds>: heap.copy and upcxx::copy alternately, `rounds` times per cell "
                        "(default 9)\n");
#endif
                fprintf(stderr, "       -f: First/last mode, where ranks other than 0 and its partner remain idle\n");
                fprintf(stderr, "  Test pattern selection: (default all)\n");
                fprintf(stderr, "       -uni: Run unidirectional tests (each proc is either initiator or target)\n");
                fprintf(stderr, "       -bi:  Run bidirectional tests (initiator procs are also target procs)\n");
                fprintf(stderr, "       -p:   Run \"put-like\" tests (data movement away from local buffer)\n");
                fprintf(stderr, "       -g:   Run \"get-like\" tests (data movement towards local buffer)\n");
                fprintf(stderr, "       -block:  Run one-copy-at-a-time blocking test\n");
                fprintf(stderr, "       -flood:  Run many-copy-at-a-time flood test synchronized with operation_cx\n");
                fprintf(stderr, "       -remote: Run many-copy-at-a-time flood test synchronized with remote_cx\n");
                fprintf(stderr, "  Memory type selection: (default all)\n");
                fprintf(stderr, "       -gg: Run tests between local and remote GPU segment\n");
                fprintf(stderr, "       -sg: Run tests between the local shared segment and remote GPU segment\n");
                fprintf(stderr, "       -gs: Run tests between local GPU and the remote shared segment\n");
                fprintf(stderr, "       -ss: Run tests between local and remote shared segments\n");
                fprintf(stderr, "       -ps: Run tests between the local private segment and remote shared segment\n");
                fprintf(stderr, "       -pg: Run tests between the local private segment and remote GPU segment\n");
                fprintf(stderr, "  Buffer options:\n");
                fprintf(stderr, "       -ds: Replace 'private' buffers with downcast shared memory owned by self\n");
                fprintf(stderr, "       -dp: Replace 'private' buffers with downcast shared memory owned by peer\n");
                fprintf(stderr, "  Output control:\n");
                fprintf(stderr, "       -c: Concise/machine-parseable output format\n");
                fprintf(stderr,
                        "       -csv: CSV lines "
                        "(CSV,variant,upcxx,pattern,test,column,bytes,window,trials,unit,value,note)\n");
                fprintf(stderr, "  Placement:\n");
                fprintf(stderr,
                        "       -bind <cpu>: Rank r pins itself to CPU cpu+r before the tests (default: off)\n");
            }
            return 1;
        }
        arg_index++;
    }

    if (!run_gg && !run_sg && !run_gs && !run_ss && !run_ps && !run_pg) {
        // If no tests are selected at the command line, run them all
        run_gg = run_sg = run_gs = run_ss = run_ps = run_pg = true;
    }
    if (!run_uni && !run_bi) {
        run_uni = run_bi = true;
    }
    if (upcxx::rank_n() == 1) {
        std::cerr << "WARNING: Single-rank job, bi-directional tests disabled\n" << std::flush;
        run_bi = false;
    }
    if (!run_put && !run_get) {
        run_put = run_get = true;
    }
    if (!run_block && !run_flood && !run_remote) {
        run_block = run_flood = run_remote = true;
    }

    if (rank_me() == 0) {
        std::cout << "gpu_microbenchmark(" << DeviceStr << ", " << variant_name << ", UPC++ " << UPCXX_VERSION << "): ";
        if (use_firstlast) std::cout << " first/last ranks,";
        if (max_volume)
            std::cout << " trials=" << trials_for_size(min_msg_size) << ".." << trials_for_size(max_msg_size)
                      << " max_volume=" << max_volume;
        else
            std::cout << " trials=" << max_trials;
        std::cout << " window=" << window_size << " max_msg_size=" << max_msg_size;
        if (extra_msg_size) std::cout << " extra_row=" << extra_msg_size << " (window " << extra_window << ")";
#if UXN_VARIANT == UXN_V_paired
        std::cout << " rounds=" << paired_rounds;
#endif
        if (bind_cpu >= 0) std::cout << " bind=" << bind_cpu << "+rank";
        std::cout << std::endl;
    }
    if (!(max_trials > 0 && window_size > 0 && max_msg_size > 0 && min_msg_size > 0 && extra_window > 0)) {
        if (!rank_me()) std::cerr << "Invalid parameters" << std::endl;
        return 1;
    }
#if UXN_VARIANT == UXN_V_paired
    if (!use_csv || paired_rounds < 1) {
        if (!rank_me())
            std::cerr << "the paired variant prints CSV only: pass -csv (and -r <rounds> >= 1)" << std::endl;
        return 1;
    }
#endif
    // -bind: may this rank run on CPU bind_cpu + rank? Every rank learns whether all may.
    cpu_set_t bind_set;
    CPU_ZERO(&bind_set);
    if (bind_cpu >= 0) {
        const long cpu = bind_cpu + rank_me();
        cpu_set_t allowed;
        CPU_ZERO(&allowed);
        const bool ok =
            cpu < CPU_SETSIZE && sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_ISSET(cpu, &allowed);
        if (!ok) std::cerr << "rank " << rank_me() << ": -bind: CPU " << cpu << " is not available to it" << std::endl;
        if (ok) CPU_SET(cpu, &bind_set);
        if (!upcxx::reduce_all(ok ? 1 : 0, upcxx::op_fast_min).wait()) return 1;
    }
    const long seg_size = std::max(max_msg_size, extra_msg_size);

#if !UXN_USES_HEAP
#if UPCXX_VERSION >= 20210905
    // use GPU auto-assignment, which spreads local_team members across available physical GPUs
    auto gpu_alloc = upcxx::make_gpu_allocator<Device>(seg_size);  // alloc GPU segment
#if UPCXX_VERSION >= 20220905
    auto kind_info = Device::kind_info();
#else
    std::string kind_info{};
#endif
    UPCXX_ASSERT_ALWAYS(gpu_alloc.is_active(), "Failed to open GPU:\n" << kind_info);
    auto &cleanup = gpu_alloc;
    string my_gpu_desc = DeviceStr + ":" + to_string(gpu_alloc.device_id()) + "/" + to_string(Device::device_n());
#else  // pre 2022.3.0 API
    auto gpu_device = Device(0);  // open device 0
    // alloc GPU segment
    auto gpu_alloc = device_allocator<Device>(gpu_device, seg_size);
    auto &cleanup = gpu_device;
    string my_gpu_desc = DeviceStr + ":0";
#endif

    local_gpu_array = gpu_alloc.allocate<uint8_t>(seg_size);
#else  // the GPU segment: nvshmem_malloc'd memory, wrapped by nvshmem_heap
    upcxx::extra::nvshmem_init();  // collective: this rank's GPU, NVSHMEM bootstrapped by UPC++
    auto *sym = static_cast<uint8_t *>(nvshmem_malloc(seg_size));  // collective
    UPCXX_ASSERT_ALWAYS(sym, "nvshmem_malloc(" << seg_size << ") failed");
    upcxx::extra::nvshmem_heap heap;  // collective
    the_heap = &heap;
    int cur_dev = -1;
    cudaGetDevice(&cur_dev);
    string my_gpu_desc =
        DeviceStr + ":" + to_string(cur_dev) + " NVSHMEM PE " + to_string(heap.my_pe()) + "/" + to_string(heap.n_pes());
    local_gpu_array = heap.to_global_ptr(sym);
#endif

    upcxx::dist_object<gp_gpu_t> gpu_dobj(local_gpu_array);
    remote_gpu_array = gpu_dobj.fetch(partner).wait();
#if UXN_VARIANT == UXN_V_nvshmem
    gpu_sym = sym;
    partner_pe = heap.from_global_ptr(remote_gpu_array).second;
#endif

    UPCXX_ASSERT(!(use_downcast_self && use_downcast_peer));
    uint8_t *private_array_free = nullptr;
    gp_host_t gp_downcast_area = nullptr;
    if (use_downcast_self) {
        gp_downcast_area = new_array<uint8_t>(seg_size);
        local_private_array = gp_downcast_area.local();
    } else if (use_downcast_peer) {
        gp_downcast_area = new_array<uint8_t>(seg_size);
        dist_object<gp_host_t> dd(gp_downcast_area, local_team());
        if (local_team().rank_n() == 1) {
            std::cerr << "WARNING: singleton local team, -dp is equivalent to -ds\n" << std::flush;
            local_private_array = gp_downcast_area.local();
        } else {
            int lpeer = (local_team().rank_me() + 1) % local_team().rank_n();   // select a downcast peer
            if (local_team()[lpeer] == partner && local_team().rank_n() > 2) {  // avoid partner when possible
                lpeer = (local_team().rank_me() + 2) % local_team().rank_n();
            }
            gp_host_t peer_downcast_area = dd.fetch(lpeer).wait();
            UPCXX_ASSERT(peer_downcast_area.is_local());
            local_private_array = peer_downcast_area.local();
        }
        upcxx::barrier();
    } else {
        local_private_array = new uint8_t[seg_size];
        UPCXX_ASSERT(local_private_array);
        private_array_free = local_private_array;
    }

    local_shared_array = upcxx::new_array<uint8_t>(seg_size);
    upcxx::dist_object<gp_host_t> host_dobj(local_shared_array);
    remote_shared_array = host_dobj.fetch(partner).wait();

    bool active_uni;
    bool active_bi;
    if (use_firstlast) {
        active_uni = !rank_me();
        active_bi = (rank_me() == 0 || partner == 0);
    } else {
        active_uni = active_half;
        active_bi = true;
    }

    // Pinned now: NVSHMEM's and CUDA's threads, started above, keep their CPUs.
    if (bind_cpu >= 0) {
        UPCXX_ASSERT_ALWAYS(sched_setaffinity(0, sizeof bind_set, &bind_set) == 0,
                            "rank " << rank_me() << ": sched_setaffinity(CPU " << bind_cpu + rank_me() << ") failed");
    }
    barrier();
    {
        std::ostringstream oss;
        auto col = std::setw(2);
        oss << "Rank " << col << rank_me() << "/" << col << rank_n();
        oss << ": " << my_gpu_desc;
        if (bind_cpu >= 0) oss << " cpu " << sched_getcpu();
        if (active_uni || active_bi) {
            oss << " partner = " << col << partner;
            if (use_downcast_peer) oss << ", downcast peer = " << col << try_global_ptr(local_private_array).where();
        }
        if (active_uni)
            oss << " (active for ALL tests)";
        else if (active_bi)
            oss << " (active for BIdirectional tests)";
        else
            oss << " (passive rank)";
        oss << '\n';
        std::cout << oss.str() << std::flush;
    }
    sleep(1);  // help ensure clean output
    barrier();
    if (use_csv && rank_me() == 0)
        std::cout << "CSV,variant,upcxx,pattern,test,column,bytes,window,trials,unit,value,note" << std::endl;

    legend();
    if (run_uni) {
        is_active_rank = active_uni;

        if (run_block) {
            test_header("Uni-directional blocking 8-byte round-trip latency (microseconds)", "uni", "latency");
            run_all_copies<sync_type::blocking_op>(8);

            if (rank_me() == 0) print_latency_results();

            test_header("Uni-directional blocking op bandwidth (GiB/s)", "uni", "blocking");
            bandwidth_table<sync_type::blocking_op>(max_msg_size, false);
        }
        if (run_flood) {
            test_header("Uni-directional flood op bandwidth (GiB/s)", "uni", "flood");
            bandwidth_table<sync_type::flood_op>(max_msg_size, false);
        }
        if (run_remote) {
            test_header("Uni-directional flood remote_cx bandwidth (GiB/s)", "uni", "flood_remote");
            bandwidth_table<sync_type::flood_remote>(max_msg_size, false);
        }
    }  // run uni

    if (run_bi) {
        is_active_rank = active_bi;

        if (run_block) {
            test_header("Bi-directional blocking op bandwidth (GiB/s)", "bi", "blocking");
            bandwidth_table<sync_type::blocking_op>(max_msg_size, true);
        }
        if (run_flood) {
            test_header("Bi-directional flood op bandwidth (GiB/s)", "bi", "flood");
            bandwidth_table<sync_type::flood_op>(max_msg_size, true);
        }
        if (run_remote) {
            test_header("Bi-directional flood remote_cx bandwidth (GiB/s)", "bi", "flood_remote");
            bandwidth_table<sync_type::flood_remote>(max_msg_size, true);
        }
    }  // run bi

#if !UXN_USES_HEAP
    gpu_alloc.deallocate(local_gpu_array);
#endif
    upcxx::delete_array(local_shared_array);
    upcxx::delete_array(gp_downcast_area);
    delete[] private_array_free;
#if !UXN_USES_HEAP
    cleanup.destroy();
#else
    heap.destroy();  // collective: every copy landed
    the_heap = nullptr;
    nvshmem_free(sym);
    upcxx::extra::nvshmem_finalize();
#endif

    upcxx::barrier();

    if (!rank_me()) std::cout << "\nSUCCESS" << std::endl;
    return 0;
}

int main(int argc, char **argv) {
    upcxx::init();
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        if (!rank_me())
            std::cout << "SKIPPED: gpu_microbenchmark (" << variant_name << ") needs a GPU (none visible)" << std::endl;
        upcxx::finalize();
        return 77;
    }
    int retval = 1;
#if UXN_USES_HEAP
    try {
        retval = do_main(argc, argv);
    } catch (const upcxx::extra::nvshmem_error &e) {  // thrown on every rank together
        std::cerr << "rank " << rank_me() << ": " << e.what() << std::endl;
        retval = 1;
    }
#else
    retval = do_main(argc, argv);
#endif
    upcxx::finalize();
    return retval;
}
