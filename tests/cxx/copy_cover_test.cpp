// copy_cover_test: UPC++ 2023.9.0's test/copy-cover.cpp, ported onto NVSHMEM's symmetric heap and
// upcxx::extra::nvshmem_heap::copy.
//
// Derived from copy-cover.cpp of the UPC++ 2023.9.0 release (test/copy-cover.cpp), which carries
// the following notice (the UPC++ LICENSE.txt):
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
//   original is in ../shared/upcxx/tests-2023.9.0/.)
//
// What UPC++'s test does, kept here: every ordered pair (A, B) of buffers spread over the ranks
// (host and device, mine / his / her / other rank), for element counts 1, 2, 4 ... bufsz, copies
// private -> A -> B -> private and checks the values, with operation, source and remote
// completion (remote_cx::as_rpc checks it runs on the target's master persona inside progress),
// every fifth step with remote completion only, and "kills": after source completion the source
// is overwritten (private source; or A / B by another copy) and the destination must still hold
// the values copied before.
//
// What changed:
//   - every copy goes through heap.copy (nvshmem_heap::copy) instead of upcxx::copy;
//   - the device buffers come from NVSHMEM's heap (nvshmem_malloc + heap.to_global_ptr, HEAPS_PER_KIND
//     symmetric blocks of ALLOCS_PER_HEAP buffers, buffer i on rank (me+i)%ranks as UPC++ spreads
//     its own); the first block's global pointers are made BEFORE the heap grows (a 512 MiB
//     nvshmem_malloc between the blocks, then heap.update()), the others after;
//   - plus UPC++'s own device buffers (UPC++ >= 2022.3: a device_allocator of UPC++ on the heap's
//     GPU, as UPC++'s test makes them; UPC++ 2020.10 allows one cuda_device per GPU and the heap
//     owns it) and UPC++ host buffers (upcxx::new_array, as in UPC++'s test): copies with one end
//     outside NVSHMEM's heap;
//   - the completion forms rotate over the steps: UPC++'s operation|source futures (+ as_rpc),
//     source|operation (tuple order), as_promise, as_lpc (on the initiating persona, checked),
//     the default argument (a future<>), and on UPC++ >= 2023.3 as_defer_future|as_eager_future
//     and as_eager_promise|as_defer_promise (a deferred notification must not be ready when copy()
//     returns); some steps pass the global pointers with their static kind (host / cuda_device)
//     instead of memory_kind::any;
//   - buffer start offsets of 0-2 elements (4-byte misalignment of either end) and odd counts;
//     the element after the last copied one must stay untouched;
//   - as_rpc carries a std::string and a std::vector<int> besides UPC++'s ints, checked at the
//     target (arguments that own memory, serialised as upcxx::copy serialises them);
//   - the path each copy took is checked with heap.copies(): fast exactly when both ends are
//     NVSHMEM heap memory mapped in this process (nvshmem_ptr != NULL), or one end is that and the
//     other this rank's own UPC++ device memory; with UPCXX_EXTRA_NVSHMEM_COPY=upcxx never; a
//     copy with no end in the heap is upcxx::copy untouched and counted in neither path; a fast
//     copy is counted batched exactly when both ends are heap memory mapped here and it is at
//     most the batch limit (none with UPCXX_EXTRA_NVSHMEM_COPY=unbatched);
//   - UPC++ 2020.10: upcxx::copy has no remote_cx there (it does not compile), so no as_rpc and no
//     remote-completion-only steps;
//   - bounded waits (a FAIL line, never a hang), check.hpp's CHECK lines (UPC++'s assert()s as
//     REQUIRE: evaluated in every build), a RESULT line, exit status 1 on a failure and 77 without
//     a GPU.
//
//   upcxx-run -n 2 ./copy_cover_test [iters=2] [bufsz=262144]     (UPC++'s defaults: 10, 1 MiB)
// 3 ranks or more add UPC++'s three-party cases. 2 ranks on one GPU: about 15 000 copies, seconds.
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "copy_test_util.hpp"

// From UPC++'s util.hpp (the parts used here).
#if UPCXX_VERSION >= 20201111
using upcxx::experimental::say;
#else
using upcxx::say;
#endif
// UPC++'s util.hpp makes assert() UPCXX_ASSERT_ALWAYS; here its assert()s, UPCXX_ASSERTs and
// UPCXX_ASSERT_ALWAYSs are REQUIRE (check.hpp): evaluated in every build (NDEBUG, UPC++'s opt
// codemode), a FAIL line in the tests' format, counted, and the rank aborts as UPC++'s would.

// remote_cx with upcxx::copy: not in 2020.10 (accepted by the signature, rejected in its body),
// there in 2023.9 (and from 2021.3 on, as far as the releases here tell).
#if UPCXX_VERSION > 20201000L
#define COPY_HAS_REMOTE_CX 1
#else
#define COPY_HAS_REMOTE_CX 0
#endif
// as_eager_* / as_defer_*: UPC++ 2023.3 and later.
#if UPCXX_VERSION >= 20230300L
#define COPY_HAS_EAGER 1
#else
#define COPY_HAS_EAGER 0
#endif
// Several device allocators per GPU (UPC++'s own beside the heap's): 2022.3 and later.
#if UPCXX_VERSION >= 20220300L
#define UPCXX_OWN_DEVICE_BUFFERS 1
#else
#define UPCXX_OWN_DEVICE_BUFFERS 0
#endif

