// upcxx-extra-nvshmem: nvshmem_heap, NVSHMEM's symmetric heap as a UPC++ device segment. Part of
// <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
//
// The heap's state has one owner, the C library: the heap, every PE's base and rank, the extent
// UPC++ covers, where NVSHMEM maps the peers' heaps here, and every translation and bound check.
// This class holds what UPC++ needs (its segments and their base global pointers) and the copy
// engine, runs the collectives, and asks the C library for the rest on every call (lock-free
// reads of one snapshot: upcxx_extra_nvshmem_table_view, _local_offset, _from_offset,
// _check_host_range).
#ifndef UPCXX_EXTRA_NVSHMEM_HEAP_HPP
#define UPCXX_EXTRA_NVSHMEM_HEAP_HPP

#include <upcxx/upcxx.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "upcxx_extra_nvshmem.h"
#include "upcxx_extra/nvshmem/backend.hpp"
#include "upcxx_extra/nvshmem/collective.hpp"
#include "upcxx_extra/nvshmem/copy.hpp"
#include "upcxx_extra/nvshmem/copy_engine.hpp"
#include "upcxx_extra/nvshmem/error.hpp"

namespace upcxx {
namespace extra {

namespace detail {
/// One rank's view of its heap, exchanged at construction and update().
struct rank_entry {
    int status;  // OK, or why this rank cannot take part (its outcome holds the message)
    int pe;
    int n_pes;
    int device;
    std::uintptr_t base;
    std::size_t mapped;    // bytes mapped from base now
    std::size_t reserved;  // bytes reserved from base (NVSHMEM's heap_size)
};

/// A scalar member (a flag, a counter, a raw pointer, a span) that a move leaves value-initialised
/// in its source, where the scalar's own move would copy it: with it a class's moves can be
/// `= default` and still leave the moved-from object holding nothing.
template <class T>
class moved_from_reset {
    static_assert(std::is_scalar<T>::value, "moved_from_reset holds a scalar");

public:
    moved_from_reset() = default;
    moved_from_reset(T v) noexcept : v_(v) {}  // NOLINT: implicit, as the scalar it stands for
    moved_from_reset(const moved_from_reset &) = delete;
    moved_from_reset &operator=(const moved_from_reset &) = delete;
    moved_from_reset(moved_from_reset &&o) noexcept : v_(std::exchange(o.v_, T{})) {}
    moved_from_reset &operator=(moved_from_reset &&o) noexcept {
        v_ = std::exchange(o.v_, T{});
        return *this;
    }
    moved_from_reset &operator=(T v) noexcept {
        v_ = v;
        return *this;
    }
    operator T() const noexcept { return v_; }  // NOLINT: reads as the scalar

private:
    T v_{};
};

/// nvshmem_heap's members, apart so that its moves are this class's defaulted ones: a move leaves
/// the source inactive and empty (the moved_from_reset members reset; a moved std::vector is
/// empty and its storage, which newest_ points into, moves with it; a moved shared_ptr is null).
class heap_state {
protected:
    using backend = upcxx_backend;

public:
    // ---- what the copy path (copy.hpp) reads: its narrow interface to the heap -----------------

    static nvshmem_error inactive(const char *fn) {
        return nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET,
                             std::string(fn) + ": this nvshmem_heap was destroyed or moved from",
                             nvshmem_errc::heap_inactive);
    }
    bool active() const noexcept { return active_; }
    /// The fast copy engine; only while active().
    copy_engine &engine() const noexcept { return *engine_; }
    /// The C table as it is now (one lock-free read); a zeroed view with my_pe, n_pes and device
    /// -1 when the heap is not active or the table has no heap.
    upcxx_extra_nvshmem_table_view_t table() const noexcept {
        upcxx_extra_nvshmem_table_view_t v{nullptr, 0, 0, -1, -1, -1, false};
        if (active_) (void)upcxx_extra_nvshmem_table_view(&v);  // writes `v` only when it answers OK
        return v;
    }
    /// The extent UPC++ can address from each PE's base (nvshmem_heap::extent()).
    std::size_t extent() const noexcept { return table().extent; }
    /// Whether the raw range [a, a + len) (len 0: `a` alone) may meet the span of this heap and
    /// the peers' heaps as mapped here, as the C library publishes it now
    /// (upcxx_extra_nvshmem_heap_span: one acquire load and the pair it points to, no call):
    /// false for any range clear of them, and for every range when the C library knows no heap.
    /// A range that wraps past the top of the address space may answer true: the C library's
    /// verdict (upcxx_extra_nvshmem_check_host_range) is exact.
    bool in_heap_span(std::uintptr_t a, std::size_t len) const noexcept {
        const upcxx_extra_nvshmem_span_t *s = __atomic_load_n(span_slot_, __ATOMIC_ACQUIRE);
        return a - s->lo < s->size || (s->lo - a < len && s->size != 0);
    }

