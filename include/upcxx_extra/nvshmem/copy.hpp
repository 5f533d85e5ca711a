// upcxx-extra-nvshmem: the path of one nvshmem_heap::copy, from the call to its notifications.
// Part of <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
//
// dispatch() sends a copy with host memory at both ends by type to upcxx::copy unchanged (only a
// raw pointer into a heap is refused). Any other copy is checked, and 0 elements go to upcxx::copy
// unchanged; then dispatch finds where each end is (reach: heap memory mapped here, this rank's
// own device memory, host memory this process reaches, or none of these) and picks the path: a
// fast copy (the copy engine, copy_engine.hpp) when one end is heap memory mapped here and the
// other is reachable; upcxx::copy unchanged when no end is in the heap; else upcxx::copy tracked
// by one more completion (an LPC on the master persona that destroy() waits for). A fast copy is
// a fast_flight: upcxx::copy's own completion state for the completions asked for, the remote
// completion serialised into a deferred AM, and what it takes to redo the copy through
// upcxx::copy should CUDA fail it. Nothing is formatted or allocated for a copy that succeeds but
// the flight itself. In the public-API mode (backend.hpp: upcxx_backend::fast false) every copy
// with an end that may be device memory is upcxx::copy with the caller's arguments, tracked,
// after the checks that need no UPC++ internal, and counted as a fallback.
#ifndef UPCXX_EXTRA_NVSHMEM_COPY_HPP
#define UPCXX_EXTRA_NVSHMEM_COPY_HPP

// dispatch() and its host-to-host path are inlined into the caller: a copy with host memory at
// both ends costs what upcxx::copy costs plus one compare (BENCHMARKS.md, section 11).
#if defined(__GNUC__)
#define UPCXX_EXTRA_NVSHMEM_HOT __attribute__((always_inline)) inline
#else
#define UPCXX_EXTRA_NVSHMEM_HOT inline
#endif

#include <upcxx/upcxx.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <cuda_runtime_api.h>

#include "upcxx_extra_nvshmem.h"
#include "upcxx_extra/nvshmem/backend.hpp"
#include "upcxx_extra/nvshmem/copy_engine.hpp"
#include "upcxx_extra/nvshmem/error.hpp"

namespace upcxx {
namespace extra {
namespace detail {

/// How a copy is ordered with a CUDA stream, as the routing sees it (a type, so that heap.copy
/// compiles no copy_on_stream path): none or after a stream (copy, copy_after), or in a stream's
/// order (copy_on_stream). engine() is the copy engine's view.
struct route_after {
    static constexpr bool on = false;
    bool set = false;  // ordered after the work queued on `stream` before the call
    cudaStream_t stream = nullptr;
    stream_order engine() const noexcept { return set ? stream_order::after(stream) : stream_order::none(); }
};
struct route_on_stream {
    static constexpr bool on = true;
    static constexpr bool set = true;
    cudaStream_t stream = nullptr;
    stream_order engine() const noexcept { return stream_order::on_stream(stream); }
};

/// nvshmem_heap::copy and copy_after over the heap's state `Heap` (heap.hpp's detail::heap_state),
/// read through its public interface only: its engine, its segment and raw span checks, its
/// extent and its error messages.
template <class Heap>
struct copy_path {
    using backend = upcxx_backend;

    /// Whether a copy end can be device memory: a global pointer of a kind other than host (a
    /// T* and a global_ptr<T, host> never are; memory_kind::any is asked at run time).
    template <class P>
    static constexpr bool may_be_device_type() {
        using e = copy_end<typename std::decay<P>::type>;
        if constexpr (e::known && e::global)
            return e::kind != upcxx::memory_kind::host;
        else
            return !e::known;
    }
    template <class P>
    static bool may_be_device(const P &p) {
        if constexpr (!may_be_device_type<P>()) {
            return false;
        } else if constexpr (copy_end<P>::known && copy_end<P>::kind == upcxx::memory_kind::any) {
            return p.dynamic_kind() != upcxx::memory_kind::host;
        } else {
            return true;
        }
    }

