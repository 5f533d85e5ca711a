// upcxx-extra-nvshmem: the UPC++ layer. Header-only, over the C ABI (upcxx_extra_nvshmem.h).
// SPDX-License-Identifier: BSD-3-Clause
//
// upcxx::extra::nvshmem_heap makes NVSHMEM's symmetric heap addressable from UPC++: a private
// UPC++ device allocator over NVSHMEM's memory (never used to allocate: NVSHMEM's own internal
// buffers sit at the start of its heap), plus translation between symmetric addresses (for
// nvshmem_put & co.) and UPC++ global pointers (for upcxx::copy & co.). The translation is done
// by the C library; this header converts types and errors and runs the collectives.
//
//   upcxx::init(); nvshmem init ...;
//   upcxx::extra::nvshmem_heap heap;                      // collective over upcxx::world()
//   int *a = (int *)nvshmem_malloc(n * sizeof(int));      // collective, NVSHMEM as usual
//   heap.update();                                        // collective: covers what NVSHMEM mapped since
//   auto gp = heap.to_global_ptr(a, (heap.my_pe() + 1) % heap.n_pes());
//   upcxx::copy(gp, local_dev_ptr, n).wait();             // UPC++ on the same bytes
//   auto back = heap.from_global_ptr(gp);                 // {a, pe}: ready for nvshmem_put
//   heap.destroy();                                       // collective, before nvshmem_finalize
//
// Supported UPC++ releases (docs/compatibility.md): 2020.10.0 and later, built with CUDA.
//   - CUDA support is detected with UPCXX_KIND_CUDA (documented since 2021.3.0) or, for older
//     releases, UPCXX_CUDA_ENABLED.
//   - UPCXX_VERSION >= 2022.3.0: make_gpu_allocator, several allocators per GPU (this heap's
//     allocator lives beside the user's own). Older: cuda_device + device_allocator, one
//     cuda_device per GPU per process (this heap then owns the GPU's only cuda_device).
//
// Failures are collective: a constructor or update() that fails on any rank throws
// nvshmem_error on EVERY rank (the failing rank's status; its message names the rank), so no rank
// is left waiting in a collective. Nothing is created in UPC++ before every rank has agreed.
#ifndef UPCXX_EXTRA_NVSHMEM_HPP
#define UPCXX_EXTRA_NVSHMEM_HPP

#include <upcxx/upcxx.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>  // the fast copy path (UPC++ built with CUDA links cudart)

#include "upcxx_extra_nvshmem.h"
#include "upcxx_extra/nvshmem/collective.hpp"
#include "upcxx_extra/nvshmem/error.hpp"
#include "upcxx_extra/nvshmem/init.hpp"

#define UPCXX_EXTRA_NVSHMEM_STR2_(x) #x
#define UPCXX_EXTRA_NVSHMEM_STR_(x) UPCXX_EXTRA_NVSHMEM_STR2_(x)

#if !defined(UPCXX_VERSION)
#error "upcxx_extra/nvshmem.hpp needs UPC++: <upcxx/upcxx.hpp> did not define UPCXX_VERSION"
#endif

// CUDA support: UPCXX_KIND_CUDA (2021.3.0 onwards, the documented feature macro) or
// UPCXX_CUDA_ENABLED (2020.10 and older). A UPC++ without either was built without CUDA.
#if defined(UPCXX_KIND_CUDA) && (UPCXX_KIND_CUDA + 0) > 0
#define UPCXX_EXTRA_NVSHMEM_UPCXX_CUDA 1
#elif defined(UPCXX_CUDA_ENABLED) && (UPCXX_CUDA_ENABLED + 0)
#define UPCXX_EXTRA_NVSHMEM_UPCXX_CUDA 1
#else
#pragma message("upcxx_extra/nvshmem.hpp: found UPC++ UPCXX_VERSION " UPCXX_EXTRA_NVSHMEM_STR_(UPCXX_VERSION) \
                " with neither UPCXX_KIND_CUDA nor UPCXX_CUDA_ENABLED")
#error "upcxx_extra/nvshmem.hpp needs a UPC++ built with CUDA support (configure --enable-cuda); this UPC++ (UPCXX_VERSION above) has none"
#endif