#ifndef HEAPS_PER_KIND
#define HEAPS_PER_KIND 2
#endif
#ifndef ALLOCS_PER_HEAP
#define ALLOCS_PER_HEAP 3
#endif
#ifndef UPCXX_DEVICE_HEAPS
#define UPCXX_DEVICE_HEAPS 1
#endif
constexpr unsigned heaps_per_kind = HEAPS_PER_KIND;  // NVSHMEM symmetric blocks
constexpr unsigned allocs_per_heap = ALLOCS_PER_HEAP;

using namespace upcxx;
using upcxx::extra::nvshmem_heap;

using val_t = std::uint32_t;
#define VAL(rank, step, idx) ((val_t)((((rank) & 0xFFFF) << 16) | (((step) & 0xFF) << 8) | ((idx) & 0xFF)))
#define DEAD(step) ((val_t)(0xFFFF0000 | ((step) & 0xFFFF)))

using any_ptr = global_ptr<val_t, memory_kind::any>;
long errs = 0;
long acct_errs = 0;          // copies that took another path than expected
long defer_violations = 0;   // deferred notifications ready when copy() returned
long lpc_wrong_persona = 0;  // as_lpc callbacks that ran elsewhere than on the initiating persona
nvshmem_heap *g_heap = nullptr;

// Where a buffer comes from: the oracle for the path heap.copy must take.
enum class origin { host, nvshmem, upcxx_device };
struct buf_t {
    any_ptr gp;
    origin from;
    bool mapped_here;  // nvshmem: NVSHMEM maps that PE's heap in this process (nvshmem_ptr != NULL)
};
std::vector<buf_t> bufs;

static bool heap_here(const buf_t &b) { return b.from == origin::nvshmem && b.mapped_here; }
static bool own_device(const buf_t &b) { return b.from == origin::upcxx_device && b.gp.where() == rank_me(); }
// UPCXX_EXTRA_NVSHMEM_COPY=upcxx, or the public-API mode (nvshmem_heap::fast_copies() false):
// every copy is upcxx::copy, counted as a fallback.
static bool forced_fallback() {
    if (!upcxx::extra::nvshmem_heap::fast_copies()) return true;
    const char *k = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY");
    return k && std::string(k) == "upcxx";
}
// The contract: fast when one end is heap memory mapped here and the other is memory this process
// reaches: heap memory mapped here, this rank's own device memory, or host memory (a raw pointer,
// or UPC++ shared memory of this rank or a local_team peer).
static bool host_here(const buf_t &b) { return b.from == origin::host && b.gp.is_local(); }
static bool reached(const buf_t &b) { return heap_here(b) || own_device(b) || host_here(b); }
static bool expect_fast(const buf_t &a, const buf_t &b) {
    if (forced_fallback()) return false;
    return (heap_here(a) && reached(b)) || (reached(a) && heap_here(b));
}
// The largest fast copy batched (docs/copy.md): 0 with UPCXX_EXTRA_NVSHMEM_COPY=unbatched, else
// UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES or the default.
static std::size_t batch_limit() {
    const char *k = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY");
    if (k && std::string(k) == "unbatched") return 0;
    const char *b = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES");
    return b ? std::strtoull(b, nullptr, 10) : upcxx::extra::detail::copy_policy::default_batch_bytes;
}
// A fast copy is batched when both ends are heap memory mapped here and it is small enough.
static bool expect_batched(const buf_t &a, const buf_t &b, std::size_t bytes) {
    return expect_fast(a, b) && heap_here(a) && heap_here(b) && bytes <= batch_limit();
}
// A copy between private host memory and `b`.
static bool expect_fast_private(const buf_t &b) { return !forced_fallback() && heap_here(b); }
// Whether heap.copies() counts a copy with this end (fast or fallback): in fast mode, a copy with
// an end in the heap; in the public-API mode, one with an end that may be device memory. Every
// other copy is upcxx::copy untouched and counted in neither.
static bool counted(const buf_t &b) {
    return b.from == origin::nvshmem || (!upcxx::extra::nvshmem_heap::fast_copies() && b.from == origin::upcxx_device);
}

#if UPCXX_OWN_DEVICE_BUFFERS
// UPC++'s own device buffers, made as UPC++'s test makes them (DeviceState::create), on the GPU of
// the NVSHMEM heap.
template <typename Device>
struct DeviceState {
    Device *gpu[UPCXX_DEVICE_HEAPS] = {};
    device_allocator<Device> *seg[UPCXX_DEVICE_HEAPS] = {};
    global_ptr<val_t, Device::kind> dev_ptrs[UPCXX_DEVICE_HEAPS][allocs_per_heap] = {};