    // Every heap.copy and copy_after: the checks of every copy (the heap is usable here, no null
    // pointer, no raw T* into the heap or a peer's mapping of it), then
    //   - 0 elements, or no end that can be device memory: upcxx::copy, untouched and untracked;
    //   - the public-API mode, or completions the fast path cannot read: upcxx::copy, tracked;
    //   - else the fast path where it can, upcxx::copy (tracked when an end is heap memory).
    template <class Order, class S, class D, class... C>
    UPCXX_EXTRA_NVSHMEM_HOT static auto dispatch(Heap &h, Order after, S &&src, D &&dst, std::size_t n, C &&...cxs)
        -> decltype(upcxx::copy(std::forward<S>(src), std::forward<D>(dst), n, std::forward<C>(cxs)...)) {
        using src_end = copy_end<typename std::decay<S>::type>;
        using dst_end = copy_end<typename std::decay<D>::type>;
        // The heap usable here (errc forked in a fork() child), asked once per call before any
        // UPC++ or CUDA work of the layer's (check_common, or here for host memory in a stream's
        // order); the engine asks again on its own entry, as it does for every caller of the C
        // ABI. The stream's capture is checked by the engine on the fast path (once per call, with
        // its fork and device checks), by wait_for() on upcxx::copy's.
        if constexpr (src_end::known && dst_end::known && !may_be_device_type<S>() && !may_be_device_type<D>()) {
            // Host memory at both ends by type: upcxx::copy as written, at its cost. Only a raw
            // range that meets a heap is refused: a range clear of the span of the heaps costs
            // two subtractions and compares, inlined; one that meets it takes the rest of the
            // copy out of line (checked_plain), so the usual path saves no register for it.
            // A heap.copy of host memory asks nothing of the heap (upcxx::copy as written).
            if (after.set) check_usable(h, copy_name(after));
            if (__builtin_expect(raw_in_span(h, src, n) || raw_in_span(h, dst, n), 0))
                return checked_plain<Order, typename std::decay<S>::type, typename std::decay<D>::type>(
                    h, after, src, dst, n, std::forward<C>(cxs)...);
            return plain(h, after, std::forward<S>(src), std::forward<D>(dst), n, std::forward<C>(cxs)...);
        }
        check_common(h, src, dst, copy_name(after));
        if constexpr (src_end::known && dst_end::known) {
            if (n == 0) return plain(h, after, std::forward<S>(src), std::forward<D>(dst), n, std::forward<C>(cxs)...);
            if constexpr (!src_end::global) not_into_heap(h, src, n, "source");
            if constexpr (!dst_end::global) not_into_heap(h, dst, n, "destination");
            if (!may_be_device(src) && !may_be_device(dst))
                return plain(h, after, std::forward<S>(src), std::forward<D>(dst), n, std::forward<C>(cxs)...);
        }
        if constexpr (sizeof...(C) == 0) {
            if constexpr (!internals::cx_known<internals::default_cxs_t>) {
                check_public(h, src, dst, n);
                return fallback(h, after, std::forward<S>(src), std::forward<D>(dst), n, backend::default_cx());
            } else {
                return dispatch_fast(h, after, std::forward<S>(src), std::forward<D>(dst), n, backend::default_cx());
            }
        } else if constexpr (!(internals::cx_known<C> && ...)) {  // the public-API mode (or a form not known)
            check_public(h, src, dst, n);
            return fallback(h, after, std::forward<S>(src), std::forward<D>(dst), n, std::forward<C>(cxs)...);
        } else {
            return dispatch_fast(h, after, std::forward<S>(src), std::forward<D>(dst), n, std::forward<C>(cxs)...);
        }
    }

    // upcxx::copy with the caller's arguments, after `after` (the host waits for it; for
    // copy_on_stream the stream then waits for its completion: upcxx_on_stream).
    template <class Order, class S, class D, class... C>
    UPCXX_EXTRA_NVSHMEM_HOT static auto plain(Heap &h, Order after, S &&src, D &&dst, std::size_t n, C &&...cxs)
        -> decltype(upcxx::copy(std::forward<S>(src), std::forward<D>(dst), n, std::forward<C>(cxs)...)) {
        if constexpr (Order::on) {
            return upcxx_on_stream(h, after.stream, nullptr, std::forward<S>(src), std::forward<D>(dst), n,
                                   std::forward<C>(cxs)...);
        } else {
            if (after.set) wait_for(h, after.stream);
            return upcxx::copy(std::forward<S>(src), std::forward<D>(dst), n, std::forward<C>(cxs)...);
        }
    }

    // The caller's completions (upcxx::copy's default: an operation future) with `extra` added.
    template <class X>
    static auto with_cx(X &&extra) {
        return backend::default_cx() | std::forward<X>(extra);
    }
    template <class X, class C>
    static auto with_cx(X &&extra, C &&cxs) {
        return std::forward<C>(cxs) | std::forward<X>(extra);
    }