    // Fast mode: whether `v` names one of this heap's UPC++ segments (compared by segment, never by
    // pointer arithmetic across allocators). A rank outside the world is BAD_RANK when `fn` is
    // given. The usual answer (the newest segment) is inline: from_global_ptr and copy ask it per
    // call.
    bool owns(const detail::gptr_view &v, const char *fn) const {
        if (static_cast<unsigned>(v.rank) < n_ranks_ && v.kind == upcxx::memory_kind::cuda_device &&
            backend::segment_of(newest_[static_cast<std::size_t>(v.rank)]) == v.segment)
            return true;
        return owns_other(v, fn);
    }
    bool owns_other(const detail::gptr_view &v, const char *fn) const {
        if (v.rank < 0 || v.rank >= static_cast<int>(n_ranks())) {
            if (!fn) return false;
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK,
                                std::string(fn) + ": rank " + std::to_string(v.rank) + " is not a rank of this heap (" +
                                    std::to_string(n_ranks()) + " ranks)");
        }
        if (v.kind != upcxx::memory_kind::cuda_device) return false;
        const std::size_t r = static_cast<std::size_t>(v.rank);
        for (std::size_t s = 0; s + 1 < bases_.size(); s++)  // older segments (native memory kinds)
            if (backend::segment_of(bases_[s][r]) == v.segment) return true;
        return false;
    }
    std::size_t n_ranks() const noexcept { return n_ranks_; }
    /// The global pointer to this rank's heap base (the newest segment's; only while active()).
    device_gptr own_base() const noexcept { return newest_[upcxx::rank_me()]; }

    using const_device_gptr = upcxx::global_ptr<const char, upcxx::memory_kind::cuda_device>;
    // Public-API mode: the offset of `p` (a pointer to rank `r`) in one of this heap's segments,
    // -1 when it is not in one.
    std::ptrdiff_t segment_offset_public(const const_device_gptr &p, std::size_t r) const {
        for (std::size_t s = bases_.size(); s-- > 0;) {
            const const_device_gptr b = bases_[s][r];
            const std::ptrdiff_t o = p - b;  // debug codemode: UPC++ asserts one segment
            if (o >= 0 && b + o == p) return o;
        }
        return -1;
    }

    // The C library's error; past the extent, it says what to do about it.
    nvshmem_error translation_error(upcxx_extra_nvshmem_status_t s) const {
        nvshmem_error e = detail::c_error(s);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP) return e;
        return nvshmem_error(s, std::string(e.what()) + " (this nvshmem_heap covers " + std::to_string(extent()) +
                                    " bytes of each PE's heap: after nvshmem_malloc grew the heap, call update() "
                                    "collectively)");
    }

protected:
    // Where the C library publishes the span of the heaps mapped here (process-wide: a move
    // copies it).
    static const upcxx_extra_nvshmem_span_t *const *published_span() noexcept {
        const upcxx_extra_nvshmem_span_t *const *slot = nullptr;
        (void)upcxx_extra_nvshmem_heap_span(&slot);  // OK: the argument is not NULL
        return slot;
    }
    const upcxx_extra_nvshmem_span_t *const *span_slot_ = published_span();

    // UPC++'s objects and the copy engine; the heap, the bases, the extent and the peers'
    // mappings are the C table's (table()).
    moved_from_reset<bool> active_;
    std::vector<backend::segment> segments_;        // this process's UPC++ device segments
    std::vector<std::vector<device_gptr>> bases_;   // [segment][rank]: each segment's base on every rank
    moved_from_reset<const device_gptr *> newest_;  // bases_.back().data(): new global pointers' bases
    moved_from_reset<std::size_t> n_ranks_;         // bases_.back().size()
    std::shared_ptr<copy_engine> engine_;
};
}  // namespace detail

/// NVSHMEM's symmetric heap as a private UPC++ device segment.
///
/// Construct collectively over upcxx::world() from the master persona, after upcxx::init() and
/// NVSHMEM init (upcxx::extra::nvshmem_init()); call update() collectively after nvshmem_malloc
/// calls that may have grown the heap; destroy() collectively before nvshmem_finalize(). World
/// ranks and NVSHMEM PEs must be the same processes (rank_n == n_pes); the PE -> rank map may be
/// any permutation. One nvshmem_heap is active per process at a time.
///
/// Lifetime: movable, not copyable. destroy() is collective and idempotent. A heap that goes out
/// of scope (or is assigned over) while active and UPC++ is still initialised cannot run a
/// collective there: it waits for its own fast copies, leaves its UPC++ device segment allocated
/// until upcxx::finalize(), forgets the translation table and prints one warning to stderr; it
/// never aborts or hangs.
///
/// Thread safety: to_global_ptr / from_global_ptr / copy / accessors may run on any thread (a
/// copy completes on the persona that called it); the constructor, update(), destroy() and moves
/// must not run concurrently with them.
/// One copy of heap.copies_on_stream: `n` elements from `src` to `dst` (global pointers, as
/// heap.copy takes them).
template <class T, upcxx::memory_kind KS = upcxx::memory_kind::cuda_device,
          upcxx::memory_kind KD = upcxx::memory_kind::cuda_device>
struct stream_copy {
    upcxx::global_ptr<const T, KS> src;
    upcxx::global_ptr<T, KD> dst;
    std::size_t n = 0;
};