// The allocator API: make_gpu_allocator and several allocators per GPU from 2022.3.0 on.
#if UPCXX_VERSION >= 20220300L
#define UPCXX_EXTRA_NVSHMEM_GPU_ALLOCATOR 1
#else
#define UPCXX_EXTRA_NVSHMEM_GPU_ALLOCATOR 0
#endif

namespace upcxx {
namespace extra {

namespace detail {
/// One rank's view of its heap, exchanged at construction and update().
struct rank_entry {
    int status;  // OK, or why this rank cannot take part
    int pe;
    int n_pes;
    int device;
    std::uintptr_t base;
    std::size_t mapped;
};
}  // namespace detail

/// NVSHMEM's symmetric heap as a private UPC++ device segment.
///
/// Construct collectively over upcxx::world() from the master persona, after upcxx::init() and
/// NVSHMEM init; call update() collectively after nvshmem_malloc calls that may have grown the
/// heap; destroy() collectively before nvshmem_finalize(). World ranks and NVSHMEM PEs must be the
/// same processes (rank_n == n_pes); the PE -> rank map may be any permutation. One nvshmem_heap
/// is active per process at a time.
///
/// Lifetime: movable, not copyable. destroy() is collective and idempotent. A heap that goes out
/// of scope (or is assigned over) while active and UPC++ is still initialised cannot run a
/// collective there: it leaves its UPC++ device segment allocated until upcxx::finalize(), forgets
/// the translation table and prints one warning to stderr; it never aborts or hangs.
///
/// Thread safety: to_global_ptr / from_global_ptr / copy / accessors may run on any thread (a
/// copy completes on the persona that called it); the constructor, update(), destroy() and moves
/// must not run concurrently with them.
class nvshmem_heap {
public:
    using device_gptr = upcxx::global_ptr<char, upcxx::memory_kind::cuda_device>;

    /// Collective. Throws nvshmem_error on every rank when any rank fails (nothing is created then).
    nvshmem_heap() {
        const char *what = "nvshmem_heap";
        if (!upcxx::initialized())
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                "nvshmem_heap: UPC++ is not initialised (call upcxx::init() first)");
        std::string msg;
        detail::rank_entry mine = local_entry(msg);
        if (mine.status == UPCXX_EXTRA_NVSHMEM_STATUS_OK && detail::active_heaps() > 0) {
            mine.status = UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT;
            msg = "nvshmem_heap: another nvshmem_heap is active in this process; use it, or destroy() it first";
        }
#if !UPCXX_EXTRA_NVSHMEM_GPU_ALLOCATOR && defined(UPCXX_CUDA_ENABLED)
        // UPC++ before 2022.3 allows one cuda_device per GPU per process and aborts on a second:
        // refuse here, collectively, instead.
        if (mine.status == UPCXX_EXTRA_NVSHMEM_STATUS_OK && mine.device >= 0 && mine.device < upcxx::cuda::max_devices &&
            upcxx::cuda::devices[mine.device] != nullptr) {
            mine.status = UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT;
            msg = "nvshmem_heap: CUDA device " + std::to_string(mine.device) +
                  " already has a upcxx::cuda_device in this process, and UPC++ " UPCXX_EXTRA_NVSHMEM_STR_(UPCXX_VERSION)
                  " allows one per GPU; destroy() it first, or allocate those buffers with nvshmem_malloc "
                  "(docs/compatibility.md)";
        }
#endif
        std::vector<detail::rank_entry> all = detail::allgather(mine, what);
        fail_together(all, mine, msg, what);
        std::vector<upcxx_extra_nvshmem_peer_t> peers = validate(all, what);

        upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_set_peers(static_cast<int>(peers.size()), peers.data());
        detail::agree(s ? detail::outcome::of(detail::c_error(s)) : detail::outcome{}, what);

        info_.base = reinterpret_cast<void *>(mine.base);
        info_.my_pe = mine.pe;
        info_.n_pes = mine.n_pes;
        info_.device = mine.device;
        base_raw_.resize(all.size());
        for (std::size_t r = 0; r < all.size(); r++) base_raw_[r] = all[r].base;
        ++detail::active_heaps();
        active_ = true;
        copy_ = std::make_shared<copy_state>();
        const char *knob = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY");
        copy_->force_fallback = knob && std::string(knob) == "upcxx";
        try {
            grow_to(min_mapped(all));
        } catch (...) {
            abandon("its construction failed after the UPC++ device segment was made");
            throw;
        }
    }