    // copy_on_stream when the copy is upcxx::copy (no end mapped here, the public-API mode,
    // completions the fast path cannot read): the host waits for the work queued on `s` so far,
    // upcxx::copy with the caller's completions (tracked by `in_flight` when given: destroy()
    // waits for it), then `s` waits on the GPU for the copy's operation completion: a ticket
    // that an LPC on the master persona or on the calling one (the first to run) marks done,
    // read by cuStreamWaitValue32 from mapped host memory (upcxx_extra_nvshmem_stream_wait_value32).
    // The stream's later work therefore waits for UPC++ progress on one of those personas.
    template <class S, class D, class... C>
    [[gnu::noinline]] static auto upcxx_on_stream(Heap &h, cudaStream_t s, std::shared_ptr<std::atomic<long>> in_flight,
                                                  S &&src, D &&dst, std::size_t n, C &&...cxs)
        -> decltype(upcxx::copy(std::forward<S>(src), std::forward<D>(dst), n, std::forward<C>(cxs)...)) {
        using R = decltype(upcxx::copy(std::forward<S>(src), std::forward<D>(dst), n, std::forward<C>(cxs)...));
        wait_for(h, s, "nvshmem_heap::copy_on_stream");  // the heap was checked by dispatch
        copy_engine &eng = h.engine();
        if (in_flight) eng.count_fallback();
        const std::shared_ptr<copy_engine> keep = eng.shared_from_this();
        const std::uint32_t t = eng.stream_ticket();
        // The ticket is done by whichever of the master persona and the calling one (a worker
        // thread's: that thread may be the one that waits) makes user-level progress first; the
        // second LPC finds it done and changes nothing.
        auto done = upcxx::operation_cx::as_lpc(upcxx::master_persona(), [keep, t] { keep->ticket_done(t); }) |
                    upcxx::operation_cx::as_lpc(upcxx::current_persona(), [keep, t] { keep->ticket_done(t); });
        if (in_flight) in_flight->fetch_add(1);
        auto issue = [&]() -> R {
            try {
                if (in_flight)
                    return upcxx::copy(std::forward<S>(src), std::forward<D>(dst), n,
                                       with_cx(std::move(done) | tracker(in_flight), std::forward<C>(cxs)...));
                return upcxx::copy(std::forward<S>(src), std::forward<D>(dst), n,
                                   with_cx(std::move(done), std::forward<C>(cxs)...));
            } catch (...) {
                eng.ticket_done(t);
                if (in_flight) in_flight->fetch_sub(1);
                throw;
            }
        };
        auto wait = [&] {
            if (!eng.stream_waits_for(s, t))
                throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR,
                                    "nvshmem_heap::copy_on_stream: the stream could not be made to wait on the GPU for "
                                    "the upcxx::copy, and it did not complete within 60 s of progress: the copy is in "
                                    "flight, and the work queued on the stream after this call is not ordered after it",
                                    nvshmem_errc::cuda);
        };
        if constexpr (std::is_void<R>::value) {
            issue();
            wait();
        } else {
            R r = issue();
            wait();
            return r;
        }
    }

    // One more operation completion that lowers `n` when the copy's operation completed: an LPC
    // on the master persona, which destroy() runs while it waits (never the initiator's, whose
    // thread may be gone by then).
    static auto tracker(std::shared_ptr<std::atomic<long>> n) {
        return upcxx::operation_cx::as_lpc(upcxx::master_persona(), [n] { n->fetch_sub(1); });
    }

    // upcxx::copy with the caller's arguments, after `after` (the host waits for it), counted and
    // tracked until its operation completes: destroy() waits for it before the segment goes. A
    // copy this UPC++ release's upcxx::copy crashes on is refused first.
    template <class Order, class S, class D, class Cxs>
    static auto fallback(Heap &h, Order after, S &&src, D &&dst, std::size_t n, Cxs &&cxs)
        -> decltype(upcxx::copy(std::forward<S>(src), std::forward<D>(dst), n, std::forward<Cxs>(cxs))) {
        refuse_upcxx_crash(src, dst);
        // Counted once the stream's order is settled (wait_for: the capture check, then the host
        // wait), so a copy refused there is not counted.
        std::shared_ptr<std::atomic<long>> in_flight = h.engine().fallbacks_in_flight();
        if constexpr (Order::on) {
            return upcxx_on_stream(h, after.stream, in_flight, std::forward<S>(src), std::forward<D>(dst), n,
                                   std::forward<Cxs>(cxs));
        } else {
            if (after.set) wait_for(h, after.stream);
            h.engine().count_fallback();
            in_flight->fetch_add(1);
            try {
                return upcxx::copy(std::forward<S>(src), std::forward<D>(dst), n,
                                   std::forward<Cxs>(cxs) | tracker(in_flight));
            } catch (...) {
                in_flight->fetch_sub(1);
                throw;
            }
        }
    }