    void create(size_t allocelems, int dev_id, std::vector<buf_t> &out) {
        int me = upcxx::rank_me();
        int ranks = upcxx::rank_n();
        for (unsigned dev = 0; dev < UPCXX_DEVICE_HEAPS; dev++) {
            size_t align = Device::template default_alignment<val_t>();
            size_t allocsz = allocelems * sizeof(val_t);
            allocsz = align * ((allocsz + align - 1) / align);
            align = 4096;
            if (allocsz > align) {  // more than one page gets a full page
                allocsz = align * ((allocsz + align - 1) / align);
            }
            REQUIRE(!gpu[dev] && !seg[dev], "DeviceState::create: device %u made once", dev);
            gpu[dev] = new Device(dev_id);
            // Two pages of slack per allocation: the segment allocator's own alignment and bookkeeping.
            seg[dev] = new device_allocator<Device>(*gpu[dev], (allocsz + 2 * align) * allocs_per_heap);
            for (unsigned i = 0; i < allocs_per_heap; i++) {
                dev_ptrs[dev][i] = seg[dev]->template allocate<val_t>(allocelems);
                REQUIRE(dev_ptrs[dev][i], "device_allocator::allocate of %zu elements (device %u, buffer %u)",
                        allocelems, dev, i);
                int rank = (me + i) % ranks;
                dist_object<any_ptr> dobj(dev_ptrs[dev][i]);
                any_ptr gp = dobj.fetch(rank).wait();
                out.push_back(buf_t{gp, origin::upcxx_device, false});
                barrier();
            }
        }
    }
    void destroy() {
        for (unsigned dev = 0; dev < UPCXX_DEVICE_HEAPS; dev++) {
            REQUIRE(gpu[dev] && seg[dev], "DeviceState::destroy: device %u was made", dev);
            for (unsigned i = 0; i < allocs_per_heap; i++) {
                seg[dev]->deallocate(dev_ptrs[dev][i]);
                dev_ptrs[dev][i] = nullptr;
            }
            gpu[dev]->destroy();
            delete seg[dev];
            seg[dev] = nullptr;
            delete gpu[dev];
            gpu[dev] = nullptr;
        }
    }
};
#endif

std::string bufdesc(const buf_t &b, any_ptr ptr) {
    int me = upcxx::rank_me();
    int ranks = upcxx::rank_n();
    int rank = ptr.where();
    memory_kind kind = ptr.dynamic_kind();
    std::ostringstream oss;
    if (rank == me)
        oss << "my ";
    else if (rank == (me + 1) % ranks)
        oss << "his ";
    else if (rank == (me + 2) % ranks)
        oss << "her ";
    else
        oss << "other ";
#if UPCXX_VERSION >= 20220907
    oss << kind;
#else
    oss << "MK:" << std::to_string((int)kind);
#endif
    oss << (b.from == origin::nvshmem ? " nvshmem" : b.from == origin::upcxx_device ? " upcxx-device" : " upcxx-host");
    if (b.from == origin::nvshmem && !b.mapped_here) oss << " (not mapped here)";
    return oss.str();
}

// Bounded wait: a FAIL line and the end of this rank rather than a hang.
template <class Fut>
static void wait_or_die(const Fut &f, const char *what) {
    if (copy_test::wait_for(f, 120)) return;
    say() << "ERROR: " << what << " not complete after 120 s";
    copy_test::check("wait", false, "%s never completed (120 s)", what);
    std::_Exit(1);
}

// ---- the copies: completion forms -------------------------------------------------------------

static uint64_t rc_count = 0;  // remote completions run here
static uint64_t rc_sent = 0;   // remote completions this rank asked for (the ranks are symmetric)
static int g_desc = 0;         // the copy being issued: form * 100 + origin of A * 10 + origin of B
static uint64_t rc_wrong_rank = 0;
static uint64_t rc_bad_args = 0;  // remote completions whose std::string / std::vector arguments arrived wrong
#if COPY_HAS_REMOTE_CX
// UPC++'s check of the target rank, counted instead of aborting so that the run goes on and says
// which copies (the first 8 as FAIL lines, each counted; all of them in errs, the "values" check).
static void rc_at(int rank, int desc) {
    if (rank != upcxx::rank_me() && rc_wrong_rank++ < 8)
        copy_test::check("remote_cx_rank", false,
                         "a remote completion for rank %d ran here (form %d, origins A %d B %d)", rank, desc / 100,
                         desc / 10 % 10, desc % 10);
    REQUIRE(&upcxx::current_persona() == &upcxx::master_persona(), "a remote completion on the master persona");
#if UPCXX_SPEC_VERSION >= 20201000
    REQUIRE(upcxx::in_progress(), "a remote completion inside progress");
#endif
    rc_count++;
}
static void rc(int rank) {
    REQUIRE(&upcxx::current_persona() == &upcxx::master_persona(), "a remote completion on the master persona");
    if (rank != upcxx::rank_me()) return rc_at(rank, g_desc);
#if UPCXX_SPEC_VERSION >= 20201000
    REQUIRE(upcxx::in_progress(), "a remote completion inside progress");
#endif
    rc_count++;
}
#endif
template <class C>
static auto with_rc(C &&c, int rank) {
#if COPY_HAS_REMOTE_CX
    rc_sent++;
    // The arguments as prvalues: as_rpc binds an lvalue argument by reference (UPC++'s binding<T&>),
    // and `rank` dies when this function returns, before the copy serialises it.
    // A std::string and a std::vector too: arguments that own heap memory, serialised as
    // upcxx::copy serialises them (a moved-from or twice-destroyed copy would arrive empty or
    // corrupt the heap).
    return std::forward<C>(c) |
           remote_cx::as_rpc(
               [](int r, int desc, const std::string &s, const std::vector<int> &v) {
                   if (s != "hello, " + std::to_string(desc) || v != std::vector<int>{1, 2, 3, desc}) {
                       if (rc_bad_args++ < 8)
                           copy_test::check("remote_cx_args", false, "as_rpc received \"%s\" and %zu ints (desc %d)",
                                            s.c_str(), v.size(), desc);
                   }
                   rc_at(r, desc);
               },
               int(rank), int(g_desc), std::string("hello, ") + std::to_string(g_desc),
               std::vector<int>{1, 2, 3, g_desc});
#else
    (void)rank;
    return std::forward<C>(c);
#endif
}