    nvshmem_heap(const nvshmem_heap &) = delete;
    nvshmem_heap &operator=(const nvshmem_heap &) = delete;

    nvshmem_heap(nvshmem_heap &&o) noexcept { take(o); }
    /// Assigning over an active heap destroys it first (collective, like destroy()).
    nvshmem_heap &operator=(nvshmem_heap &&o) {
        if (this != &o) {
            destroy();
            take(o);
        }
        return *this;
    }

    ~nvshmem_heap() {
        if (active_) abandon("it went out of scope without destroy()");
    }

    /// Collective: tears the UPC++ segment down (before nvshmem_finalize) and forgets the table.
    /// A second call, or a call on a moved-from heap, does nothing. After upcxx::finalize() it
    /// only releases this process's objects.
    void destroy() {
        if (!active_) return;
        if (!upcxx::initialized()) {
            release();
            return;
        }
        upcxx::barrier();
#if UPCXX_EXTRA_NVSHMEM_GPU_ALLOCATOR
        for (auto &a : allocs_) a->destroy();  // collective; each allocator owns its device object
#else
        alloc_.reset();
        if (gpu_) gpu_->destroy();  // collective: releases the device and its segment
#endif
        release();
    }

    /// Collective: makes the memory NVSHMEM has mapped since (nvshmem_malloc grows the heap under
    /// CUDA VMM) addressable from UPC++, and returns the new extent. Global pointers made before
    /// stay valid; new ones may straddle the old and new memory. Without CUDA VMM the heap does
    /// not grow and this returns extent() unchanged. Throws on every rank when any rank fails.
    std::size_t update() {
        const char *what = "nvshmem_heap::update";
        if (!active_) throw inactive("nvshmem_heap::update");
        std::string msg;
        detail::rank_entry mine = local_entry(msg);
        if (mine.status == UPCXX_EXTRA_NVSHMEM_STATUS_OK &&
            (mine.base != reinterpret_cast<std::uintptr_t>(info_.base) || mine.pe != info_.my_pe)) {
            mine.status = UPCXX_EXTRA_NVSHMEM_STATUS_VALIDATION_FAILED;
            msg = "nvshmem_heap::update: the NVSHMEM heap is no longer the one this nvshmem_heap was built on "
                  "(base or PE changed: NVSHMEM re-initialised?)";
        }
        std::vector<detail::rank_entry> all = detail::allgather(mine, what);
        fail_together(all, mine, msg, what);
        grow_to(min_mapped(all));
        return extent_;
    }

    bool is_active() const noexcept { return active_; }
    int my_pe() const noexcept { return info_.my_pe; }
    int n_pes() const noexcept { return info_.n_pes; }
    int device() const noexcept { return info_.device; }
    void *base() const noexcept { return info_.base; }
    /// The extent UPC++ can address from base() on every PE: the heap mapped on every PE at the
    /// last construction or update().
    std::size_t extent() const noexcept { return extent_; }
    /// How many UPC++ device segments back this heap (grows by one per update() that grew the
    /// extent with UPC++ >= 2022.3; always 1 before).
    std::size_t segments() const noexcept {
#if UPCXX_EXTRA_NVSHMEM_GPU_ALLOCATOR
        return allocs_.size();
#else
        return alloc_ ? 1 : 0;
#endif
    }

    /// The global pointer to PE `pe`'s copy of the symmetric object `sym` (one C call).
    template <class T>
    upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> to_global_ptr(T *sym, int pe) const {
        if (!active_) throw inactive("to_global_ptr");
        upcxx_extra_nvshmem_gptr_t g;
        upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_to_global_ptr(static_cast<const void *>(sym), pe, &g);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw detail::c_error(s);
        const std::size_t off = reinterpret_cast<std::uintptr_t>(g.raw) - base_raw_[static_cast<std::size_t>(g.rank)];
        if (off + sizeof(T) > extent_) throw past_extent("to_global_ptr", off, sizeof(T));
        return upcxx::reinterpret_pointer_cast<T>(base_gp_[static_cast<std::size_t>(g.rank)] +
                                                  static_cast<std::ptrdiff_t>(off));
    }
    template <class T>
    upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> to_global_ptr(T *sym) const {
        return to_global_ptr(sym, my_pe());
    }