    // Fast mode: the path of one copy with at least one end that may be device memory.
    template <class Order, class S, class D, class Cxs>
    static auto dispatch_fast(Heap &h, Order after, S &&src, D &&dst, std::size_t n, Cxs &&cxs)
        -> decltype(upcxx::copy(std::forward<S>(src), std::forward<D>(dst), n, std::forward<Cxs>(cxs))) {
        using src_end = copy_end<typename std::decay<S>::type>;
        using dst_end = copy_end<typename std::decay<D>::type>;
        using cx = typename backend::template cx<Cxs>;
        void *from = nullptr, *to = nullptr;
        std::size_t bytes = 0;
        int rank_s = -1, rank_d = -1;
        bool both_heap = false;  // heap memory at both ends: device memory a batch's kernel reaches
        if constexpr (src_end::known && dst_end::known) {
            using T = typename dst_end::element;
            cx::template assert_sane<T>();
            bytes = checked_bytes<T>(n);
            // Both ends are checked whatever the path: a range that starts in the heap and runs
            // past extent() is an error.
            const bool heap_s = reach(h, src, bytes, "source", from, rank_s);
            const bool heap_d = reach(h, dst, bytes, "destination", to, rank_d);
            both_heap = heap_s && heap_d;
            if (!(heap_s || heap_d))  // no end in the heap: upcxx::copy as the caller wrote it
                return plain(h, after, std::forward<S>(src), std::forward<D>(dst), n, std::forward<Cxs>(cxs));
            if ((cx::want_remote && !cx::fast_remote) || h.engine().force_fallback()) from = to = nullptr;
        }
        if (!from || !to)
            return fallback(h, after, std::forward<S>(src), std::forward<D>(dst), n, std::forward<Cxs>(cxs));
        // The fast path: issued now, completed at the initiator's progress, notified through
        // upcxx::copy's own completion machinery (the remote completion serialised here, as
        // upcxx::copy serialises it).
        auto f = std::make_unique<fast_flight<S, D, Cxs>>(src, dst, n, rank_d, std::forward<Cxs>(cxs));
        f->internal = cx::want_remote && cx::fast_remote;  // its remote completion: internal-level progress
        f->bytes = bytes;
        f->rank_s = rank_s;
        f->rank_d = rank_d;
        fast_flight<S, D, Cxs> &fl = *f;
        // A copy_on_stream that owes a remote completion is not queued behind a stream ticket:
        // that ticket takes user-level progress, which upcxx::discharge() does not make, so the
        // call makes it first (at most 60 s).
        if constexpr (Order::on && cx::want_remote) {
            if (!h.engine().progress_while_tickets_pending())
                throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                    "nvshmem_heap::copy_on_stream: an earlier copy_on_stream's upcxx::copy has not "
                                    "completed after 60 s of progress, and this copy owes a remote completion "
                                    "(upcxx::discharge() makes no progress that would let it go on): nothing was "
                                    "copied",
                                    nvshmem_errc::copies_in_flight);
        }
        h.engine().start(std::move(f), to, from, after.engine(),
                         both_heap);  // throws: nothing copied, nothing notified
        cx::owe_remote(*fl.initiator);
        return cx::returner(fl.here, false)();  // the flight completes only in progress, later
    }

