// upcxx-extra-nvshmem: every UPC++ internal the C++ layer uses, each detected at compile time.
// Part of <upcxx_extra/nvshmem.hpp>, included by backend.hpp; nothing else names a UPC++
// internal.
// SPDX-License-Identifier: BSD-3-Clause
//
// The fast copies (heap.copy through NVSHMEM's peer mapping) read what upcxx::copy itself reads:
// a global pointer's address and segment, upcxx::copy's completion machinery, the persona's count
// of owed remote completions and UPC++'s active-message send. None of these is UPC++'s public
// API, so a UPC++ release may rename any of them. Each one is detected here (the detection idiom
// on member names and types; a UPC++ namespace member is looked up through a using-directive
// that falls back to a stand-in of ours when UPC++ has no such name), and the layer takes one of
// two modes:
//   - fast mode: every internal of this UPC++ release line was found. heap.copy takes the fast
//     path where it can; nvshmem_heap::fast_copies() is true.
//   - public-API mode: one was missing, or UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1 was defined
//     before the header. Every heap.copy is upcxx::copy with the caller's arguments;
//     construction and translation use UPC++'s public API only; fast_copies() is false. The
//     forcing macro is announced by #pragma message; a missing internal (which the preprocessor
//     cannot see) by one compiler warning naming it, kept a warning under -Werror.
// docs/compatibility.md, "Fast mode and public-API mode", lists each internal and its check.
#ifndef UPCXX_EXTRA_NVSHMEM_UPCXX_INTERNALS_HPP
#define UPCXX_EXTRA_NVSHMEM_UPCXX_INTERNALS_HPP

#include <upcxx/upcxx.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>

// UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY: defined as 1 (or as nothing) forces the public-API mode;
// undefined or 0 leaves the choice to the detection below.
#if defined(UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY) && \
    ((UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY + 0) || (0 - UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY - 1) == 1)
#define UPCXX_EXTRA_NVSHMEM_PUBLIC_FORCED_ 1
#pragma message( \
    "upcxx_extra/nvshmem.hpp: public-API mode, forced by UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY: every heap.copy is upcxx::copy, nvshmem_heap::fast_copies() is false")
#else
#define UPCXX_EXTRA_NVSHMEM_PUBLIC_FORCED_ 0
#endif

// The detected public-API mode is tested against a UPC++ that has every internal by a patched
// copy of this header in the test build, in which internal 1 (global_ptr's address field) counts
// as missing (tests/cxx/CMakeLists.txt, public_mode_detected_test; tests/cxx/public_mode_test.cpp).

// The namespaces the lookups below search (declared, empty, should a release drop one).
namespace upcxx {
namespace detail {}
namespace backend {}
}  // namespace upcxx

// Stand-ins, found by the lookups below only when UPC++ has no such name. They live outside
// namespace upcxx, so that a name UPC++ declares is found first.
namespace upcxx_extra_nvshmem_stand_in {
struct missing {};
template <class...>
struct copy_traits {};
enum class cx_event_done : int {};
struct internal_only {};
template <class... A>
missing prepare_deferred_am_master(A &&...);
template <class... A>
missing send_prepared_am_master(A &&...);
template <template <class> class P, class V, class C>
struct completions_state {};
template <template <class> class P, class V, class C>
struct completions_returner {};
template <class T>
struct event_is_here {};
struct rput_event_values {};
template <class C, class E>
struct completions_has_event {};
struct persona_tls {};
inline persona_tls the_persona_tls;
}  // namespace upcxx_extra_nvshmem_stand_in