    /// The symmetric address and the PE of `gp` (which must point into this heap; one C call).
    template <class T>
    std::pair<T *, int> from_global_ptr(upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> gp) const {
        if (!active_) throw inactive("from_global_ptr");
        if (!gp)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, "from_global_ptr: null global pointer");
        const int r = gp.where();
        if (r < 0 || static_cast<std::size_t>(r) >= base_gp_.size())
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK,
                                "from_global_ptr: rank " + std::to_string(r) + " is not a rank of this heap (" +
                                    std::to_string(base_gp_.size()) + " ranks)");
        const std::ptrdiff_t off = upcxx::reinterpret_pointer_cast<char>(gp) - base_gp_[static_cast<std::size_t>(r)];
        if (off < 0 || static_cast<std::size_t>(off) + sizeof(T) > extent_)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP,
                                "from_global_ptr: the global pointer to rank " + std::to_string(r) + " is at offset " +
                                    std::to_string(off) + ", outside the " + std::to_string(extent_) +
                                    " bytes of NVSHMEM heap this nvshmem_heap covers");
        void *sym = nullptr;
        int pe = -1;
        detail::check(upcxx_extra_nvshmem_from_global_ptr(
            r, reinterpret_cast<const void *>(base_raw_[static_cast<std::size_t>(r)] + static_cast<std::size_t>(off)),
            &sym, &pe));
        return {static_cast<T *>(sym), pe};
    }

    /// Counts of the copies heap.copy() made by each path since construction (this process).
    struct copy_counts {
        std::size_t fast = 0;      // CUDA async copy through NVSHMEM's P2P mapping
        std::size_t fallback = 0;  // upcxx::copy
    };
    copy_counts copies() const {
        if (!copy_) return copy_counts{};
        std::lock_guard<std::mutex> lock(copy_->mu);
        return copy_->counts;
    }

    /// upcxx::copy's argument order and element count, for device global pointers into this heap
    /// (and raw symmetric addresses of this PE's heap, the overloads below). When both ranges lie
    /// in the heap and NVSHMEM has them mapped in this process (same node, P2P), the bytes move by
    /// one cudaMemcpyAsync through that mapping (NVLink speed); anything else (another node, a
    /// pointer outside this heap's extent such as UPC++'s own segments, the knob
    /// UPCXX_EXTRA_NVSHMEM_COPY=upcxx) goes to upcxx::copy. The future is ready when the bytes are
    /// at the destination, through UPC++ progress on the calling persona (wait(), then(),
    /// when_all(); many copies may be in flight). Fast copies of up to 4 MiB complete before
    /// copy() returns (a ready future: they take less than an asynchronous completion costs). 0
    /// elements: a ready future.
    /// Throws nvshmem_error (nothing is copied) for null pointers, a count whose size overflows,
    /// a range that starts in the heap and runs past extent() (call update()), or a CUDA error
    /// when the copy is issued. A CUDA error reported later, when the copy completes, is kept:
    /// check_copies() throws it. Ordering with NVSHMEM: docs/compatibility.md.
    template <class S, class T>
    upcxx::future<> copy(upcxx::global_ptr<S, upcxx::memory_kind::cuda_device> src,
                         upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> dst, std::size_t count) {
        static_assert(std::is_same<typename std::remove_const<S>::type, T>::value,
                      "nvshmem_heap::copy: source and destination element types differ");
        static_assert(std::is_trivially_copyable<T>::value, "nvshmem_heap::copy moves raw bytes");
        if (!active_) throw inactive("nvshmem_heap::copy");
        if (!src || !dst)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT,
                                std::string("nvshmem_heap::copy: the ") + (!src ? "source" : "destination") +
                                    " is a null global pointer");
        if (count == 0) return upcxx::make_future();
        if (count > static_cast<std::size_t>(-1) / sizeof(T))
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                "nvshmem_heap::copy: " + std::to_string(count) + " elements of " +
                                    std::to_string(sizeof(T)) + " bytes overflow size_t");
        const std::size_t bytes = count * sizeof(T);
        // Both ranges are checked whatever the path: one that starts in the heap must fit it.
        void *from = mapped_here(src, bytes, "source");
        void *to = mapped_here(dst, bytes, "destination");
        if (!from || !to || copy_->force_fallback) {
            {
                std::lock_guard<std::mutex> lock(copy_->mu);
                copy_->counts.fallback++;
            }
            return upcxx::copy(src, dst, count);
        }
        return fast_copy(to, from, bytes);
    }
    template <class T>
    upcxx::future<> copy(const T *src_sym, upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> dst, std::size_t count) {
        if (!src_sym) return copy(upcxx::global_ptr<const T, upcxx::memory_kind::cuda_device>(nullptr), dst, count);
        return copy(to_global_ptr(src_sym), dst, count);
    }
    template <class T>
    upcxx::future<> copy(upcxx::global_ptr<const T, upcxx::memory_kind::cuda_device> src, T *dst_sym, std::size_t count) {
        if (!dst_sym) return copy(src, upcxx::global_ptr<T, upcxx::memory_kind::cuda_device>(nullptr), count);
        return copy(src, to_global_ptr(dst_sym), count);
    }
    template <class T>
    upcxx::future<> copy(upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> src, T *dst_sym, std::size_t count) {
        return copy(upcxx::global_ptr<const T, upcxx::memory_kind::cuda_device>(src), dst_sym, count);
    }

    /// Throws nvshmem_error (CUDA_ERROR) for the first fast copy that failed after it was issued,
    /// since the last call; nothing otherwise.
    void check_copies() {
        if (!copy_) return;
        std::string e;
        {
            std::lock_guard<std::mutex> lock(copy_->mu);
            e.swap(copy_->error);
        }
        if (e.empty()) return;
        throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR, e);
    }