    // UPC++ before 2021.3 (2020.10): its upcxx::copy between a raw T* (private host memory) and
    // another rank's device memory crashes in its bounce-buffer path (or reads the bytes before
    // they land). A copy that would take that path is refused here instead.
    template <class S, class D>
    static void refuse_upcxx_crash(const S &src, const D &dst) {
#if UPCXX_VERSION < 20210300L
        using src_end = copy_end<typename std::decay<S>::type>;
        using dst_end = copy_end<typename std::decay<D>::type>;
        if constexpr (src_end::known && dst_end::known && src_end::global != dst_end::global) {
            bool remote_device = false;
            int rank = -1;
            if constexpr (src_end::global) {
                rank = src.where();
                remote_device = rank != upcxx::rank_me() && may_be_device(src);
            } else {
                rank = dst.where();
                remote_device = rank != upcxx::rank_me() && may_be_device(dst);
            }
            if (remote_device)
                throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                    "nvshmem_heap::copy: this copy between a raw host T* and rank " +
                                        std::to_string(rank) +
                                        "'s device memory would be upcxx::copy, which crashes for it in UPC++ " +
                                        UPCXX_EXTRA_NVSHMEM_STR_(UPCXX_VERSION) +
                                        " (fixed in 2021.3.0): copy through a host global_ptr "
                                        "(upcxx::new_array) instead, or use UPC++ 2021.3.0 or later",
                                    nvshmem_errc::upcxx_unsupported);
        }
#else
        (void)src, (void)dst;
#endif
    }