namespace upcxx {
namespace extra {
namespace detail {
namespace internals {

// ---- the detection idiom -----------------------------------------------------------------------
template <class...>
using void_t = void;
template <class Void, template <class...> class Op, class... A>
struct detector : std::false_type {};
template <template <class...> class Op, class... A>
struct detector<void_t<Op<A...>>, Op, A...> : std::true_type {};
template <template <class...> class Op, class... A>
constexpr bool is_detected = detector<void, Op, A...>::value;
/// Op<A...>, or void where it is not a type.
template <class Void, template <class...> class Op, class... A>
struct detected_or_void {
    using type = void;
};
template <template <class...> class Op, class... A>
struct detected_or_void<void_t<Op<A...>>, Op, A...> {
    using type = Op<A...>;
};

// ---- UPC++ namespace members, or the stand-ins ---------------------------------------------------
// A using-directive makes upcxx::detail's names visible as if declared in namespace upcxx, the
// stand-ins' as if declared in the global namespace: unqualified lookup from here finds UPC++'s
// name first, the stand-in only when UPC++ has none.
namespace in_detail {
using namespace ::upcxx_extra_nvshmem_stand_in;
using namespace ::upcxx::detail;
template <class Cxs>
using copy_traits_t = copy_traits<Cxs>;
using cx_event_done_t = cx_event_done;
using internal_only_t = internal_only;
#if UPCXX_VERSION < 20220300L
template <class C>
using completions_state_t = completions_state<event_is_here, rput_event_values, C>;
template <class C>
using completions_returner_t = completions_returner<event_is_here, rput_event_values, C>;
template <class C, class E>
using completions_has_event_t = completions_has_event<C, E>;
#endif
/// The calling thread's persona state (detail::the_persona_tls; the stand-in's where UPC++ has none).
inline auto persona_tls() noexcept -> decltype((the_persona_tls)) { return the_persona_tls; }
}  // namespace in_detail
namespace in_backend {
using namespace ::upcxx_extra_nvshmem_stand_in;
using namespace ::upcxx::backend;
/// remote_cx::as_rpc serialised now into an AM to `rank`'s master persona, sent later: what
/// upcxx::copy does for a remote completion chained after the initiator learns the copy landed.
template <class F>
auto prepare_remote_am(int rank, F &&f) -> decltype(prepare_deferred_am_master(rank, std::forward<F>(f))) {
    return prepare_deferred_am_master(rank, std::forward<F>(f));
}
/// Sends a prepared AM, to run at user level on the target's master persona.
template <class Am>
auto send_prepared_user(int rank,
                        Am &am) -> decltype(send_prepared_am_master(upcxx::progress_level::user, rank, std::move(am))) {
    return send_prepared_am_master(upcxx::progress_level::user, rank, std::move(am));
}
}  // namespace in_backend

// ---- global_ptr's fields ---------------------------------------------------------------------------
// 2022.3 and later: UPCXXI_INTERNAL_ONLY(raw_ptr_) and UPCXXI_INTERNAL_ONLY(heap_idx_).
template <class P>
using raw_ptr_field = decltype(std::declval<const P &>().private_detail_do_not_use_raw_ptr_);
template <class P>
using heap_idx_field = decltype(static_cast<long>(std::declval<const P &>().private_detail_do_not_use_heap_idx_));
// 2020.10: rank_, raw_ptr_, device_ (public members named as private).
template <class P>
using old_rank_field = decltype(static_cast<int>(std::declval<const P &>().rank_));
template <class P>
using old_raw_ptr_field = decltype(std::declval<const P &>().raw_ptr_);
template <class P>
using old_device_field = decltype(static_cast<long>(std::declval<const P &>().device_));

template <class P>
constexpr bool has_raw_ptr = is_detected<raw_ptr_field, P>;
template <class P>
constexpr bool has_heap_idx = is_detected<heap_idx_field, P>;
template <class P>
constexpr bool has_old_fields =
    is_detected<old_rank_field, P> && is_detected<old_raw_ptr_field, P> && is_detected<old_device_field, P>;

/// The address a global pointer holds (on its rank); nullptr where the field is missing.
template <class P>
void *raw_ptr(const P &p) noexcept {
    if constexpr (has_raw_ptr<P>)
        return const_cast<void *>(static_cast<const void *>(p.private_detail_do_not_use_raw_ptr_));
    else if constexpr (has_old_fields<P>)
        return const_cast<void *>(static_cast<const void *>(p.raw_ptr_));
    else
        return nullptr;
}
/// The segment a global pointer names (heap index; 2020.10: CUDA device id, -1 for host); -2
/// where the field is missing.
template <class P>
long segment_of(const P &p) noexcept {
    if constexpr (has_heap_idx<P>)
        return static_cast<long>(p.private_detail_do_not_use_heap_idx_);
    else if constexpr (has_old_fields<P>)
        return static_cast<long>(p.device_);
    else
        return -2;
}
/// 2020.10: the rank field (global_ptr::where() is the same, and public).
template <class P>
int old_rank(const P &p) noexcept {
    if constexpr (has_old_fields<P>)
        return static_cast<int>(p.rank_);
    else
        return p.where();
}

// ---- the persona's count of owed completions -------------------------------------------------------
template <class P>
using undischarged_field = decltype(std::declval<P &>().private_detail_do_not_use_undischarged_n_ += 1);
template <class P>
constexpr bool has_undischarged = is_detected<undischarged_field, P>;
/// upcxx::progress_required() and upcxx::discharge() wait while it is not zero.
template <class P>
void add_undischarged(P &persona, int d) noexcept {
    if constexpr (has_undischarged<P>) persona.private_detail_do_not_use_undischarged_n_ += d;
}

// ---- the persona's internal-level progress queue ---------------------------------------------------
// UPC++ runs its own copies' completion work there (upcxx::discharge() makes no other progress):
// detail::persona_tls::defer(persona, progress_level::internal, fn). Where it is missing, user level
// (lpc_ff): a copy with a remote completion then completes as before, at user-level progress.
template <class Tls, class Fn>
using defer_internal_call = decltype(std::declval<Tls &>().defer(std::declval<upcxx::persona &>(),
                                                                 upcxx::progress_level::internal, std::declval<Fn>()));
using persona_tls_t = typename std::remove_reference<decltype(in_detail::persona_tls())>::type;
template <class Fn>
constexpr bool has_defer_internal = is_detected<defer_internal_call, persona_tls_t, Fn>;

// ---- UPC++'s deferred active-message send ------------------------------------------------------------
template <class F>
using prepare_am_t = decltype(in_backend::prepare_remote_am(0, std::declval<F>()));
template <class F>
using prepared_am_t = typename detected_or_void<void, prepare_am_t, F>::type;
template <class Am>
using send_prepared_t = decltype(in_backend::send_prepared_user(0, std::declval<Am &>()));
template <class F>
constexpr bool has_prepared_am_impl() {
    if constexpr (!is_detected<prepare_am_t, F>) {
        return false;
    } else if constexpr (std::is_same<prepared_am_t<F>, ::upcxx_extra_nvshmem_stand_in::missing>::value) {
        return false;
    } else {
        return is_detected<send_prepared_t, prepared_am_t<F>> &&
               !std::is_same<typename detected_or_void<void, send_prepared_t, prepared_am_t<F>>::type,
                             ::upcxx_extra_nvshmem_stand_in::missing>::value;
    }
}
template <class F>
constexpr bool has_prepared_am = has_prepared_am_impl<F>();

// ---- upcxx::copy's completion machinery (UPC++ 2022.3 and later: copy_traits) ----------------------
template <class T>
using cx_done_operation = decltype(T::operation);
template <class T>
using cx_done_none = decltype(T::none);
constexpr bool has_cx_event_done =
    is_detected<cx_done_operation, in_detail::cx_event_done_t> && is_detected<cx_done_none, in_detail::cx_event_done_t>;

template <class Tr>
using tr_here = typename Tr::cxs_here_t;
template <class Tr>
using tr_returner = typename Tr::returner;
template <class Tr>
using tr_remote = typename Tr::cxs_remote_bound_t;
template <class Tr>
using tr_want_remote = decltype(static_cast<bool>(Tr::want_remote));
template <class Tr, class Cxs>
using tr_bind_remote = decltype(Tr::bind_remote(std::declval<Cxs>()));
template <class Tr>
using tr_assert_sane = decltype(Tr::template assert_sane<int>());
template <class Tr, class Cxs>
using tr_here_from = decltype(typename Tr::cxs_here_t(std::declval<Cxs>()));
template <class Tr>
using tr_returned = decltype(typename Tr::returner(std::declval<typename Tr::cxs_here_t &>(),
                                                   std::declval<in_detail::cx_event_done_t>())());
template <class Tr>
using tr_notify = decltype(std::declval<typename Tr::cxs_here_t &>().template operator()<upcxx::source_cx_event>(),
                           std::declval<typename Tr::cxs_here_t &>().template operator()<upcxx::operation_cx_event>());

/// Whether copy_traits<Cxs> has every member the fast path reads, for the completions `Cxs`.
template <class Cxs, class Tr = in_detail::copy_traits_t<Cxs>>
constexpr bool has_copy_traits_for =
    is_detected<tr_here, Tr> && is_detected<tr_returner, Tr> && is_detected<tr_remote, Tr> &&
    is_detected<tr_want_remote, Tr> && is_detected<tr_bind_remote, Tr, Cxs> && is_detected<tr_assert_sane, Tr> &&
    is_detected<tr_here_from, Tr, Cxs> && is_detected<tr_returned, Tr> && is_detected<tr_notify, Tr>;

#if UPCXX_VERSION < 20220300L
// ---- upcxx::copy's completion machinery (UPC++ 2020.10: completions_state / completions_returner) --
template <class St, class C>
using old_here_from = decltype(St(std::declval<C>()));
template <class St, class Re>
using old_returned = decltype(Re(std::declval<St &>())());
template <class St>
using old_notify = decltype(std::declval<St &>().template operator()<upcxx::source_cx_event>(),
                            std::declval<St &>().template operator()<upcxx::operation_cx_event>());
template <class C>
using old_has_event = decltype(static_cast<bool>(in_detail::completions_has_event_t<C, upcxx::remote_cx_event>::value));

template <class Cxs, class C = typename std::decay<Cxs>::type>
constexpr bool has_old_completions_for =
    is_detected<old_here_from, in_detail::completions_state_t<C>, Cxs> &&
    is_detected<old_returned, in_detail::completions_state_t<C>, in_detail::completions_returner_t<C>> &&
    is_detected<old_notify, in_detail::completions_state_t<C>> && is_detected<old_has_event, C>;
#endif

// ---- GASNet-EX native memory kinds for CUDA ---------------------------------------------------------
// With native kinds a segment must cover mapped memory only (heap.hpp: one more segment per
// growth); with reference kinds one segment over the whole reservation serves the heap. The
// answer, in order: UPC++'s configuration macro UPCXXI_GEX_MK_CUDA where defined (its value);
// else cuda_device::use_gex_mk(internal_only) (UPC++ 2023.9: constexpr); else, as in the
// public-API mode, "native": a segment per growth is right with either kind (it costs segments,
// at most nvshmem_heap::max_segments), one segment over unmapped memory is right only with
// reference kinds. A renamed macro therefore never turns native kinds into one segment.
template <class D>
using use_gex_mk_t = decltype(std::integral_constant<bool, D::use_gex_mk(in_detail::internal_only_t{})>{});
template <class D, bool = is_detected<use_gex_mk_t, D>>
struct gex_mk_of {
    static constexpr bool known = false;
    static constexpr bool value = true;
};
template <class D>
struct gex_mk_of<D, true> {
    static constexpr bool known = true;
    static constexpr bool value = D::use_gex_mk(in_detail::internal_only_t{});
};
#if defined(UPCXXI_GEX_MK_CUDA)
constexpr bool gex_mk_known = true;
constexpr bool gex_mk_cuda = (UPCXXI_GEX_MK_CUDA + 0) != 0;
#else
constexpr bool gex_mk_known = gex_mk_of<upcxx::cuda_device>::known;
constexpr bool gex_mk_cuda = gex_mk_of<upcxx::cuda_device>::value;
#endif

// ---- the mode -------------------------------------------------------------------------------------
using device_gptr_t = upcxx::global_ptr<char, upcxx::memory_kind::cuda_device>;
using host_gptr_t = upcxx::global_ptr<char>;
using default_cxs_t = decltype(upcxx::operation_cx::as_future());

/// Why the public-API mode (0: every internal found, fast mode), by number:
///   1 global_ptr's address field, 2 its segment field, 6 upcxx::copy's completion machinery,
///   5 cx_event_done (2022.3 and later), 8 the forcing macro. Missing 3 (the persona's count)
///   or 4 (the AM send) keeps the fast mode but sends copies with a remote completion to
///   upcxx::copy; missing 7 (the memory-kind answer) makes a segment per growth.
#if UPCXX_VERSION >= 20220300L
constexpr int missing = UPCXX_EXTRA_NVSHMEM_PUBLIC_FORCED_                            ? 8
                        : !(has_raw_ptr<device_gptr_t> && has_raw_ptr<host_gptr_t>)   ? 1
                        : !(has_heap_idx<device_gptr_t> && has_heap_idx<host_gptr_t>) ? 2
                        : !has_copy_traits_for<default_cxs_t>                         ? 6
                        : !has_cx_event_done                                          ? 5
                                                                                      : 0;
#else
constexpr int missing = UPCXX_EXTRA_NVSHMEM_PUBLIC_FORCED_                                ? 8
                        : !(has_old_fields<device_gptr_t> && has_old_fields<host_gptr_t>) ? 1
                        : !has_old_completions_for<default_cxs_t>                         ? 6
                                                                                          : 0;
#endif
constexpr bool fast = missing == 0;

// The compile-time notice of a detected public-API mode (the forced one has its #pragma message
// above): a deprecation warning naming the internal, made a warning even under -Werror. It is
// not shown where this header is included as a system header (an imported CMake target's).
template <int Why>
struct mode_notice {};
template <>
struct [[deprecated(
    "upcxx_extra/nvshmem.hpp: public-API mode, this UPC++ lacks global_ptr's address field "
    "(private_detail_do_not_use_raw_ptr_, 2020.10: raw_ptr_/rank_/device_): every heap.copy is upcxx::copy, "
    "nvshmem_heap::fast_copies() is false (define UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1 to choose this mode "
    "without this warning)")]] mode_notice<1> {};
template <>
struct [[deprecated(
    "upcxx_extra/nvshmem.hpp: public-API mode, this UPC++ lacks global_ptr's segment field "
    "(private_detail_do_not_use_heap_idx_): every heap.copy is upcxx::copy, nvshmem_heap::fast_copies() is false "
    "(define UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1 to choose this mode without this warning)")]] mode_notice<2> {};
template <>
struct [[deprecated(
    "upcxx_extra/nvshmem.hpp: public-API mode, this UPC++ lacks upcxx::copy's completion machinery as this "
    "layer reads it (upcxx::detail::copy_traits; 2020.10: completions_state/completions_returner): every "
    "heap.copy is upcxx::copy, nvshmem_heap::fast_copies() is false (define "
    "UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1 to choose this mode without this warning)")]] mode_notice<6> {};
template <>
struct [[deprecated(
    "upcxx_extra/nvshmem.hpp: public-API mode, this UPC++ lacks upcxx::detail::cx_event_done::operation/none: "
    "every heap.copy is upcxx::copy, nvshmem_heap::fast_copies() is false (define "
    "UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1 to choose this mode without this warning)")]] mode_notice<5> {};
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic warning "-Wdeprecated-declarations"
#endif
constexpr int notice = missing == 8 ? 0 : missing;  // the forced mode has its #pragma message
constexpr std::size_t mode_noticed = sizeof(mode_notice<notice>);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/// Whether the fast path can notify the completions `Cxs` (fast mode; a form this layer cannot
/// read goes to upcxx::copy).
#if UPCXX_VERSION >= 20220300L
template <class Cxs>
constexpr bool cx_known = fast && has_copy_traits_for<Cxs>;
#else
template <class Cxs>
constexpr bool cx_known = fast && has_old_completions_for<Cxs>;
#endif

/// Fast mode: whether copies with a remote completion (remote_cx::as_rpc) take the fast path
/// (UPC++ 2022.3 and later, with the persona's count and the AM send found).
template <class Bound>
constexpr bool fast_remote_for =
    fast && UPCXX_VERSION >= 20220300L && has_undischarged<upcxx::persona> && has_prepared_am<Bound>;

/// upcxx::copy's completion machinery for the completions `Cxs` (fast mode only).
template <class Cxs>
struct copy_cx {
#if UPCXX_VERSION >= 20220300L
    using traits = in_detail::copy_traits_t<Cxs>;
    using here_t = typename traits::cxs_here_t;
    using returner_t = typename traits::returner;
    using remote_bound_t = typename traits::cxs_remote_bound_t;
    static constexpr bool want_remote = traits::want_remote;
    static constexpr bool fast_remote = fast_remote_for<remote_bound_t>;
    /// The remote completion, serialised at the call into an AM not yet sent (as upcxx::copy
    /// serialises as_rpc's arguments: the caller's variables may be gone when the copy lands);
    /// int where there is none. It may point into itself: constructed in place, never moved.
    using remote_t = typename std::conditional<want_remote && fast_remote, prepared_am_t<remote_bound_t>, int>::type;
    static remote_t prepare_remote(int rank, Cxs &&cxs) {
        if constexpr (want_remote && fast_remote)
            return in_backend::prepare_remote_am(rank, traits::bind_remote(std::forward<Cxs>(cxs)));
        else
            return (void)rank, (void)cxs, 0;
    }
    /// upcxx::copy's own checks of the element type and the completions.
    template <class T>
    static void assert_sane() {
        traits::template assert_sane<T>();
    }
    /// The value copy() returns; `done`: the operation completed before it (as rget does).
    static returner_t returner(here_t &here, bool done) {
        using done_t = in_detail::cx_event_done_t;
        return returner_t(here, done ? done_t::operation : done_t::none);
    }
    /// A remote completion is owed from `initiator` until it is sent: upcxx::progress_required()
    /// and upcxx::discharge() wait for it, as for upcxx::copy's own.
    template <class Persona>
    static void owe_remote(Persona &initiator) noexcept {
        if constexpr (want_remote && fast_remote) add_undischarged(initiator, 1);
    }
    /// remote_cx::as_rpc, sent as upcxx::copy sends it: the prepared AM, run on the target's
    /// master persona at user level. Runs on `initiator`, which owed it; once per flight.
    template <class Persona>
    static void send_remote(Persona &initiator, int rank, remote_t &am) {
        if constexpr (want_remote && fast_remote) {
            add_undischarged(initiator, -1);
            in_backend::send_prepared_user(rank, am);
        } else {
            (void)initiator, (void)rank, (void)am;
        }
    }
#else
    using decayed = typename std::decay<Cxs>::type;
    using here_t = in_detail::completions_state_t<decayed>;
    using returner_t = in_detail::completions_returner_t<decayed>;
    using remote_t = int;  // unused: 2020.10's upcxx::copy has no remote completion
    // A remote completion goes to upcxx::copy, as the release defines it.
    static constexpr bool want_remote = in_detail::completions_has_event_t<decayed, upcxx::remote_cx_event>::value;
    static constexpr bool fast_remote = false;
    static remote_t prepare_remote(int, Cxs &&) { return 0; }
    template <class T>
    static void assert_sane() {}
    static returner_t returner(here_t &here, bool) { return returner_t(here); }
    template <class Persona>
    static void owe_remote(Persona &) noexcept {}
    template <class Persona>
    static void send_remote(Persona &, int, remote_t &) {}
#endif
};

}  // namespace internals

/// copy_engine.hpp's queue_internal: persona `p`'s internal-level progress (user level where UPC++
/// has no such queue: a copy with a remote completion then completes at user-level progress).
template <class Fn>
void queue_internal(upcxx::persona &p, Fn &&fn) {
    if constexpr (internals::has_defer_internal<Fn>)
        internals::in_detail::persona_tls().defer(p, upcxx::progress_level::internal, std::forward<Fn>(fn));
    else
        p.lpc_ff(std::forward<Fn>(fn));
}

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_UPCXX_INTERNALS_HPP