enum form_t {
    F_FUT_OP_SRC,  // UPC++'s: operation_cx::as_future() | source_cx::as_future() (| as_rpc)
    F_FUT_SRC_OP,  // source_cx::as_future() | operation_cx::as_future(): the tuple in that order
    F_PROMISE,     // operation_cx::as_promise | source_cx::as_promise
    F_LPC,         // operation_cx::as_lpc | source_cx::as_lpc, on the initiating persona
    F_DEFAULT,     // heap.copy(src, dst, n): the default operation_cx::as_future(), no as_rpc
#if COPY_HAS_EAGER
    F_DEFER_EAGER,          // operation_cx::as_defer_future() | source_cx::as_eager_future()
    F_EAGER_DEFER_PROMISE,  // operation_cx::as_eager_promise | source_cx::as_defer_promise
#endif
    N_FORMS
};
static const char *form_name(int f) {
    static const char *names[] = {"op|src futures",
                                  "src|op futures",
                                  "promises",
                                  "lpcs",
                                  "default future",
                                  "defer op|eager src futures",
                                  "eager op|defer src promises"};
    return names[f];
}

// One copy src -> dst of n elements with completion form `form`; remote completion at rc_rank
// when rc_rank >= 0 (and the form takes one). Returns (operation future, source future).
template <class S, class D>
static std::pair<future<>, future<>> issue(int form, S src, D dst, std::size_t n, int rc_rank) {
    nvshmem_heap &heap = *g_heap;
    const bool want_rc = rc_rank >= 0;
    future<> of, sf;
    switch (form) {
        case F_FUT_OP_SRC:
            if (want_rc)
                std::tie(of, sf) =
                    heap.copy(src, dst, n, with_rc(operation_cx::as_future() | source_cx::as_future(), rc_rank));
            else
                std::tie(of, sf) = heap.copy(src, dst, n, operation_cx::as_future() | source_cx::as_future());
            break;
        case F_FUT_SRC_OP:
            if (want_rc)
                std::tie(sf, of) =
                    heap.copy(src, dst, n, with_rc(source_cx::as_future() | operation_cx::as_future(), rc_rank));
            else
                std::tie(sf, of) = heap.copy(src, dst, n, source_cx::as_future() | operation_cx::as_future());
            break;
        case F_PROMISE: {
            promise<> po, ps;
            if (want_rc)
                heap.copy(src, dst, n, with_rc(operation_cx::as_promise(po) | source_cx::as_promise(ps), rc_rank));
            else
                heap.copy(src, dst, n, operation_cx::as_promise(po) | source_cx::as_promise(ps));
            of = po.finalize();
            sf = ps.finalize();
            break;
        }
        case F_LPC: {
            promise<> po, ps;
            po.require_anonymous(1);
            ps.require_anonymous(1);
            persona *target = &current_persona();
            auto on_op = [po, target]() mutable {
                if (&current_persona() != target) lpc_wrong_persona++;
                po.fulfill_anonymous(1);
            };
            auto on_src = [ps, target]() mutable {
                if (&current_persona() != target) lpc_wrong_persona++;
                ps.fulfill_anonymous(1);
            };
            if (want_rc)
                heap.copy(src, dst, n,
                          with_rc(operation_cx::as_lpc(*target, on_op) | source_cx::as_lpc(*target, on_src), rc_rank));
            else
                heap.copy(src, dst, n, operation_cx::as_lpc(*target, on_op) | source_cx::as_lpc(*target, on_src));
            of = po.finalize();
            sf = ps.finalize();
            break;
        }
        case F_DEFAULT:
            of = heap.copy(src, dst, n);
            sf = of;
            break;
#if COPY_HAS_EAGER
        case F_DEFER_EAGER:
            if (want_rc)
                std::tie(of, sf) = heap.copy(
                    src, dst, n, with_rc(operation_cx::as_defer_future() | source_cx::as_eager_future(), rc_rank));
            else
                std::tie(of, sf) =
                    heap.copy(src, dst, n, operation_cx::as_defer_future() | source_cx::as_eager_future());
            if (copy_test::ready(of)) defer_violations++;
            break;
        case F_EAGER_DEFER_PROMISE: {
            promise<> po, ps;
            if (want_rc)
                heap.copy(src, dst, n,
                          with_rc(operation_cx::as_eager_promise(po) | source_cx::as_defer_promise(ps), rc_rank));
            else
                heap.copy(src, dst, n, operation_cx::as_eager_promise(po) | source_cx::as_defer_promise(ps));
            of = po.finalize();
            sf = ps.finalize();
            if (copy_test::ready(sf)) defer_violations++;
            break;
        }
#endif
        default:
            REQUIRE(false, "issue(): form %d", form);
    }
    return {of, sf};
}