class nvshmem_heap : private detail::heap_state {
public:
    using device_gptr = detail::device_gptr;
    using copy_counts = detail::copy_engine::counts_t;

    /// UPC++ device segments a heap may use when every growth needs its own (native memory kinds).
    static constexpr std::size_t max_segments = 16;
    /// How long destroy() makes progress for the upcxx::copy calls through this heap to complete.
    static constexpr int destroy_wait_seconds = 60;

    /// Collective. Throws nvshmem_error on every rank when any rank fails (nothing is created then).
    nvshmem_heap() {
        const char *what = "nvshmem_heap";
        if (!upcxx::initialized())
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                "nvshmem_heap: UPC++ is not initialised (call upcxx::init() first)",
                                nvshmem_errc::upcxx_not_initialized);
        detail::rank_entry mine{};
        detail::outcome out = detail::attempt([&] {
            mine = local_entry(what);
            if (detail::active_heaps() > 0)
                throw nvshmem_error(
                    UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                    "nvshmem_heap: another nvshmem_heap is active in this process; use it, or destroy() "
                    "it first",
                    nvshmem_errc::heap_exists);
            std::string busy = backend::device_unavailable(mine.device);
            if (!busy.empty())
                throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, "nvshmem_heap: " + busy,
                                    nvshmem_errc::device_in_use);
        });
        mine.status = out.status;
        std::vector<detail::rank_entry> all = detail::allgather(mine, what);
        detail::fail_together(first_failed(all), out, what);
        std::vector<upcxx_extra_nvshmem_peer_t> peers = validate(all, what);
        detail::copy_policy policy;  // the environment's knobs: a value one rank refuses fails every rank
        detail::agree(detail::attempt([&] {
                          policy = detail::copy_policy::from_environment();
                          detail::check(upcxx_extra_nvshmem_set_peers(static_cast<int>(peers.size()), peers.data()));
                      }),
                      what);

        engine_ = std::make_shared<detail::copy_engine>(mine.device, policy);
        ++detail::active_heaps();  // nothing can throw from here until grow_to()
        active_ = true;
        try {
            grow_to(all, what);
        } catch (...) {
            abandon("its construction failed after the UPC++ device segment was made");
            throw;
        }
    }

    nvshmem_heap(const nvshmem_heap &) = delete;
    nvshmem_heap &operator=(const nvshmem_heap &) = delete;

    nvshmem_heap(nvshmem_heap &&) = default;  // the source is left inactive (detail::heap_state)
    /// Assigning over an active heap destroys it first (collective, like destroy()).
    nvshmem_heap &operator=(nvshmem_heap &&o) {
        if (this != &o) {
            destroy();
            heap_state::operator=(std::move(o));
        }
        return *this;
    }

    ~nvshmem_heap() {
        if (!active_) return;
        if (engine_ && engine_->forked())
            forget_in_fork_child();
        else
            abandon("it went out of scope without destroy()");
    }

    /// Collective, from the master persona: waits until every copy this process issued through
    /// the heap is done: each upcxx::copy the heap made (a copy with an end in the heap that did
    /// not take the fast path, and the redo of a fast copy CUDA failed) completed its operation,
    /// making progress for at most destroy_wait_seconds (also until a stream waiting for a
    /// copy_on_stream's upcxx::copy may go on), and each fast copy landed (their
    /// completions then run at their personas' next progress); then, once every rank has done so
    /// (so no copy into any rank's heap is in flight), tears the UPC++ segment down and forgets
    /// the table. What it waits for never needs the progress of another thread. Call it before
    /// nvshmem_free of memory copies may still touch, and before nvshmem_finalize(). A second
    /// call, or a call on a moved-from heap, does nothing. After upcxx::finalize() it only
    /// releases this process's objects. Throws on every rank: before the teardown, leaving the
    /// heap as it was, when a rank's upcxx::copy calls did not complete in time
    /// (errc() copies_in_flight); after it, when waiting for a fast copy failed on any rank, or
    /// a fast copy failed that could no longer be redone (errc() cuda).
    ///
    /// In a fork() child of the process that made the heap, destroy() (and the destructor) only
    /// forget the child's copy of the heap: the parent's UPC++ objects and CUDA stream are not
    /// the child's, so nothing of theirs is touched, no collective runs and nothing is printed;
    /// the parent's heap is unaffected.
    void destroy() {
        if (!active_) return;
        if (engine_->forked()) {
            forget_in_fork_child();
            return;
        }
        if (!upcxx::initialized()) {
            release();
            return;
        }
        {
            // The engine's calls in it throw only on statuses that cannot come (copy_engine);
            // one that did is this rank's outcome, so that no rank is left in agree().
            detail::outcome waited;
            try {
                waited = wait_for_copies();
            } catch (const nvshmem_error &e) {
                waited = detail::outcome::of(e);
            }
            try {
                detail::agree(waited, "nvshmem_heap::destroy");
            } catch (...) {
                engine_->reopen();
                throw;
            }
        }
        std::string drained;
        detail::outcome out = detail::attempt([&] { drained = engine_->drain(); });
        upcxx::barrier();  // every rank drained: no fast copy into any heap is in flight
        for (backend::segment &s : segments_) s.destroy();  // collective
        release();
        if (out.ok() && !drained.empty())
            out = detail::outcome{UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR, nvshmem_errc::cuda, drained};
        detail::agree(out, "nvshmem_heap::destroy");
    }

    /// Collective: makes the memory NVSHMEM has mapped since (nvshmem_malloc grows the heap under
    /// CUDA VMM) addressable from UPC++, and returns the new extent. Global pointers made before
    /// stay valid; new ones may straddle the old and new memory. Without CUDA VMM the heap does
    /// not grow and this returns extent() unchanged. Throws on every rank when any rank fails.
    /// Resources: none with UPC++'s reference memory kinds (the one segment serves the grown
    /// heap); one more segment per growth with native memory kinds, at most max_segments.
    /// In a fork() child of the process that made the heap it throws errc forked (no collective
    /// can run there).
    std::size_t update() {
        const char *what = "nvshmem_heap::update";
        if (active_) engine_->check_usable(what);
        if (!upcxx::initialized()) throw inactive(what);
        detail::rank_entry mine{};
        detail::outcome out = detail::attempt([&] {
            // A rank whose heap is inactive still takes part: every rank fails, none waits.
            if (!active_) throw inactive(what);
            const upcxx_extra_nvshmem_table_view_t built = table();  // the heap this one was built on
            mine = local_entry(what);
            if (reinterpret_cast<std::uintptr_t>(built.base) != mine.base || built.my_pe != mine.pe)
                throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_VALIDATION_FAILED,
                                    "nvshmem_heap::update: the NVSHMEM heap is no longer the one this nvshmem_heap was "
                                    "built on (base or PE changed: NVSHMEM re-initialised?)",
                                    nvshmem_errc::heap_changed);
        });
        mine.status = out.status;
        std::vector<detail::rank_entry> all = detail::allgather(mine, what);
        detail::fail_together(first_failed(all), out, what);
        grow_to(all, what);
        return extent();
    }

    bool is_active() const noexcept { return active_; }
    /// This process's PE, the PE count, the heap's CUDA device and its base, as the C table has
    /// them now: -1, -1, -1 and nullptr for a heap that is not active (destroyed or moved from).
    int my_pe() const noexcept { return table().my_pe; }
    int n_pes() const noexcept { return table().n_pes; }
    int device() const noexcept { return table().device; }
    void *base() const noexcept { return table().base; }
    /// The extent UPC++ can address from base() on every PE: the heap mapped on every PE at the
    /// last construction or update() (0 for a heap that is not active).
    std::size_t extent() const noexcept { return heap_state::extent(); }
    /// How many UPC++ device segments back this heap: 1 (0 once destroyed), or with native memory
    /// kinds one per update() that grew the heap (at most max_segments).
    std::size_t segments() const noexcept { return segments_.size(); }

    /// The global pointer to PE `pe`'s copy of the symmetric object `sym` (one C call).
    template <class T>
    upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> to_global_ptr(T *sym, int pe) const {
        if (!active_) throw inactive("to_global_ptr");
        int rank = -1;
        std::size_t off = 0;
        upcxx_extra_nvshmem_status_t s =
            upcxx_extra_nvshmem_to_offset(static_cast<const void *>(sym), sizeof(T), pe, &rank, &off);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw translation_error(s);
        return upcxx::reinterpret_pointer_cast<T>(newest_[rank] + static_cast<std::ptrdiff_t>(off));
    }
    /// The global pointer to this PE's copy of `sym` (one C call).
    template <class T>
    upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> to_global_ptr(T *sym) const {
        if (!active_) throw inactive("to_global_ptr");
        std::size_t off = 0;
        upcxx_extra_nvshmem_status_t s =
            upcxx_extra_nvshmem_local_offset(static_cast<const void *>(sym), sizeof(T), &off);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw translation_error(s);
        // My PE's rank is mine (the constructor checked the PE -> rank map against every rank).
        return upcxx::reinterpret_pointer_cast<T>(newest_[upcxx::rank_me()] + static_cast<std::ptrdiff_t>(off));
    }

    /// The symmetric address and the PE of `gp`, which must point into this heap (one C call).
    /// In the public-API mode the segment is found with UPC++'s global pointer arithmetic
    /// (docs/compatibility.md: UPC++'s debug codemode asserts on a pointer of another segment).
    template <class T>
    std::pair<T *, int> from_global_ptr(upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> gp) const {
        if (!active_) throw inactive("from_global_ptr");
        if (!gp) throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, "from_global_ptr: null global pointer");
        if constexpr (!backend::fast) {
            return from_global_ptr_public(upcxx::reinterpret_pointer_cast<const char>(gp), static_cast<T *>(nullptr));
        }
        const detail::gptr_view v = backend::view(gp);
        if (!owns(v, "from_global_ptr"))
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP,
                                "from_global_ptr: the global pointer to " + describe(v) +
                                    " is not into this nvshmem_heap (it names another UPC++ device segment)");
        void *sym = nullptr;
        int pe = -1;
        upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_from_global_ptr(v.rank, v.raw, &sym, &pe);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw translation_error(s);
        return {static_cast<T *>(sym), pe};
    }

    /// Counts of the copies heap.copy() made by each path since construction (this process):
    /// `fast`, of which `batched` were moved by a batch's kernel launch (the others by one
    /// cudaMemcpyAsync each), and `fallback` for the copies with an end that may be heap memory
    /// that went to upcxx::copy (in the public-API mode every such copy). A copy with no end that can be
    /// device memory, or of 0 elements, is upcxx::copy untouched and counted in neither. `parked`:
    /// the waits (after(), copies_on_stream) the engine's watcher thread holds now, which
    /// upcxx::progress() does not poll until their stream reached them (docs/streams.md).
    copy_counts copies() const noexcept { return engine_ ? engine_->counts() : copy_counts{}; }

    /// The largest fast copy with heap memory at both ends that heap.copy batches (0: none):
    /// UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES at construction (docs/copy.md), or what
    /// set_copy_batch_bytes() set last; 0 for a destroyed heap.
    std::size_t copy_batch_bytes() const noexcept { return engine_ ? engine_->batch_bytes() : 0; }
    /// Sets copy_batch_bytes() for the copies issued from now on, on this process (copies already
    /// batched stay batched). Any thread; throws nvshmem_error (heap_inactive) for a destroyed heap.
    void set_copy_batch_bytes(std::size_t bytes) {
        if (!active_ || !engine_) throw inactive("nvshmem_heap::set_copy_batch_bytes");
        engine_->set_batch_bytes(bytes);
    }

    /// Whether heap.copy can take the fast path in this build: true when every UPC++ internal it
    /// reads was found at compile time (fast mode), false in the public-API mode (a missing
    /// internal, or UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1), where every heap.copy is upcxx::copy
    /// (docs/compatibility.md). A property of the build, not of a heap.
    static constexpr bool fast_copies() noexcept { return backend::fast; }

    /// upcxx::copy, for every argument list upcxx::copy takes in this UPC++ release, with its
    /// return type and completion semantics (docs/copy.md). When one end is heap memory this
    /// process reaches through NVSHMEM (a PE on this node with P2P) and the other is too, or is
    /// memory of this process (its own device memory, a raw host T*, local host shared memory),
    /// the bytes move by one cudaMemcpyAsync on the heap's device; anything else goes to
    /// upcxx::copy with the completions unchanged.
    /// Throws nvshmem_error (nothing copied, nothing notified) for a null pointer, a size that
    /// overflows, a raw T* into the NVSHMEM heap (upcxx::copy reads T* as host memory: pass
    /// to_global_ptr(p)), a range that starts in this heap and runs past extent(), a destroyed
    /// heap, or a CUDA error when the copy is issued.
    template <class... A>
    auto copy(A &&...a) -> decltype(upcxx::copy(std::forward<A>(a)...)) {
        return detail::copy_path<detail::heap_state>::dispatch(*this, detail::route_after{}, std::forward<A>(a)...);
    }

    /// copy(), ordered after the work queued on `stream` before the call: the heap's stream waits
    /// for it on the GPU (no host synchronisation; an event recorded in the calling thread's
    /// context, or in that of `stream`'s device, another device's included) when the copy takes
    /// the fast path; otherwise the host waits for `stream` first, then copies. Every stream value
    /// orders: 0 (the legacy default stream, where a plain kernel<<<g, b>>> runs),
    /// cudaStreamLegacy, cudaStreamPerThread and created streams. Throws as copy() does, errc
    /// stream_capture for a stream being captured into a CUDA graph, errc forked in a fork()
    /// child (before any CUDA call).
    template <class... A>
    auto copy_after(cudaStream_t stream, A &&...a) -> decltype(upcxx::copy(std::forward<A>(a)...)) {
        return detail::copy_path<detail::heap_state>::dispatch(*this, detail::route_after{true, stream},
                                                               std::forward<A>(a)...);
    }

    /// A future (by default; `cxs`: operation_cx::as_future, as_promise, as_lpc and UPC++
    /// 2023.9's as_eager_* / as_defer_*, returning what upcxx::copy returns for them) that is
    /// ready once all the work queued on CUDA stream `stream` before the call has completed: a
    /// kernel, an NVSHMEM on-stream operation, a copy. Nothing waits in the call: an event is
    /// recorded on `stream` and the completion is delivered at the calling persona's user-level
    /// progress, as a copy's operation completion is (never inside the call, even for eager
    /// completions). Every stream value: 0 (the legacy default stream), cudaStreamLegacy,
    /// cudaStreamPerThread (those three of the calling thread's current device), created
    /// streams, a stream of another device. It owes no remote completion:
    /// upcxx::progress_required() and upcxx::discharge() do not wait for it.
    /// A CUDA error of that work still makes it ready; the error is kept for check_copies(),
    /// which throws it (errc cuda). Throws nvshmem_error (nothing will be notified) for a
    /// destroyed heap, a fork() child (errc forked), a stream being captured into a CUDA graph
    /// (errc stream_capture), or an event CUDA cannot record on `stream` (errc cuda). In the
    /// public-API mode the host waits for `stream` in the call, then the completions are a
    /// 0-element upcxx::copy's (docs/streams.md).
    upcxx::future<> after(cudaStream_t stream) {
        return detail::copy_path<detail::heap_state>::after(*this, stream, upcxx::operation_cx::as_future());
    }
    template <class Cxs>
    auto after(cudaStream_t stream,
               Cxs &&cxs) -> decltype(detail::copy_path<detail::heap_state>::after(std::declval<detail::heap_state &>(),
                                                                                   stream, std::forward<Cxs>(cxs))) {
        return detail::copy_path<detail::heap_state>::after(*this, stream, std::forward<Cxs>(cxs));
    }

    /// copy(), in the order of CUDA stream `stream`, as NVSHMEM's *_on_stream operations are: the
    /// copy reads and writes after all the work queued on `stream` before the call, and the work
    /// queued on `stream` after the call runs after the copy has landed. It is issued into the
    /// stream in the call. Same arguments, return value and completions as copy() (its
    /// completions at the calling persona's progress once the bytes landed).
    ///   - A fast copy on the heap's device (`stream` is a stream of it: 0, cudaStreamLegacy and
    ///     cudaStreamPerThread when it is the calling thread's current device) is issued on
    ///     `stream` itself: with heap memory at both ends, up to 4 MiB, one launch of the heap's
    ///     copy kernel and an event recorded after it; otherwise (or with copy_batch_bytes() 0)
    ///     one cudaMemcpyAsync and an event recorded after it. On a stream of another
    ///     device it runs on the heap's stream between two events (after `stream`'s work, and
    ///     `stream` waits for it). Separate calls are not batched: each is issued in its call
    ///     (copies_on_stream moves many in one launch).
    ///   - A copy that is upcxx::copy (an end not mapped here, the public-API mode): the host
    ///     waits for `stream`'s earlier work, then `stream` waits on the GPU (cuStreamWaitValue32
    ///     on a flag in mapped host memory) until the copy's operation completion has run, which
    ///     takes UPC++ progress on the master persona or the calling one: do not block on `stream` (for instance
    ///     cudaStreamSynchronize) before that progress; wait with after(stream) instead.
    ///   - A fast copy with remote_cx::as_rpc, while a copy_on_stream that is upcxx::copy has not
    ///     completed: the call makes upcxx::progress() until it has, so that the copy is not held
    ///     behind it where upcxx::discharge() (internal-level progress) waits; after 60 s it
    ///     throws errc copies_in_flight, nothing copied.
    /// Throws as copy() does, errc stream_capture for a stream being captured into a CUDA graph
    /// (nothing copied), errc forked in a fork() child (before any CUDA call).
    template <class... A>
    auto copy_on_stream(cudaStream_t stream, A &&...a) -> decltype(upcxx::copy(std::forward<A>(a)...)) {
        return detail::copy_path<detail::heap_state>::dispatch(*this, detail::route_on_stream{stream},
                                                               std::forward<A>(a)...);
    }

    /// Many copies in the order of CUDA stream `stream`, issued in the call: each element `c` of
    /// `copies` (a range of upcxx::extra::stream_copy, or of anything with members `src`, `dst`
    /// (global pointers, as copy() takes) and `n` (elements)) is copy(c.src, c.dst, c.n) in the
    /// order of `stream` and in the order of the range, as that many copy_on_stream calls would
    /// be, with one completion for all: the completions `cxs` (operation_cx only; a future by
    /// default) once `stream` has run every copy. When every copy has both ends mapped here, the
    /// small copies with heap memory at both ends move in one launch of the heap's batch kernel on
    /// `stream` (or on the heap's stream between two events, for a stream of another device) and
    /// the others are one cudaMemcpyAsync each; otherwise each is copy_on_stream. A CUDA failure
    /// of the launch or of a copy after it was issued is not redone: the completion still comes,
    /// and check_copies() throws it. Throws as copy_on_stream does.
    template <class Range>
    upcxx::future<> copies_on_stream(cudaStream_t stream, const Range &copies) {
        return detail::copy_path<detail::heap_state>::many_on_stream(*this, stream, copies,
                                                                     upcxx::operation_cx::as_future());
    }
    template <class Range, class Cxs>
    auto copies_on_stream(cudaStream_t stream, const Range &copies, Cxs &&cxs)
        -> decltype(detail::copy_path<detail::heap_state>::many_on_stream(std::declval<detail::heap_state &>(), stream,
                                                                          copies, std::forward<Cxs>(cxs))) {
        return detail::copy_path<detail::heap_state>::many_on_stream(*this, stream, copies, std::forward<Cxs>(cxs));
    }

    /// Throws nvshmem_error (CUDA_ERROR) for the first fast copy that failed after it was issued
    /// (it was redone through upcxx::copy, so its completion still meant the bytes landed), or the
    /// first after() whose stream work CUDA reported an error for, since the last call; nothing
    /// otherwise. In a fork() child it throws errc forked.
    void check_copies() {
        if (!engine_) return;
        engine_->check_usable("nvshmem_heap::check_copies");
        std::string e = engine_->take_error();
        if (!e.empty()) throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR, e, nvshmem_errc::cuda);
    }