    // A heap that can copy here: active, and made in this process (not a fork() parent's). No
    // CUDA call: in a fork() child this comes before any, as a child's CUDA call fails in its own way.
    static void check_usable(const Heap &h, const char *fn) {
        if (!h.active()) throw Heap::inactive(fn);
        h.engine().check_usable(fn);
    }
    // The name of the call a copy came through, for its errors.
    template <class Order>
    static const char *copy_name(const Order &after) noexcept {
        if constexpr (Order::on)
            return "nvshmem_heap::copy_on_stream";
        else
            return after.set ? "nvshmem_heap::copy_after" : "nvshmem_heap::copy";
    }
    // The checks of every copy that may have a device end, in both modes: the heap usable here
    // (the call's one check in this layer), then its ends.
    template <class S, class D>
    static void check_common(const Heap &h, const S &src, const D &dst, const char *fn) {
        check_usable(h, fn);
        check_ends(src, dst);
    }
    // No null end.
    template <class S, class D>
    static void check_ends(const S &src, const D &dst) {
        if (!src || !dst)
            throw nvshmem_error(
                UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT,
                std::string("nvshmem_heap::copy: the ") + (!src ? "source" : "destination") + " is a null pointer");
    }
    // n elements of T in bytes, or an error.
    template <class T>
    static std::size_t checked_bytes(std::size_t n) {
        if (n > static_cast<std::size_t>(-1) / sizeof(T))
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                "nvshmem_heap::copy: " + std::to_string(n) + " elements of " +
                                    std::to_string(sizeof(T)) + " bytes overflow size_t");
        return n * sizeof(T);
    }
    // Public-API mode: the checks that need no UPC++ internal: in UPC++'s opt codemode, a device
    // global pointer into the heap (found by public global pointer arithmetic, heap.hpp's
    // segment_offset_public) keeps its range inside extent(). In the debug codemode the global
    // pointers are left to upcxx::copy's own checks (operator- between pointers of two segments
    // is an assertion there).
    template <class S, class D>
    static void check_public(const Heap &h, const S &src, const D &dst, std::size_t n) {
        using src_end = copy_end<typename std::decay<S>::type>;
        using dst_end = copy_end<typename std::decay<D>::type>;
        if constexpr (src_end::known && dst_end::known) {
            const std::size_t bytes = checked_bytes<typename dst_end::element>(n);
            if constexpr (src_end::global) in_extent_public(h, src, bytes, "source");
            if constexpr (dst_end::global) in_extent_public(h, dst, bytes, "destination");
        }
    }

    /// A fast copy in flight: its notifications (upcxx::copy's completion state for `Cxs`, and
    /// its remote part serialised for the target rank), and the pointers to redo it through
    /// upcxx::copy if CUDA fails it.
    template <class S, class D, class Cxs>
    struct fast_flight final : flight {
        using cx = typename backend::template cx<Cxs>;
        fast_flight(const S &s, const D &d, std::size_t count, int target, Cxs &&cxs)
            : src(s),
              dst(d),
              n(count),
              here(std::forward<Cxs>(cxs)),
              remote(cx::prepare_remote(target, std::forward<Cxs>(cxs))),
              initiator(&upcxx::current_persona()) {}

        typename std::decay<S>::type src;
        typename std::decay<D>::type dst;
        std::size_t n;
        typename cx::here_t here;
        typename cx::remote_t remote;  // never moved: it may point into itself
        upcxx::persona *initiator;

        void notify_here() {
            here.template operator()<upcxx::source_cx_event>();
            here.template operator()<upcxx::operation_cx_event>();
        }
        void notify() {
            cx::send_remote(*initiator, rank_d, remote);
            notify_here();
        }
        void finish(std::unique_ptr<flight> self, int e, std::shared_ptr<std::atomic<long>> redo) override {
            if (in_internal) {
                // Internal-level progress, the bytes landed: the remote completion goes now (as
                // upcxx::copy initiates its own), the operation and source completions at the
                // initiator's user-level progress, where UPC++ delivers them.
                cx::send_remote(*initiator, rank_d, remote);
                std::shared_ptr<fast_flight> keep(static_cast<fast_flight *>(self.release()));
                initiator->lpc_ff([keep] { keep->notify_here(); });
                return;
            }
            if (e == UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_LANDED || !redo) return notify();
            // CUDA failed the copy: UPC++ copies it again; the notifications fire once those
            // bytes landed. The flight lives until then; destroy() waits for the redo.
            std::shared_ptr<fast_flight> keep(static_cast<fast_flight *>(self.release()));
            try {
                (void)upcxx::copy(keep->src, keep->dst, keep->n, upcxx::operation_cx::as_future() | tracker(redo))
                    .then([keep] { keep->notify(); });
            } catch (...) {
                redo->fetch_sub(1);
                throw;
            }
        }
    };

    // A raw range of n elements: the caller's private host memory (as upcxx::copy reads it),
    // no byte of it in the heap or a peer's heap as NVSHMEM maps it here. Inline, whether it
    // meets the span of those heaps that the C library publishes (a global pointer end: never);
    // out of line, the C library's verdict on every byte for one that does.
    template <class T>
    UPCXX_EXTRA_NVSHMEM_HOT static std::size_t raw_bytes(T *, std::size_t n) noexcept {
        constexpr std::size_t size = sizeof(typename std::remove_cv<T>::type);
        return n <= static_cast<std::size_t>(-1) / size ? n * size : static_cast<std::size_t>(-1);
    }
    template <class T>
    UPCXX_EXTRA_NVSHMEM_HOT static bool raw_in_span(const Heap &h, T *p, std::size_t n) noexcept {
        return h.in_heap_span(reinterpret_cast<std::uintptr_t>(p), raw_bytes(p, n));
    }
    template <class G>
    UPCXX_EXTRA_NVSHMEM_HOT static bool raw_in_span(const Heap &, const G &, std::size_t) noexcept {
        return false;
    }
    template <class T>
    UPCXX_EXTRA_NVSHMEM_HOT static void not_into_heap(const Heap &h, T *p, std::size_t n, const char *which) {
        if (__builtin_expect(raw_in_span(h, p, n), 0))
            check_raw_range(static_cast<const void *>(p), raw_bytes(p, n), which);
    }
    // Host memory at both ends, a raw end inside the span of the heaps: the C library decides
    // (throws for heap memory), then upcxx::copy as written. The ends come by value (a pointer
    // or a global pointer: in registers, so the inline path spills nothing for this call).
    template <class Order, class S, class D, class... C>
    [[gnu::cold, gnu::noinline]] static auto checked_plain(const Heap &h, Order after, S src, D dst, std::size_t n,
                                                           C &&...cxs)
        -> decltype(upcxx::copy(std::move(src), std::move(dst), n, std::forward<C>(cxs)...)) {
        if constexpr (!copy_end<S>::global) not_into_heap(h, src, n, "source");
        if constexpr (!copy_end<D>::global) not_into_heap(h, dst, n, "destination");
        return plain(const_cast<Heap &>(h), after, std::move(src), std::move(dst), n, std::forward<C>(cxs)...);
    }
    // The C library's verdict on a raw range that meets the span: throws for one with a byte in
    // this heap or a peer's heap as mapped here, with what to do about it; returns for one in the
    // gaps between them.
    [[gnu::cold, gnu::noinline]] static void check_raw_range(const void *p, std::size_t bytes, const char *which) {
        const upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_check_host_range(p, bytes);
        if (s == UPCXX_EXTRA_NVSHMEM_STATUS_OK) return;
        const nvshmem_error e = detail::c_error(s);
        throw nvshmem_error(s, std::string("nvshmem_heap::copy: the ") + which +
                                   " is a raw pointer whose range reaches NVSHMEM heap memory (" + e.what() +
                                   "); upcxx::copy reads a T* as this process's host memory: pass "
                                   "heap.to_global_ptr(sym, pe) instead");
    }
    // Public-API mode: a device global pointer into the heap keeps [p, p + bytes) inside extent()
    // (UPC++'s opt codemode; nothing checked in its debug codemode, see check_public).
    template <class T, upcxx::memory_kind K>
    static void in_extent_public(const Heap &h, const upcxx::global_ptr<T, K> &p, std::size_t bytes,
                                 const char *which) {
#if defined(UPCXX_CODEMODE) && (UPCXX_CODEMODE + 0)
        if constexpr (K != upcxx::memory_kind::host) {
            if (K == upcxx::memory_kind::any && p.dynamic_kind() != upcxx::memory_kind::cuda_device) return;
            const int rank = p.where();
            if (rank < 0 || static_cast<std::size_t>(rank) >= h.n_ranks()) return;  // UPC++ checks the rank
            const auto c = upcxx::reinterpret_pointer_cast<const char>(
                upcxx::static_kind_cast<upcxx::memory_kind::cuda_device>(p));
            const std::ptrdiff_t off = h.segment_offset_public(c, static_cast<std::size_t>(rank));
            if (off < 0) return;  // not this heap's
            void *sym = nullptr;
            int pe = -1;
            const upcxx_extra_nvshmem_status_t s =
                upcxx_extra_nvshmem_from_offset(rank, static_cast<std::size_t>(off), bytes, &sym, &pe);
            if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) {
                const nvshmem_error e = h.translation_error(s);
                throw nvshmem_error(s, std::string("nvshmem_heap::copy: the ") + which + " range: " + e.what());
            }
        }