// The same with the global pointers of their static kind (host or cuda_device) instead of
// memory_kind::any, for two forms only (each kind combination is its own instantiation).
template <class S, class D>
static std::pair<future<>, future<>> issue_static_kinds(int form, S src, D dst, std::size_t n, int rc_rank) {
    nvshmem_heap &heap = *g_heap;
    future<> of, sf;
    if (form == F_DEFAULT) {
        of = heap.copy(src, dst, n);
        sf = of;
    } else if (rc_rank >= 0) {
        std::tie(of, sf) = heap.copy(src, dst, n, with_rc(operation_cx::as_future() | source_cx::as_future(), rc_rank));
    } else {
        std::tie(of, sf) = heap.copy(src, dst, n, operation_cx::as_future() | source_cx::as_future());
    }
    return {of, sf};
}
template <class F>
static void as_static(any_ptr p, F &&f) {
    if (p.dynamic_kind() == memory_kind::host)
        f(static_kind_cast<memory_kind::host>(p));
    else
        f(static_kind_cast<memory_kind::cuda_device>(p));
}
template <class F>
static void as_static(val_t *p, F &&f) {
    f(p);
}
template <class F>
static void as_static(const val_t *p, F &&f) {
    f(p);
}
template <class S, class D>
static std::pair<future<>, future<>> copy_with(int form, bool static_kinds, S src, D dst, std::size_t n, int rc_rank) {
    if (!static_kinds || (form != F_FUT_OP_SRC && form != F_DEFAULT)) return issue(form, src, dst, n, rc_rank);
    std::pair<future<>, future<>> r;
    as_static(src, [&](auto s) { as_static(dst, [&](auto d) { r = issue_static_kinds(form, s, d, n, rc_rank); }); });
    return r;
}