private:
    // ---- which memory is this heap's -----------------------------------------------------------

    // Public-API mode: from_global_ptr with UPC++'s public global pointer operations only. The
    // rank is where(); the offset is `p - base` against each segment's base on that rank (newest
    // first), kept when base + offset == p (operator== compares the segment too: a pointer of
    // another segment is not this heap's). UPC++'s debug codemode asserts in operator- that both
    // pointers name one segment: there, a pointer of another allocator ends the program in
    // UPC++'s check instead of OUT_OF_HEAP. The C library translates (rank, offset) and checks
    // the offset against the extent.
    template <class T>
    std::pair<T *, int> from_global_ptr_public(const const_device_gptr &p, T *) const {
        const int rank = p.where();
        if (rank < 0 || rank >= static_cast<int>(n_ranks()))
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK, "from_global_ptr: rank " + std::to_string(rank) +
                                                                         " is not a rank of this heap (" +
                                                                         std::to_string(n_ranks()) + " ranks)");
        const std::ptrdiff_t off = segment_offset_public(p, static_cast<std::size_t>(rank));
        if (off < 0)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP,
                                "from_global_ptr: the global pointer to rank " + std::to_string(rank) +
                                    " is not into this nvshmem_heap (it names another UPC++ device segment)");
        void *sym = nullptr;
        int pe = -1;
        upcxx_extra_nvshmem_status_t s =
            upcxx_extra_nvshmem_from_offset(rank, static_cast<std::size_t>(off), 0, &sym, &pe);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw translation_error(s);
        return {static_cast<T *>(sym), pe};
    }
    static std::string describe(const detail::gptr_view &v) {
        char addr[32];
        std::snprintf(addr, sizeof addr, "%p", v.raw);
        return "rank " + std::to_string(v.rank) + " address " + addr;
    }

    // ---- collective construction and growth ----------------------------------------------------

    static detail::rank_entry local_entry(const char *what) {
        upcxx_extra_nvshmem_heap_info_t h;
        detail::check(upcxx_extra_nvshmem_heap_query(&h));
        if (h.mapped_size == 0 || h.device < 0)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR,
                                std::string(what) + ": the mapped extent (" + std::to_string(h.mapped_size) +
                                    " bytes) or the CUDA device (" + std::to_string(h.device) + ") of the heap of PE " +
                                    std::to_string(h.my_pe) + " is unknown");
        return detail::rank_entry{UPCXX_EXTRA_NVSHMEM_STATUS_OK,
                                  h.my_pe,
                                  h.n_pes,
                                  h.device,
                                  reinterpret_cast<std::uintptr_t>(h.base),
                                  h.mapped_size,
                                  h.size};
    }

    static int first_failed(const std::vector<detail::rank_entry> &all) {
        for (std::size_t r = 0; r < all.size(); r++)
            if (all[r].status != UPCXX_EXTRA_NVSHMEM_STATUS_OK) return static_cast<int>(r);
        return upcxx::rank_n();
    }

    // Every rank runs this on the same data, so every rank throws the same error, or none does: the
    // PE/rank agreement is the C library's check (detail::check_pe_map), the peer table its result.
    static std::vector<upcxx_extra_nvshmem_peer_t> validate(const std::vector<detail::rank_entry> &all,
                                                            const char *what) {
        std::vector<int> pe_of_rank, n_pes_of_rank;
        for (const detail::rank_entry &e : all) {
            pe_of_rank.push_back(e.pe);
            n_pes_of_rank.push_back(e.n_pes);
        }
        detail::check_pe_map(pe_of_rank, n_pes_of_rank, std::string(what) + ": ");
        std::vector<upcxx_extra_nvshmem_peer_t> peers(all.size(), upcxx_extra_nvshmem_peer_t{-1, nullptr});
        for (std::size_t r = 0; r < all.size(); r++)
            peers[static_cast<std::size_t>(all[r].pe)] =
                upcxx_extra_nvshmem_peer_t{static_cast<int>(r), reinterpret_cast<void *>(all[r].base)};
        return peers;
    }

    static std::size_t min_mapped(const std::vector<detail::rank_entry> &all) {
        std::size_t m = all.empty() ? 0 : all[0].mapped;
        for (const detail::rank_entry &e : all) m = std::min(m, e.mapped);
        return m;
    }

    // Collective (every rank passes the same `all`): makes [base, base + the smallest mapped extent)
    // addressable on every PE when that is more than what is covered now, and tells the C table,
    // which checks every address against it.
    //   - Reference memory kinds: one UPC++ segment, made at construction over the whole heap
    //     NVSHMEM reserved (the smallest reservation of all PEs; under CUDA VMM a reservation whose
    //     memory NVSHMEM maps as it grows). UPC++ records it and never touches memory it is not
    //     asked to copy; global pointers stay inside it whatever the growth, as UPC++'s debug
    //     codemode checks. update() makes no UPC++ object.
    //   - Native memory kinds: the NIC registers a segment, so it covers mapped memory only: one
    //     more segment per growth, at most max_segments.
    void grow_to(const std::vector<detail::rank_entry> &all, const char *what) {
        const std::size_t mapped = min_mapped(all);
        if (!segments_.empty() && mapped <= extent()) return;
        if (segments_.empty() || backend::segment_per_growth) {
            if (segments_.size() >= max_segments)  // the same decision on every rank
                throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                    std::string(what) + ": growing to " + std::to_string(mapped) +
                                        " bytes needs UPC++ device segment " + std::to_string(segments_.size() + 1) +
                                        ", over the limit of " + std::to_string(max_segments) +
                                        " (native memory kinds: call update() after a batch of nvshmem_malloc "
                                        "calls, or set NVSHMEM_SYMMETRIC_SIZE)",
                                    nvshmem_errc::segment_limit, 0);
            std::size_t size = mapped;  // native kinds: mapped memory only
            if (!backend::segment_per_growth) {
                std::size_t reserved = all.front().reserved;
                for (const detail::rank_entry &e : all) reserved = std::min(reserved, e.reserved);
                size = std::max(size, reserved);
            }
            const detail::rank_entry &mine = all[static_cast<std::size_t>(upcxx::rank_me())];
            segments_.emplace_back(mine.device, reinterpret_cast<char *>(mine.base), size);
            bases_.push_back(detail::allgather(segments_.back().base(), what));
            newest_ = bases_.back().data();
            n_ranks_ = bases_.back().size();
        }
        detail::agree(detail::attempt([&] { detail::check(upcxx_extra_nvshmem_set_extent(mapped)); }), what);
    }

    // destroy(): every stream ticket done (progress), every fast copy landed (the host waits), one progress (this
    // persona's completions run: a copy CUDA failed is redone), then upcxx::progress() until every upcxx::copy the heap
    // made has completed, for at most destroy_wait_seconds; the engine is closed in between (no fast copy is issued or
    // redone from then on: the second wait covers a redo that started before it closed). A stream may be waiting for a
    // copy_on_stream's upcxx::copy (a stream ticket), and the work queued behind that wait (a fast copy_on_stream,
    // copy_after) with it; the ticket is done only by UPC++ progress, so the host waits for the fast copies once no
    // ticket is pending.
    detail::outcome wait_for_copies() const {
        const std::shared_ptr<std::atomic<long>> &n = engine_->fallbacks_in_flight();
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(destroy_wait_seconds);
        if (!engine_->progress_while_tickets_pending(destroy_wait_seconds))
            return detail::outcome{UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, nvshmem_errc::copies_in_flight,
                                   "nvshmem_heap::destroy: a copy_on_stream's upcxx::copy did not complete within " +
                                       std::to_string(destroy_wait_seconds) +
                                       " s (it completes at its initiator persona's progress: wait for it there); "
                                       "the heap was not destroyed"};
        engine_->wait_all();
        upcxx::progress();
        while (n->load() > 0 && std::chrono::steady_clock::now() < until) upcxx::progress();
        engine_->close();
        while (n->load() > 0 && std::chrono::steady_clock::now() < until) upcxx::progress();
        const long left = n->load();
        if (left <= 0) return detail::outcome{};
        return detail::outcome{UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, nvshmem_errc::copies_in_flight,
                               "nvshmem_heap::destroy: " + std::to_string(left) +
                                   " upcxx::copy call(s) through this heap did not complete within " +
                                   std::to_string(destroy_wait_seconds) +
                                   " s (their operations complete at their initiator persona's progress: "
                                   "wait for them there); the heap was not destroyed"};
    }

    // Forgets everything; the UPC++ objects must be destroyed (or abandoned) by now.
    void release() noexcept {
        try {
            if (engine_) (void)engine_->drain();
        } catch (...) {  // out of memory for its message (the stream was waited for regardless), or a
                         // status of the engine that cannot come (NULL_ARGUMENT: the handle is set)
        }
        engine_.reset();
        segments_.clear();
        bases_.clear();
        newest_ = nullptr;
        n_ranks_ = 0;
        if (active_) {
            active_ = false;
            --detail::active_heaps();
            upcxx_extra_nvshmem_detach();
        }
    }

    // In a fork() child: the UPC++ objects are the parent's (destructing them would run UPC++'s
    // teardown of live allocators: it aborts) and so is the engine's stream (copy_engine: never
    // touched in a child). Forget all of them, silently, and the C table's copy of the heap.
    void forget_in_fork_child() noexcept {
        for (backend::segment &s : segments_) s.abandon();
        release();
    }

    // No collective is possible here: leave the UPC++ objects alive (never destructed, so UPC++
    // does not assert on an active allocator), forget the rest, and say so.
    void abandon(const char *why) noexcept {
        if (upcxx::initialized()) {
            for (backend::segment &s : segments_) s.abandon();
            std::fprintf(stderr,
                         "upcxx_extra::nvshmem_heap (rank %d): %s while UPC++ is initialised; its UPC++ device "
                         "segment stays allocated until upcxx::finalize(). Call destroy() collectively first.\n",
                         upcxx::rank_me(), why);
        }
        release();
    }
};
static_assert(std::is_nothrow_move_constructible<nvshmem_heap>::value, "nvshmem_heap's move must not throw");

}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_HEAP_HPP