#else
        (void)h, (void)p, (void)bytes, (void)which;
#endif
    }
    template <class T>
    static bool reach(const Heap &, T *p, std::size_t, const char *, void *&local, int &rank) {
        local = const_cast<void *>(static_cast<const void *>(p));  // CUDA reads and writes host memory
        rank = upcxx::rank_me();
        return false;
    }
    // A global pointer: into this heap (the address this process reaches it at, or nullptr when
    // not mapped here), this rank's own device memory or host memory this process reaches (its
    // address), or neither (nullptr). Returns whether it is heap memory.
    template <class T, upcxx::memory_kind K>
    static bool reach(const Heap &h, const upcxx::global_ptr<T, K> &p, std::size_t bytes, const char *which,
                      void *&local, int &rank) {
        const gptr_view v = backend::view(p);
        rank = v.rank;
        local = nullptr;
        if (v.kind == upcxx::memory_kind::host) {
            // This rank's shared memory, or a local_team peer's: this process's view of it.
            if (p.is_local()) local = const_cast<void *>(static_cast<const void *>(p.local()));
            return false;
        }
        if (v.kind != upcxx::memory_kind::cuda_device) return false;
        if (!h.owns(v, nullptr)) {
            if (v.rank == upcxx::rank_me()) local = v.raw;  // this rank's own device memory
            return false;
        }
        upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_local_ptr(v.rank, v.raw, bytes, &local, nullptr, nullptr);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) {
            nvshmem_error e = h.translation_error(s);
            throw nvshmem_error(s, std::string("nvshmem_heap::copy: the ") + which + " range: " + e.what());
        }
        return true;
    }

    // Host waits for `stream` (copies that cannot be ordered on the GPU), in the calling thread's
    // device context: 0, cudaStreamLegacy and cudaStreamPerThread are its current device's. While
    // a stream may be waiting on the GPU for a copy_on_stream's upcxx::copy (a ticket not done),
    // the wait makes UPC++ progress: that copy's completion is what lets the stream go on.
    // `stream` being captured into a CUDA graph is refused first (errc stream_capture).
    static void wait_for(Heap &h, cudaStream_t stream, const char *fn = "nvshmem_heap::copy_after") {
        refuse_capture(stream, fn);
        upcxx_extra_nvshmem_status_t s = UPCXX_EXTRA_NVSHMEM_STATUS_OK;
        if (h.engine().tickets_pending()) {
            bool done = false;
            while ((s = upcxx_extra_nvshmem_stream_query(stream, &done)) == UPCXX_EXTRA_NVSHMEM_STATUS_OK && !done)
                upcxx::progress();
        } else {
            s = upcxx_extra_nvshmem_stream_synchronize(stream);
        }
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw engine_error(s, fn);
    }

    /// heap.after(s, cxs): the completions `cxs` (operation_cx only) once the work queued on `s`
    /// before the call has completed, delivered as a copy's operation completion (fast mode: at
    /// the calling persona's user-level progress, never inside the call). In the public-API mode
    /// (no UPC++ internal to complete later) the host waits for `s`, then a 0-element
    /// upcxx::copy delivers `cxs` exactly as UPC++ does.
    template <class Cxs>
    static auto after(Heap &h, cudaStream_t s,
                      Cxs &&cxs) -> decltype(upcxx::copy(std::declval<const char *>(), std::declval<device_gptr>(),
                                                         std::size_t(0), std::forward<Cxs>(cxs))) {
        check_usable(h, "nvshmem_heap::after");
        if constexpr (internals::cx_known<Cxs>) {
            using cx = typename backend::template cx<Cxs>;
            static_assert(!cx::want_remote, "heap.after(stream, cxs): a remote completion (remote_cx) has no target");
            auto f = std::make_unique<wait_flight<Cxs>>(std::forward<Cxs>(cxs));
            wait_flight<Cxs> &fl = *f;
            h.engine().start_after(std::move(f), s);  // throws: nothing will be notified
            return cx::returner(fl.here, false)();
        } else {
            wait_for(h, s, "nvshmem_heap::after");
            static const char nothing = 0;
            return upcxx::copy(&nothing, h.own_base(), 0, std::forward<Cxs>(cxs));
        }
    }

    /// heap.copies_on_stream(s, copies, cxs): every {src, dst, n} of `copies` in the order of `s`,
    /// issued in the call, and the completions `cxs` (operation_cx only) once `s` has run them
    /// all. When every copy has both ends mapped here (fast mode), one call of the engine: runs
    /// of small copies with heap memory at both ends move in one launch of the batch kernel, the
    /// others one cudaMemcpyAsync each, all on `s`. Otherwise each is copy_on_stream (in `s`'s
    /// order, by its path) and `cxs` is after(s, cxs).
    template <class Range, class Cxs>
    static auto many_on_stream(Heap &h, cudaStream_t s, const Range &copies,
                               Cxs &&cxs) -> decltype(after(h, s, std::forward<Cxs>(cxs))) {
        // The call's one check in this layer (each copy_on_stream below, off the fast path, asks
        // for its own).
        check_usable(h, "nvshmem_heap::copies_on_stream");
        if constexpr (internals::cx_known<Cxs>) {
            using cx = typename backend::template cx<Cxs>;
            static_assert(!cx::want_remote,
                          "heap.copies_on_stream(stream, copies, cxs): a remote completion (remote_cx) is not "
                          "supported; use copy_on_stream for each copy");
            std::vector<upcxx_extra_nvshmem_engine_copy_t> cs;
            bool fast = !h.engine().force_fallback();
            for (const auto &c : copies) {
                using T = typename std::decay<decltype(c.dst)>::type::element_type;
                check_ends(c.src, c.dst);
                upcxx_extra_nvshmem_engine_copy_t e{};
                e.bytes = checked_bytes<T>(c.n);
                void *from = nullptr, *to = nullptr;
                const bool heap_s = reach(h, c.src, e.bytes, "source", from, e.src_rank);
                const bool heap_d = reach(h, c.dst, e.bytes, "destination", to, e.dst_rank);
                if (!from || !to || !(heap_s || heap_d)) fast = false;
                e.src = from;
                e.dst = to;
                e.flags = heap_s && heap_d ? std::uint32_t(UPCXX_EXTRA_NVSHMEM_ENGINE_FLAG_DEVICE_ENDS) : 0u;
                e.stream = s;
                cs.push_back(e);
            }
            if (fast) {
                auto f = std::make_unique<wait_flight<Cxs>>(std::forward<Cxs>(cxs));
                wait_flight<Cxs> &fl = *f;
                h.engine().start_batch(std::move(f), s, cs.data(), cs.size());  // throws: nothing notified
                return cx::returner(fl.here, false)();
            }
        }
        for (const auto &c : copies) (void)dispatch(h, route_on_stream{s}, c.src, c.dst, c.n);
        return after(h, s, std::forward<Cxs>(cxs));
    }

    /// after(): a wait for a stream, notified as a copy's operation completion.
    template <class Cxs>
    struct wait_flight final : flight {
        using cx = typename backend::template cx<Cxs>;
        explicit wait_flight(Cxs &&cxs) : here(std::forward<Cxs>(cxs)) {}
        typename cx::here_t here;
        void finish(std::unique_ptr<flight>, int, std::shared_ptr<std::atomic<long>>) override {
            here.template operator()<upcxx::source_cx_event>();
            here.template operator()<upcxx::operation_cx_event>();
        }
    };
};

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_COPY_HPP