int main(int argc, char *argv[]) {
    upcxx::init();
    copy_test::program() = "copy_cover_test";
    if (!rank_me())
        say("") << "Test: copy_cover_test.cpp (UPC++ 2023.9.0 copy-cover.cpp on NVSHMEM's heap)\nRanks: " << rank_n();
    const int gpu = copy_test::select_gpu_or_skip();  // exits 77 without a GPU
    copy_test::start_watchdog();
    copy_test::nvshmem_init_from_upcxx();

    int me = upcxx::rank_me();
    int ranks = upcxx::rank_n();
    long iters = 0;
    if (argc > 1) iters = std::atol(argv[1]);
    if (iters <= 0) iters = 2;
    size_t maxelems;
    {
        size_t bufsz = 0;
        if (argc > 2) bufsz = std::atol(argv[2]);
        if (bufsz <= 0) bufsz = 256 * 1024;
        if (bufsz < sizeof(val_t)) bufsz = sizeof(val_t);
        maxelems = bufsz / sizeof(val_t);
        if (!me)
            say("") << "Running with iters=" << iters << " bufsz=" << maxelems * sizeof(val_t) << " bytes\n"
                    << "  using " << heaps_per_kind << " NVSHMEM blocks and " << allocs_per_heap
                    << " buffer allocations per block; "
                    << (forced_fallback() ? (upcxx::extra::nvshmem_heap::fast_copies()
                                                 ? "UPCXX_EXTRA_NVSHMEM_COPY=upcxx: every copy falls back"
                                                 : "public-API mode: every copy falls back")
                                          : "fast path on");
    }
    // A buffer: [0, maxelems+3) is A's side (start offset 0-2), [maxelems+4, 2*maxelems+7) B's.
    const size_t allocelems = 2 * maxelems + 8;
    const size_t allocsz = (allocelems * sizeof(val_t) + 4095) / 4096 * 4096;

    {
        if (me == 0 && ranks < 3)
            say("") << "Advice: consider using 3 (or more) ranks to cover three-party cases for upcxx::copy.";

        // fill bufs with global ptrs to buffers, with allocs_per_heap
        global_ptr<val_t> host_ptrs[allocs_per_heap] = {};
        for (unsigned i = 0; i < allocs_per_heap; i++) {
            host_ptrs[i] = upcxx::new_array<val_t>(allocelems);
            int rank = (me + i) % ranks;
            dist_object<any_ptr> dobj(host_ptrs[i]);
            any_ptr gp = dobj.fetch(rank).wait();
            bufs.push_back(buf_t{gp, origin::host, false});
            barrier();
        }

        // NVSHMEM's heap: block 0 before the heap grows, the others after a 512 MiB allocation
        // (a new chunk under CUDA VMM) and heap.update().
        std::vector<char *> blocks(heaps_per_kind, nullptr);
        blocks[0] = static_cast<char *>(nvshmem_malloc(allocs_per_heap * allocsz));
        nvshmem_heap heap;
        g_heap = &heap;
        auto add_block = [&](char *sym) {
            REQUIRE(sym, "nvshmem_malloc of a block of %u buffers of %zu bytes", allocs_per_heap, allocsz);
            for (unsigned i = 0; i < allocs_per_heap; i++) {
                int pe = (me + i) % ranks;  // PE == rank: NVSHMEM was bootstrapped from upcxx::world()
                val_t *obj = reinterpret_cast<val_t *>(sym + i * allocsz);
                bufs.push_back(buf_t{heap.to_global_ptr(obj, pe), origin::nvshmem, nvshmem_ptr(obj, pe) != nullptr});
            }
        };
        add_block(blocks[0]);
        const size_t extent0 = heap.extent();
        void *spacer = nvshmem_malloc(size_t(512) << 20);
        REQUIRE(spacer, "nvshmem_malloc of 512 MiB");
        for (unsigned h = 1; h < heaps_per_kind; h++) {
            blocks[h] = static_cast<char *>(nvshmem_malloc(allocs_per_heap * allocsz));
            REQUIRE(blocks[h], "nvshmem_malloc of block %u", h);
        }
        const size_t extent1 = heap.update();
        for (unsigned h = 1; h < heaps_per_kind; h++) add_block(blocks[h]);
        copy_test::check(
            "growth", heap.segments() <= 1,
            "extent %zu -> %zu bytes after a 512 MiB nvshmem_malloc and update(): %zu UPC++ device segment(s)", extent0,
            extent1, heap.segments());

#if UPCXX_OWN_DEVICE_BUFFERS
        DeviceState<cuda_device> devstate_cuda;
        devstate_cuda.create(allocelems, gpu, bufs);
#else
        (void)gpu;
        if (!me)
            say("") << "NOTE: no UPC++ device buffers of UPC++'s own: UPC++ " << UPCXX_VERSION
                    << " allows one cuda_device per GPU, and the heap owns it";
#endif

        const int bufcnt = bufs.size();
        long mapped = 0;
        for (const buf_t &b : bufs) mapped += heap_here(b);
        say() << "Running with " << bufcnt << " buffers (" << allocs_per_heap << " UPC++ host, "
              << heaps_per_kind * allocs_per_heap << " NVSHMEM, "
              << (UPCXX_OWN_DEVICE_BUFFERS ? UPCXX_DEVICE_HEAPS * allocs_per_heap : 0) << " UPC++ device), " << mapped
              << " NVSHMEM buffers mapped here";

        {  // basic sanity checks for buffer layout and simple copy (UPC++'s, through heap.copy)
            size_t bufelems = allocelems;
            auto gp_tmp = upcxx::new_array<val_t>(bufelems);
            auto lp_tmp = gp_tmp.local();
            long sanity_errs = 0;

            upcxx::barrier();
            for (int A = 0; A < bufcnt; A++) {
                for (size_t i = 0; i < bufelems; i++) {
                    if (A > 0)
                        REQUIRE(lp_tmp[i] == VAL(me, A - 1, i), "sanity: the source of copy %d unchanged (i=%zu)",
                                A - 1, i);
                    lp_tmp[i] = VAL(me, A, i);
                }
                any_ptr buf = bufs[A].gp;
                wait_or_die(heap.copy(gp_tmp, buf, bufelems), "sanity copy to a buffer");
            }
            upcxx::barrier();
            for (int A = 0; A < bufcnt; A++) {
                for (size_t i = 0; i < bufelems; i++) {
                    lp_tmp[i] = 0;
                }
                any_ptr buf = bufs[A].gp;
                wait_or_die(heap.copy(buf, gp_tmp, bufelems), "sanity copy from a buffer");
                for (size_t i = 0; i < bufelems; i++) {
                    val_t got = lp_tmp[i];
                    val_t expect = VAL(me, A, i);
                    if (got != expect) {
                        say() << "ERROR: Failed sanity check at "
                              << " A=" << A << "(" << bufdesc(bufs[A], buf) << ")" << std::setbase(16)
                              << std::setfill('0') << " i=0x" << i << " expect=0x" << std::setw(5) << expect
                              << " got=0x" << std::setw(5) << got;
                        errs++;
                        sanity_errs++;
                        break;
                    }
                }
            }

            upcxx::delete_array(gp_tmp);
            upcxx::barrier();
            copy_test::check("sanity", sanity_errs == 0,
                             "each of %d buffers written and read back through heap.copy: %ld wrong", bufcnt,
                             sanity_errs);
            upcxx::barrier();
        }

        val_t *priv_src = new val_t[maxelems];
        val_t *priv_dst = new val_t[maxelems + 1];

        uint64_t step = 0;
        long copies_fast_expected = 0, copies_fast_seen = 0, copies_total = 0, rc_timeouts = 0;
        long copies_batched_expected = 0, copies_batched_seen = 0;
        for (int round = 0; round < iters; round++) {
#if UPCXX_THREADMODE
            persona p;
            persona_scope ps(p);
#endif

            bool talk = !me && (iters <= 10 || round % ((iters + 9) / 10) == 0);
            if (talk) {
                say("") << "Round " << round << " (" << round * 100 / iters << " %)";
            }
            upcxx::barrier();
            for (size_t bufelems = 1; bufelems < 2 * maxelems; bufelems *= 2) {
                if (bufelems > maxelems) bufelems = maxelems;

                for (int A = 0; A < bufcnt; A++) {
                    for (int B = 0; B < bufcnt; B++) {
#if UPCXX_VERSION < 20220300
                        // UPC++ 2020.10's upcxx::copy between private memory and another rank's
                        // memory crashes or moves wrong bytes (seen with plain upcxx::copy of host
                        // memory); heap.copy hands it such copies unchanged unless the other end is
                        // heap memory mapped here. Those steps are left out on that release.
                        if ((!expect_fast_private(bufs[A]) && bufs[A].gp.where() != me) ||
                            (!expect_fast_private(bufs[B]) && bufs[B].gp.where() != me))
                            continue;
#endif
                        // Start offsets (elements) and an odd count now and then.
                        const size_t offA = step % 3, offB = (step / 3) % 3;
                        const size_t count = (step % 4 == 3 && bufelems > 2) ? bufelems - 1 : bufelems;
                        any_ptr bufA = bufs[A].gp + offA;
                        any_ptr bufB = bufs[B].gp + (maxelems + 4 + offB);
                        const int form = (step / 5) % N_FORMS;
                        g_desc = form * 100 + static_cast<int>(bufs[A].from) * 10 + static_cast<int>(bufs[B].from);
                        const bool static_kinds = (step / (5 * N_FORMS)) % 2;
#if SKIP_KILL
                        int killfreq = 0;
#else
                        int killfreq = 7;
#endif
                        const val_t dead = DEAD(step);
#if SKIP_RC_ONLY || !COPY_HAS_REMOTE_CX
                        const bool rconly = false;
#else
                        const bool rconly = (step % 5 == 1);
#endif

                        for (size_t i = 0; i < count; i++) {
                            priv_src[i] = VAL(me, step, i);
                            priv_dst[i] = 0;
                        }
                        priv_dst[count] = 0;
                        const auto c0 = heap.copies();
                        const bool fast_AB = expect_fast(bufs[A], bufs[B]);
                        const bool batched_AB = expect_batched(bufs[A], bufs[B], count * sizeof(val_t));
                        long copies_here = counted(bufs[A]) + (counted(bufs[A]) || counted(bufs[B])) + counted(bufs[B]);
                        // private -> A, A -> B, B -> private, and the kill copies (private -> A, -> B)
                        long fast_expected = expect_fast_private(bufs[A]) + fast_AB + expect_fast_private(bufs[B]);

                        future<> of, sf;
                        future<> kf1 = make_future(), kf2 = make_future(), kf3 = make_future();
                        const bool kill1 = killfreq && !((step * 3 + 1) % killfreq);
                        const bool kill2 = killfreq && !((step * 3 + 2) % killfreq);
                        const bool kill3 = killfreq && !((step * 3 + 3) % killfreq);

                        if (rconly) {  // use only remote completion events
#if COPY_HAS_REMOTE_CX
                            promise<> p1, p2, p3;
                            // private -> heapA
                            heap.copy(priv_src, bufA, count, remote_cx::as_rpc([=, &p1]() {
                                          rc(bufA.where());  // at heapA
                                          // notify initiator
                                          rpc_ff(me, [&]() { p1.fulfill_anonymous(1); });
                                      }));
                            wait_or_die(p1.get_future(), "remote completion of private -> A");

                            // heapA -> heapB
                            heap.copy(bufA, bufB, count, remote_cx::as_rpc([=, &p2]() {
                                          rc(bufB.where());  // at heapB
                                          // notify initiator
                                          rpc_ff(me, [&]() { p2.fulfill_anonymous(1); });
                                      }));
                            wait_or_die(p2.get_future(), "remote completion of A -> B");

                            // heapB -> private
                            heap.copy(bufB, priv_dst, count, remote_cx::as_rpc([=, &p3]() {
                                          rc(me);  // at me
                                          p3.fulfill_anonymous(1);
                                      }));
                            wait_or_die(p3.get_future(), "remote completion of B -> private");
                            rc_sent += 3;
#endif
                        } else {  // exercise all three completion events (those the form has)
                            // private -> heapA
                            std::tie(of, sf) = copy_with(form, static_kinds, priv_src, bufA, count,
                                                         form == F_DEFAULT ? -1 : bufA.where());
                            if (kill1) {
                                kf1 = sf.then([=]() { priv_src[0] = dead; });
                            } else
                                wait_or_die(sf, "source completion of private -> A");
                            wait_or_die(of, "operation completion of private -> A");

                            // heapA -> heapB
                            std::tie(of, sf) =
                                copy_with(form, static_kinds, bufA, bufB, count, form == F_DEFAULT ? -1 : bufB.where());
                            if (kill2) {
                                kf2 = sf.then([&]() { return heap.copy(&dead, bufA, 1); });
                                copies_here += counted(bufs[A]);
                                fast_expected += expect_fast_private(bufs[A]);
                            } else
                                wait_or_die(sf, "source completion of A -> B");
                            wait_or_die(of, "operation completion of A -> B");

                            // heapB -> private
                            std::tie(of, sf) =
                                copy_with(form, static_kinds, bufB, priv_dst, count, form == F_DEFAULT ? -1 : me);
                            if (kill3) {
                                kf3 = sf.then([&]() { return heap.copy(&dead, bufB, 1); });
                                copies_here += counted(bufs[B]);
                                fast_expected += expect_fast_private(bufs[B]);
                            } else
                                wait_or_die(sf, "source completion of B -> private");
                            wait_or_die(of, "operation completion of B -> private");

                            wait_or_die(when_all(kf1, kf2, kf3), "the kill copies");
                        }

                        std::string mismatch;
                        for (size_t i = 0; i < count; i++) {
                            val_t got = priv_dst[i];
                            val_t expect = VAL(me, step, i);
                            if (got != expect) {
                                std::ostringstream oss;
                                oss << std::setbase(16) << " i=0x" << i;
                                oss.fill('0');
                                oss << " expect=0x" << std::setw(5) << expect << " got=0x" << std::setw(5) << got;
                                if (i == 0) {  // heuristic detection of kill values
                                    std::int64_t deadchk = (std::int64_t)dead - (std::int64_t)got;
                                    if (deadchk == 0)
                                        oss << ", DEAD";  // matches kill write from this step
                                    else if (deadchk > 0 && deadchk <= 2 * bufcnt * bufcnt)
                                        oss << ", dead";  // matches kill write from a recent step
                                }
                                mismatch = oss.str();
                                break;
                            }
                        }
                        if (mismatch.empty() && priv_dst[count] != 0)
                            mismatch = " the element after the last copied one was written";
                        if (mismatch.size()) {  // diagnose failure
                            say() << "ERROR: Mismatch at round=" << round << " bufsz=" << std::setw(5)
                                  << (count * sizeof(val_t)) << " A=" << A << "(" << bufdesc(bufs[A], bufA) << " +"
                                  << offA << ")"
                                  << " B=" << B << "(" << bufdesc(bufs[B], bufB) << " +" << offB << ")"
                                  << " form=" << form_name(form) << (static_kinds ? " static kinds" : "")
                                  << std::setfill('0') << " step=0x" << std::setw(4) << std::hex << step << mismatch
                                  << (kill1 ? ", kill1" : "") << (kill2 ? ", kill2" : "") << (kill3 ? ", kill3" : "")
                                  << (rconly ? ", rconly" : "");
                            errs++;
                        }

                        // The path: only A -> B can be fast (private memory is never NVSHMEM's).
                        const auto c1 = heap.copies();
                        const long fast = static_cast<long>(c1.fast - c0.fast),
                                   slow = static_cast<long>(c1.fallback - c0.fallback);
                        const long batched = static_cast<long>(c1.batched - c0.batched);
                        copies_fast_expected += fast_AB;
                        copies_fast_seen += fast;
                        copies_batched_expected += batched_AB;
                        copies_batched_seen += batched;
                        copies_total += copies_here;
                        if (batched != static_cast<long>(batched_AB)) {
                            if (acct_errs < 20)
                                say() << "ERROR: batching of A=" << A << "(" << bufdesc(bufs[A], bufA) << ") -> B=" << B
                                      << "(" << bufdesc(bufs[B], bufB) << "), " << count * sizeof(val_t)
                                      << " bytes: " << batched << " batched, expected " << batched_AB;
                            acct_errs++;
                        }
                        if (fast != fast_expected || fast + slow != copies_here) {
                            if (acct_errs < 20)
                                say() << "ERROR: path of A=" << A << "(" << bufdesc(bufs[A], bufA) << ") -> B=" << B
                                      << "(" << bufdesc(bufs[B], bufB) << "): " << fast << " fast + " << slow
                                      << " fallback copies of " << copies_here << ", expected " << fast_expected
                                      << " fast (A -> B " << (fast_AB ? "fast" : "fallback") << ")";
                            acct_errs++;
                        }

                        step++;
                    }
                }  // A/B bufs

                if (!copy_test::progress_until([&] { return rc_count >= rc_sent; }, 60)) {
                    say() << "ERROR: " << rc_count << " remote completions ran here, " << rc_sent
                          << " expected, after 60 s";
                    rc_timeouts++;
                    errs++;
                }
                if (rc_count != rc_sent) {
                    say() << "ERROR: " << rc_count << " remote completions ran here, " << rc_sent << " expected";
                    errs++;
                }
                if (rc_wrong_rank) {
                    say() << "ERROR: " << rc_wrong_rank << " remote completions ran on another rank than the target";
                    errs++;
                    rc_wrong_rank = 0;
                }
                if (rc_bad_args) {
                    say() << "ERROR: " << rc_bad_args << " remote completions received wrong std::string / std::vector "
                          << "arguments";
                    errs++;
                    rc_bad_args = 0;
                }
                rc_count = 0;
                rc_sent = 0;
                upcxx::barrier();
            }  // bufelems
        }  // round

        REQUIRE(&upcxx::current_persona() == &upcxx::master_persona(), "back on the master persona after the rounds");
        upcxx::barrier();

        copy_test::check("values", errs == 0,
                         "%llu steps of private -> A -> B -> private, %d buffers, %d forms: %ld mismatches",
                         static_cast<unsigned long long>(step), bufcnt, static_cast<int>(N_FORMS), errs);
        copy_test::check(
            "paths",
            acct_errs == 0 && (forced_fallback() || mapped == 0 ||
                               (copies_fast_expected > 0 && (batch_limit() == 0 || copies_batched_expected > 0))),
            "%ld copies, %ld fast as expected (%ld seen), %ld batched as expected (%ld seen); %ld steps "
            "with a wrong path",
            copies_total, copies_fast_expected, copies_fast_seen, copies_batched_expected, copies_batched_seen,
            acct_errs);
        copy_test::check("remote_completions", rc_timeouts == 0, "%s",
                         COPY_HAS_REMOTE_CX
                             ? "every remote_cx::as_rpc ran once, on the target's master persona in progress"
                             : "(UPC++ 2020.10: upcxx::copy has no remote_cx; none asked)");
        copy_test::check("deferred", defer_violations == 0,
                         "%ld deferred notifications were ready when copy() returned%s", defer_violations,
                         COPY_HAS_EAGER ? "" : " (UPC++ before 2023.3 has no as_defer_*: none asked)");
        copy_test::check("lpc_persona", lpc_wrong_persona == 0,
                         "%ld as_lpc callbacks ran on another persona than the initiator's", lpc_wrong_persona);
        {
            std::string failed;
            try {
                heap.check_copies();
            } catch (const copy_test::heap_error &e) {
                failed = e.what();
            }
            copy_test::check("check_copies", failed.empty(), "no fast copy failed after it was issued%s%s",
                             failed.empty() ? "" : ": ", failed.c_str());
        }

        // cleanup

        delete[] priv_src;
        delete[] priv_dst;

        for (unsigned i = 0; i < allocs_per_heap; i++) {
            upcxx::delete_array(host_ptrs[i]);
        }
#if UPCXX_OWN_DEVICE_BUFFERS
        devstate_cuda.destroy();
#endif
        heap.destroy();
        g_heap = nullptr;
        for (char *b : blocks) nvshmem_free(b);
        nvshmem_free(spacer);
    }

    REQUIRE(&upcxx::current_persona() == &upcxx::master_persona(), "on the master persona at the end");
    nvshmem_finalize();
    const int rc_exit = copy_test::finish();
    if (!rank_me()) say("") << "Test result: " << (rc_exit ? "ERROR" : "SUCCESS");
    upcxx::finalize();
    return rc_exit;
}