private:
    // Shared by the heap and its copies in flight (they may outlive a moved-from heap object).
    struct copy_state {
        cudaStream_t stream = nullptr;
        bool force_fallback = false;
        copy_counts counts;
        std::string error;                // the first fast copy that failed after it was issued
        std::vector<cudaEvent_t> events;  // reused: creating one per copy costs microseconds
        std::mutex mu;                    // the above, for copies from several threads (par)
        ~copy_state() {
            if (stream) {
                cudaStreamSynchronize(stream);
                cudaStreamDestroy(stream);
            }
            for (cudaEvent_t e : events) cudaEventDestroy(e);
        }
    };
    // One fast copy in flight, completed on the initiating persona. Its event is polled from
    // LPCs on that persona for up to `poll_window` after issue (UPC++ runs an LPC that re-enqueues
    // itself within the same progress call, so this is a bounded spin that completes a copy as
    // soon as it lands); a copy still in flight then gets a CUDA host function on the stream,
    // which posts the completing LPC when it lands (no spin; about 35 us later). Everything but
    // the host function's lpc_ff runs on the initiator's thread.
    struct copy_done {
        copy_done(std::shared_ptr<copy_state> s, upcxx::persona *p)
            : state(std::move(s)), initiator(p), issued(std::chrono::steady_clock::now()) {}
        std::shared_ptr<copy_state> state;
        upcxx::persona *initiator;
        upcxx::promise<> done;
        cudaEvent_t event = nullptr;
        std::chrono::steady_clock::time_point issued;
    };
    static constexpr std::chrono::microseconds poll_window{100};

    static void complete(copy_done *d, cudaError_t e) {
        {
            std::lock_guard<std::mutex> lock(d->state->mu);
            if (e != cudaSuccess && d->state->error.empty())
                d->state->error = std::string("nvshmem_heap::copy: a CUDA copy failed: ") + cudaGetErrorString(e);
            d->state->events.push_back(d->event);
        }
        d->done.fulfill_anonymous(1);
        delete d;
    }
    struct copy_poll {
        copy_done *d;
        void operator()() const {
            cudaError_t e = cudaEventQuery(d->event);
            if (e != cudaErrorNotReady) return complete(d, e);
            if (std::chrono::steady_clock::now() - d->issued < poll_window) return d->initiator->lpc_ff(copy_poll{d});
            if (cudaLaunchHostFunc(d->state->stream, copy_landed, d) != cudaSuccess)
                complete(d, cudaEventSynchronize(d->event));  // cannot wait asynchronously: wait here
        }
    };
    static void CUDART_CB copy_landed(void *arg) {
        // A CUDA thread: no CUDA call here; lpc_ff is safe from any thread (an MPSC inbox).
        copy_done *d = static_cast<copy_done *>(arg);
        d->initiator->lpc_ff([d] { complete(d, cudaEventQuery(d->event)); });
    }

    // Copies up to this size are waited for in the call and return a ready future: they take
    // less than the asynchronous completion's bookkeeping (4 MiB: about 11 us at 380 GB/s over
    // NVLink). Measured on H200s: docs/copy.md.
    static constexpr std::size_t sync_copy_max = std::size_t(4) << 20;

    upcxx::future<> fast_copy(void *to, const void *from, std::size_t bytes) {
        cudaError_t e = cudaSuccess;
        std::unique_lock<std::mutex> lock(copy_->mu);
        if (!copy_->stream) {
            int cur = -1;
            cudaGetDevice(&cur);
            if (cur != info_.device) cudaSetDevice(info_.device);
            e = cudaStreamCreateWithFlags(&copy_->stream, cudaStreamNonBlocking);
            if (cur != info_.device && cur >= 0) cudaSetDevice(cur);
        }
        copy_->counts.fast++;
        lock.unlock();
        if (e == cudaSuccess) e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, copy_->stream);
        if (e == cudaSuccess && bytes <= sync_copy_max) e = cudaStreamSynchronize(copy_->stream);
        if (e != cudaSuccess)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR,
                                std::string("nvshmem_heap::copy: cudaMemcpyAsync of ") + std::to_string(bytes) +
                                    " bytes failed: " + cudaGetErrorString(e));
        if (bytes <= sync_copy_max) return upcxx::make_future();
        copy_done *d = new copy_done(copy_, &upcxx::current_persona());
        upcxx::future<> f = d->done.get_future();
        lock.lock();
        if (!copy_->events.empty()) {
            d->event = copy_->events.back();
            copy_->events.pop_back();
        }
        lock.unlock();
        if (!d->event && cudaEventCreateWithFlags(&d->event, cudaEventDisableTiming) != cudaSuccess) d->event = nullptr;
        if (!d->event || cudaEventRecord(d->event, copy_->stream) != cudaSuccess) {
            // The copy is issued: wait for it here rather than lose it.
            cudaError_t w = cudaStreamSynchronize(copy_->stream);
            if (d->event) {
                complete(d, w);
            } else {
                std::lock_guard<std::mutex> guard(copy_->mu);
                if (w != cudaSuccess && copy_->error.empty())
                    copy_->error = std::string("nvshmem_heap::copy: a CUDA copy failed: ") + cudaGetErrorString(w);
                d->done.fulfill_anonymous(1);
                delete d;
            }
            return f;
        }
        upcxx::current_persona().lpc_ff(copy_poll{d});
        return f;
    }

    // The address this process reaches the bytes of `gp` at, or nullptr when they are not in this
    // heap's extent or not mapped here. Throws when the range starts in the extent but runs past it.
    template <class T>
    void *mapped_here(upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> gp, std::size_t bytes, const char *which) const {
        const int r = gp.where();
        if (r < 0 || static_cast<std::size_t>(r) >= base_gp_.size()) return nullptr;
        const std::ptrdiff_t off =
            upcxx::reinterpret_pointer_cast<char>(upcxx::const_pointer_cast<typename std::remove_const<T>::type>(gp)) -
            base_gp_[static_cast<std::size_t>(r)];
        if (off < 0 || static_cast<std::size_t>(off) >= extent_) return nullptr;  // not this heap's memory
        if (bytes > extent_ - static_cast<std::size_t>(off))
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP,
                                std::string("nvshmem_heap::copy: the ") + which + " range of " + std::to_string(bytes) +
                                    " bytes at heap offset " + std::to_string(off) + " on rank " + std::to_string(r) +
                                    " runs past the " + std::to_string(extent_) +
                                    " bytes this nvshmem_heap covers (call update() after nvshmem_malloc)");
        void *local = nullptr;
        const void *raw = reinterpret_cast<const void *>(base_raw_[static_cast<std::size_t>(r)] + static_cast<std::size_t>(off));
        detail::check(upcxx_extra_nvshmem_local_ptr(r, raw, bytes, &local, nullptr, nullptr));
        return local;
    }

    using allocator_type = upcxx::device_allocator<upcxx::cuda_device>;

    static detail::rank_entry local_entry(std::string &msg) {
        detail::rank_entry e{};
        upcxx_extra_nvshmem_heap_info_t h;
        upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_heap_query(&h);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) {
            e.status = s;
            msg = detail::c_error(s).what();
            return e;
        }
        e.status = UPCXX_EXTRA_NVSHMEM_STATUS_OK;
        e.pe = h.my_pe;
        e.n_pes = h.n_pes;
        e.device = h.device;
        e.base = reinterpret_cast<std::uintptr_t>(h.base);
        e.mapped = h.mapped_size;
        if (h.mapped_size == 0 || h.device < 0) {
            e.status = UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR;
            msg = "nvshmem_heap: the mapped extent (" + std::to_string(h.mapped_size) + " bytes) or the CUDA device (" +
                  std::to_string(h.device) + ") of the heap of PE " + std::to_string(h.my_pe) + " is unknown";
        }
        return e;
    }

    static void fail_together(const std::vector<detail::rank_entry> &all, const detail::rank_entry &mine,
                              const std::string &msg, const char *what) {
        int first = upcxx::rank_n();
        for (std::size_t r = 0; r < all.size(); r++)
            if (all[r].status != UPCXX_EXTRA_NVSHMEM_STATUS_OK) {
                first = static_cast<int>(r);
                break;
            }
        detail::fail_together(first, detail::outcome{static_cast<upcxx_extra_nvshmem_status_t>(mine.status), nvshmem_errc::c_status, msg}, what);
    }

    // Every rank runs this on the same data, so every rank throws the same error, or none does.
    static std::vector<upcxx_extra_nvshmem_peer_t> validate(const std::vector<detail::rank_entry> &all,
                                                           const char *what) {
        const int n = static_cast<int>(all.size());
        std::vector<upcxx_extra_nvshmem_peer_t> peers(all.size(), upcxx_extra_nvshmem_peer_t{-1, nullptr});
        for (int r = 0; r < n; r++) {
            const detail::rank_entry &e = all[static_cast<std::size_t>(r)];
            if (e.n_pes != n)
                throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                    std::string(what) + ": NVSHMEM has " + std::to_string(e.n_pes) + " PEs on rank " +
                                        std::to_string(r) + " but upcxx::world() has " + std::to_string(n) +
                                        " ranks; they must be the same processes");
            if (e.pe < 0 || e.pe >= n || peers[static_cast<std::size_t>(e.pe)].rank >= 0)
                throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE,
                                    std::string(what) + ": rank " + std::to_string(r) + " reports PE " +
                                        std::to_string(e.pe) + ", out of range [0, " + std::to_string(n) +
                                        ") or taken by another rank: PEs and ranks must be the same processes");
            peers[static_cast<std::size_t>(e.pe)].rank = r;
            peers[static_cast<std::size_t>(e.pe)].base = reinterpret_cast<void *>(e.base);
        }
        return peers;
    }

    static std::size_t min_mapped(const std::vector<detail::rank_entry> &all) {
        std::size_t m = all.empty() ? 0 : all[0].mapped;
        for (const detail::rank_entry &e : all) m = std::min(m, e.mapped);
        return m;
    }

    // Collective (every rank passes the same `mapped`): a UPC++ segment over [base, base+mapped)
    // when that is more than what is covered now, and every rank's base global pointer.
    void grow_to(std::size_t mapped) {
        if (mapped <= extent_) return;
        char *base = static_cast<char *>(info_.base);
#if UPCXX_EXTRA_NVSHMEM_GPU_ALLOCATOR
        // A new allocator over the whole mapped extent (so one global pointer may straddle old
        // and new memory); the older ones stay alive, so their global pointers stay valid.
        allocs_.emplace_back(new allocator_type(upcxx::make_gpu_allocator<upcxx::cuda_device>(mapped, info_.device, base)));
        device_gptr mine = allocs_.back()->to_global_ptr<char>(base);
#else
        // One cuda_device per GPU and one allocator per cuda_device: made once, over the extent
        // mapped at construction. A global pointer here is (rank, device, address), valid for any
        // memory of that device: memory mapped later is reached through the same device.
        if (!alloc_) {
            gpu_.reset(new upcxx::cuda_device(info_.device));
            alloc_.reset(new allocator_type(*gpu_, base, mapped));
        }
        device_gptr mine = alloc_->to_global_ptr<char>(base);
#endif
        base_gp_ = detail::allgather(mine, "nvshmem_heap");
        extent_ = mapped;
    }

    static nvshmem_error inactive(const char *fn) {
        return nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET,
                             std::string(fn) + ": this nvshmem_heap was destroyed or moved from");
    }

    nvshmem_error past_extent(const char *fn, std::size_t off, std::size_t bytes) const {
        return nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP,
                             std::string(fn) + ": the object at heap offset " + std::to_string(off) + " (" +
                                 std::to_string(bytes) + " bytes) runs past the " + std::to_string(extent_) +
                                 " bytes of NVSHMEM heap this nvshmem_heap covers: the heap grew since "
                                 "(nvshmem_malloc maps more on demand); call update() collectively after "
                                 "nvshmem_malloc");
    }

    // Forgets everything; the UPC++ objects must be destroyed (or UPC++ finalised) by now.
    void release() {
        copy_.reset();  // waits for the fast copies in flight
        allocs_clear();
        base_gp_.clear();
        base_raw_.clear();
        extent_ = 0;
        if (active_) {
            active_ = false;
            --detail::active_heaps();
            upcxx_extra_nvshmem_detach();
        }
    }

    // No collective is possible here: leave the UPC++ objects alive (never destructed, so UPC++
    // does not assert on an active allocator), forget the rest, and say so.
    void abandon(const char *why) noexcept {
        if (upcxx::initialized()) {
#if UPCXX_EXTRA_NVSHMEM_GPU_ALLOCATOR
            for (auto &a : allocs_) (void)a.release();
#else
            (void)alloc_.release();
            (void)gpu_.release();
#endif
            std::fprintf(stderr,
                         "upcxx_extra::nvshmem_heap (rank %d): %s while UPC++ is initialised; its UPC++ device "
                         "segment stays allocated until upcxx::finalize(). Call destroy() collectively first.\n",
                         upcxx::rank_me(), why);
        }
        try {
            release();
        } catch (...) {
        }
    }

    void allocs_clear() {
#if UPCXX_EXTRA_NVSHMEM_GPU_ALLOCATOR
        allocs_.clear();
#else
        alloc_.reset();
        gpu_.reset();
#endif
    }

    void take(nvshmem_heap &o) noexcept {
        info_ = o.info_;
        extent_ = o.extent_;
        active_ = o.active_;
#if UPCXX_EXTRA_NVSHMEM_GPU_ALLOCATOR
        allocs_ = std::move(o.allocs_);
#else
        gpu_ = std::move(o.gpu_);
        alloc_ = std::move(o.alloc_);
#endif
        base_gp_ = std::move(o.base_gp_);
        base_raw_ = std::move(o.base_raw_);
        copy_ = std::move(o.copy_);
        o.active_ = false;
        o.extent_ = 0;
        o.base_gp_.clear();
        o.base_raw_.clear();
    }

    upcxx_extra_nvshmem_heap_info_t info_{};
    std::size_t extent_ = 0;
    bool active_ = false;
#if UPCXX_EXTRA_NVSHMEM_GPU_ALLOCATOR
    std::vector<std::unique_ptr<allocator_type>> allocs_;
#else
    std::unique_ptr<upcxx::cuda_device> gpu_;
    std::unique_ptr<allocator_type> alloc_;
#endif
    std::vector<device_gptr> base_gp_;
    std::vector<std::uintptr_t> base_raw_;
    std::shared_ptr<copy_state> copy_;
};

}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_HPP
