// copy_signatures: compile-only check that nvshmem_heap::copy (and copy_after) take exactly the
// argument lists upcxx::copy takes in the UPC++ release at hand, and return the same type.
//
//   1. A cross product of argument lists (source x destination x count x completions): every
//      global_ptr kind (host, cuda_device, memory_kind::any), const and non-const elements, the
//      pointers as rvalues, lvalues and const lvalues, raw T* / const T* (private host memory),
//      and every completion form (operation_cx / source_cx as_future, as_promise, as_lpc,
//      source_cx::as_blocking / as_buffered, remote_cx::as_rpc, UPC++ >= 2023.3 as_eager_* and
//      as_defer_*, combinations with |, as rvalue, lvalue and const lvalue). For each list,
//      static_assert: upcxx::copy is callable with it (the table is what UPC++ takes), heap.copy
//      and heap.copy_after(stream, ...) are callable exactly when it is, with the same return type.
//   2. Lists upcxx::copy refuses (element types that differ, two raw pointers, a const
//      destination, no count, a count that is not one, too many arguments): heap.copy and
//      copy_after must refuse them too (not callable: a detection idiom).
//   3. Real calls (instantiate(), compiled, never run) of heap.copy for every pointer combination
//      with the default completion and for every completion form, and of copy_after: the bodies
//      compile, not only the declarations. UPC++ 2020.10's upcxx::copy accepts remote_cx in its
//      signature but its body does not compile with it, so the real calls leave remote_cx out
//      there (the declarations are still compared).
//   4. Fast mode: every completion list of the table is one the fast path can notify
//      (upcxx_internals.hpp finds upcxx::copy's machinery for it), so none falls back silently.
// Built as an OBJECT library for every UPC++ release, threadmode and codemode the test suite
// configures tests/cxx/CMakeLists.txt with (tests cxx.*);
// with UXN_UPCXX_PUBLIC_ONLY=ON in the public-API mode, where 1-3 hold as they are.
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"

namespace sig {

using upcxx::global_ptr;
using upcxx::memory_kind;
using upcxx::operation_cx;
using upcxx::remote_cx;
using upcxx::source_cx;
using upcxx::extra::nvshmem_heap;

#if UPCXX_VERSION > 20201000L
#define SIG_REMOTE_CX_BODY 1  // upcxx::copy's body compiles with remote_cx (not in 2020.10)
#else
#define SIG_REMOTE_CX_BODY 0
#endif
#if UPCXX_VERSION >= 20230300L
#define SIG_EAGER 1
#else
#define SIG_EAGER 0
#endif

// ---- detection idiom --------------------------------------------------------------------------
template <class...>
using void_t = void;
struct nonesuch {};
template <class Void, template <class...> class Op, class... A>
struct detector {
    using value_t = std::false_type;
    using type = nonesuch;
};
template <template <class...> class Op, class... A>
struct detector<void_t<Op<A...>>, Op, A...> {
    using value_t = std::true_type;
    using type = Op<A...>;
};
template <template <class...> class Op, class... A>
using is_detected = typename detector<void, Op, A...>::value_t;
template <template <class...> class Op, class... A>
using detected_t = typename detector<void, Op, A...>::type;

template <class... A>
using upcxx_copy_t = decltype(upcxx::copy(std::declval<A>()...));
template <class... A>
using heap_copy_t = decltype(std::declval<nvshmem_heap &>().copy(std::declval<A>()...));
template <class... A>
using heap_copy_after_t =
    decltype(std::declval<nvshmem_heap &>().copy_after(std::declval<cudaStream_t>(), std::declval<A>()...));

template <class... A>
struct verdict {
    static constexpr bool upcxx_takes = is_detected<upcxx_copy_t, A...>::value;
    static constexpr bool heap_takes = is_detected<heap_copy_t, A...>::value;
    static constexpr bool after_takes = is_detected<heap_copy_after_t, A...>::value;
    static constexpr bool same_return =
        std::is_same<detected_t<upcxx_copy_t, A...>, detected_t<heap_copy_t, A...>>::value;
    static constexpr bool same_return_after =
        std::is_same<detected_t<upcxx_copy_t, A...>, detected_t<heap_copy_after_t, A...>>::value;
};

// An argument list upcxx::copy takes: heap.copy / copy_after take it and return the same type.
// (A failing static_assert names A... in the compiler's instantiation trace.)
template <class... A>
constexpr bool accepted() {
    using v = verdict<A...>;
    static_assert(v::upcxx_takes,
                  "test table: upcxx::copy does not take this argument list (see the instantiation trace)");
    static_assert(v::heap_takes, "nvshmem_heap::copy does not take an argument list upcxx::copy takes");
    static_assert(v::same_return, "nvshmem_heap::copy returns another type than upcxx::copy for this argument list");
    static_assert(v::after_takes,
                  "nvshmem_heap::copy_after(stream, ...) does not take an argument list upcxx::copy takes");
    static_assert(v::same_return_after, "nvshmem_heap::copy_after returns another type than upcxx::copy");
    return true;
}
// An argument list upcxx::copy refuses: so do heap.copy and copy_after.
template <class... A>
constexpr bool refused() {
    using v = verdict<A...>;
    static_assert(!v::upcxx_takes, "test table: upcxx::copy takes this argument list");
    static_assert(!v::heap_takes, "nvshmem_heap::copy takes an argument list upcxx::copy refuses");
    static_assert(!v::after_takes, "nvshmem_heap::copy_after takes an argument list upcxx::copy refuses");
    return true;
}

// ---- the table ----------------------------------------------------------------------------------
struct pod {
    double x;
    int y;
};
struct noop {
    void operator()() const {}
};
struct take_int {
    void operator()(int) const {}
};

template <class... T>
struct list {};

template <class T>
using gp_h = global_ptr<T>;
template <class T>
using gp_d = global_ptr<T, memory_kind::cuda_device>;
template <class T>
using gp_a = global_ptr<T, memory_kind::any>;

// (source, destination) pairs for element type T.
template <class T>
using pointer_pairs = list<
    // global -> global: every kind, const and non-const source, rvalue / lvalue / const lvalue
    std::pair<gp_h<T>, gp_h<T>>, std::pair<gp_h<T>, gp_d<T>>, std::pair<gp_h<T>, gp_a<T>>,  //
    std::pair<gp_d<T>, gp_h<T>>, std::pair<gp_d<T>, gp_d<T>>, std::pair<gp_d<T>, gp_a<T>>,  //
    std::pair<gp_a<T>, gp_h<T>>, std::pair<gp_a<T>, gp_d<T>>, std::pair<gp_a<T>, gp_a<T>>,  //
    std::pair<gp_d<const T>, gp_d<T>>, std::pair<gp_a<const T>, gp_d<T>>, std::pair<gp_h<const T>, gp_a<T>>,
    std::pair<gp_d<T> &, gp_d<T> &>, std::pair<const gp_d<T> &, const gp_d<T> &>, std::pair<const gp_a<T> &, gp_h<T> &>,
    // raw private host memory -> global
    std::pair<T *, gp_h<T>>, std::pair<T *, gp_d<T>>, std::pair<T *, gp_a<T>>,  //
    std::pair<const T *, gp_h<T>>, std::pair<const T *, gp_d<T>>, std::pair<const T *, gp_a<T>>,
    std::pair<T *const &, const gp_d<T> &>,
    // global -> raw private host memory
    std::pair<gp_h<T>, T *>, std::pair<gp_d<T>, T *>, std::pair<gp_a<T>, T *>,  //
    std::pair<gp_d<const T>, T *>, std::pair<gp_a<const T>, T *>, std::pair<const gp_d<T> &, T *&>>;

// Completion lists.
using persona_ref = upcxx::persona &;
using promise_ref = upcxx::promise<> &;
using op_future = decltype(operation_cx::as_future());
using op_promise = decltype(operation_cx::as_promise(std::declval<promise_ref>()));
using op_lpc = decltype(operation_cx::as_lpc(std::declval<persona_ref>(), noop{}));
using src_future = decltype(source_cx::as_future());
using src_promise = decltype(source_cx::as_promise(std::declval<promise_ref>()));
using src_lpc = decltype(source_cx::as_lpc(std::declval<persona_ref>(), noop{}));
using src_blocking = decltype(source_cx::as_blocking());
using src_buffered = decltype(source_cx::as_buffered());
using rem_rpc = decltype(remote_cx::as_rpc(noop{}));
using rem_rpc_arg = decltype(remote_cx::as_rpc(take_int{}, 1));
template <class A, class B>
using bar = decltype(std::declval<A>() | std::declval<B>());
using op_src = bar<op_future, src_future>;
using src_op = bar<src_future, op_future>;
using op_src_rem = bar<op_src, rem_rpc>;
using rem_op = bar<rem_rpc_arg, op_future>;
using prom_lpc = bar<op_promise, src_lpc>;
using lpc_prom_rem = bar<bar<op_lpc, src_promise>, rem_rpc>;
using op_op = bar<op_future, op_promise>;
using blocking_op = bar<src_blocking, op_future>;
using buffered_op_rem = bar<bar<src_buffered, op_promise>, rem_rpc>;
#if SIG_EAGER
using op_eager = decltype(operation_cx::as_eager_future());
using op_defer = decltype(operation_cx::as_defer_future());
using op_eager_promise = decltype(operation_cx::as_eager_promise(std::declval<promise_ref>()));
using op_defer_promise = decltype(operation_cx::as_defer_promise(std::declval<promise_ref>()));
using src_eager = decltype(source_cx::as_eager_future());
using src_defer = decltype(source_cx::as_defer_future());
using src_eager_promise = decltype(source_cx::as_eager_promise(std::declval<promise_ref>()));
using src_defer_promise = decltype(source_cx::as_defer_promise(std::declval<promise_ref>()));
using eager_defer = bar<op_eager, src_defer>;
using defer_eager_rem = bar<bar<op_defer, src_eager>, rem_rpc>;
using eager_promises = bar<op_eager_promise, src_defer_promise>;
using defer_promises = bar<op_defer_promise, src_eager_promise>;
#endif

using completion_lists =
    list<op_future, op_promise, op_lpc, rem_rpc, rem_rpc_arg,  //
         op_src, src_op, op_src_rem, rem_op, prom_lpc, lpc_prom_rem, op_op, blocking_op, buffered_op_rem,
         src_future,  // accepted by the signature (UPC++ asserts at run time that op or remote is asked)
         op_src &, const op_src &, const op_future &, op_promise &, const rem_rpc &
#if SIG_EAGER
         ,
         op_eager, op_defer, op_eager_promise, op_defer_promise, src_eager, src_defer, src_eager_promise,
         src_defer_promise, eager_defer, defer_eager_rem, eager_promises, defer_promises, const eager_defer &
#endif
         >;

// Fast mode: the fast path reads upcxx::copy's completion machinery for every completion list.
template <class C>
constexpr bool notified_fast() {
    static_assert(!nvshmem_heap::fast_copies() || upcxx::extra::detail::internals::cx_known<C>,
                  "fast mode: upcxx_internals.hpp does not read upcxx::copy's machinery for these completions");
    return true;
}
template <class... C>
constexpr bool all_notified_fast(list<C...>) {
    return (notified_fast<C>() && ...);
}
static_assert(all_notified_fast(completion_lists{}), "");

// Every pair with every count type and no completions; every pair x every completion list.
template <class P, class... C>
constexpr bool pair_with_all(list<C...>) {
    using S = typename P::first_type;
    using D = typename P::second_type;
    return accepted<S, D, std::size_t>() && accepted<S, D, int>() && accepted<S, D, const unsigned long long &>() &&
           (accepted<S, D, std::size_t, C>() && ...);
}
template <class... P, class CL>
constexpr bool all_pairs(list<P...>, CL cl) {
    return (pair_with_all<P>(cl) && ...);
}
static_assert(all_pairs(pointer_pairs<int>{}, completion_lists{}), "");
static_assert(all_pairs(pointer_pairs<pod>{}, list<op_src_rem, prom_lpc>{}), "");

// The return types themselves (what users write against).
static_assert(std::is_same<heap_copy_t<gp_d<int>, gp_d<int>, std::size_t>, upcxx::future<>>::value,
              "default: future<>");
static_assert(std::is_same<heap_copy_t<gp_d<int>, gp_d<int>, std::size_t, op_promise>, void>::value,
              "as_promise only: void");
static_assert(std::is_same<heap_copy_t<gp_d<int>, gp_d<int>, std::size_t, op_src>,
                           std::tuple<upcxx::future<>, upcxx::future<>>>::value,
              "op|src: a tuple of two futures");
static_assert(std::is_same<heap_copy_t<int *, gp_d<int>, std::size_t, rem_rpc>, void>::value, "as_rpc only: void");

// ---- what upcxx::copy refuses -------------------------------------------------------------------
static_assert(refused<gp_d<int>, gp_d<long>, std::size_t>(), "element types differ");
static_assert(refused<gp_d<int>, gp_d<pod>, std::size_t>(), "element types differ");
static_assert(refused<int *, int *, std::size_t>(), "two raw pointers: no global end");
static_assert(refused<const int *, int *, std::size_t>(), "two raw pointers");
static_assert(refused<gp_d<int>, const int *, std::size_t>(), "a const raw destination");
static_assert(refused<gp_d<int>, long *, std::size_t>(), "element types differ (raw)");
static_assert(refused<gp_d<int>, gp_d<int>>(), "no count");
static_assert(refused<gp_d<int>>(), "one argument");
static_assert(refused<>(), "no argument");
static_assert(refused<gp_d<int>, gp_d<int>, const char *>(), "a count that is not a number");
static_assert(refused<gp_d<int>, gp_d<int>, std::size_t, op_future, op_future>(), "two completion arguments");
static_assert(refused<gp_d<int>, gp_d<int>, std::size_t, int, op_future>(), "five arguments");
static_assert(refused<gp_d<const int>, int *, std::size_t, op_future, int>(), "five arguments");
static_assert(refused<int, gp_d<int>, std::size_t>(), "an integer as the source");

// ---- real calls: the bodies compile -------------------------------------------------------------
template <class T>
struct ptrs {
    gp_h<T> h;
    gp_d<T> d;
    gp_a<T> a;
    gp_h<const T> hc;
    gp_d<const T> dc;
    gp_a<const T> ac;
    T *raw;
    const T *craw;
};

template <class T>
void every_pointer_combination(nvshmem_heap &heap, ptrs<T> &p, std::size_t n) {
    upcxx::future<> f;
    f = heap.copy(p.h, p.h, n);
    f = heap.copy(p.h, p.d, n);
    f = heap.copy(p.h, p.a, n);
    f = heap.copy(p.d, p.h, n);
    f = heap.copy(p.d, p.d, n);
    f = heap.copy(p.d, p.a, n);
    f = heap.copy(p.a, p.h, n);
    f = heap.copy(p.a, p.d, n);
    f = heap.copy(p.a, p.a, n);
    f = heap.copy(p.hc, p.d, n);
    f = heap.copy(p.dc, p.d, n);
    f = heap.copy(p.ac, p.a, n);
    f = heap.copy(p.raw, p.h, n);
    f = heap.copy(p.raw, p.d, n);
    f = heap.copy(p.raw, p.a, n);
    f = heap.copy(p.craw, p.d, n);
    f = heap.copy(p.craw, p.a, n);
    f = heap.copy(p.h, p.raw, n);
    f = heap.copy(p.d, p.raw, n);
    f = heap.copy(p.a, p.raw, n);
    f = heap.copy(p.dc, p.raw, n);
    f = heap.copy(p.ac, p.raw, n);
    f = heap.copy(std::as_const(p.d), std::as_const(p.d), 3);  // const lvalues, an int count
    (void)f;
}

void rpc_target();
void rpc_target_int(int);

template <class S, class D>
void every_completion(nvshmem_heap &heap, S src, D dst, std::size_t n) {
    upcxx::promise<> pr;
    upcxx::persona &per = upcxx::current_persona();
    upcxx::future<> f, g;
    f = heap.copy(src, dst, n, operation_cx::as_future());
    heap.copy(src, dst, n, operation_cx::as_promise(pr));
    heap.copy(src, dst, n, operation_cx::as_lpc(per, noop{}));
    std::tie(f, g) = heap.copy(src, dst, n, operation_cx::as_future() | source_cx::as_future());
    std::tie(g, f) = heap.copy(src, dst, n, source_cx::as_future() | operation_cx::as_future());
    heap.copy(src, dst, n, operation_cx::as_promise(pr) | source_cx::as_lpc(per, noop{}));
    f = heap.copy(src, dst, n, source_cx::as_promise(pr) | operation_cx::as_future());
    f = heap.copy(src, dst, n, source_cx::as_blocking() | operation_cx::as_future());
    f = heap.copy(src, dst, n, source_cx::as_buffered() | operation_cx::as_future());
    const auto cx = operation_cx::as_future() | source_cx::as_future();
    std::tie(f, g) = heap.copy(src, dst, n, cx);  // a const lvalue
    auto cx2 = operation_cx::as_future();
    f = heap.copy(src, dst, n, cx2);  // an lvalue
#if SIG_REMOTE_CX_BODY
    heap.copy(src, dst, n, remote_cx::as_rpc(rpc_target));
    heap.copy(src, dst, n, remote_cx::as_rpc(rpc_target_int, 7));
    std::tie(f, g) =
        heap.copy(src, dst, n, operation_cx::as_future() | source_cx::as_future() | remote_cx::as_rpc(rpc_target));
    heap.copy(src, dst, n, remote_cx::as_rpc(rpc_target) | operation_cx::as_promise(pr));
#endif
#if SIG_EAGER
    f = heap.copy(src, dst, n, operation_cx::as_eager_future());
    f = heap.copy(src, dst, n, operation_cx::as_defer_future());
    heap.copy(src, dst, n, operation_cx::as_eager_promise(pr) | source_cx::as_defer_promise(pr));
    heap.copy(src, dst, n, operation_cx::as_defer_promise(pr) | source_cx::as_eager_promise(pr));
    std::tie(f, g) = heap.copy(src, dst, n, operation_cx::as_defer_future() | source_cx::as_eager_future());
#endif
    (void)f;
    (void)g;
}

template <class S, class D>
void copy_after_calls(nvshmem_heap &heap, cudaStream_t s, S src, D dst, std::size_t n) {
    upcxx::promise<> pr;
    upcxx::future<> f, g;
    f = heap.copy_after(s, src, dst, n);
    std::tie(f, g) = heap.copy_after(s, src, dst, n, operation_cx::as_future() | source_cx::as_future());
    heap.copy_after(s, src, dst, n, operation_cx::as_promise(pr));
#if SIG_REMOTE_CX_BODY
    f = heap.copy_after(s, src, dst, n, operation_cx::as_future() | remote_cx::as_rpc(rpc_target));
#endif
    (void)f;
    (void)g;
}

}  // namespace sig

// Compiled, never called.
void uxn_copy_signatures_instantiate(sig::nvshmem_heap &heap, cudaStream_t s, sig::ptrs<int> &pi, std::size_t n) {
    sig::every_pointer_combination(heap, pi, n);
    sig::every_completion(heap, pi.d, pi.d, n);
    sig::every_completion(heap, pi.a, pi.raw, n);
    sig::every_completion(heap, pi.craw, pi.a, n);
    sig::copy_after_calls(heap, s, pi.d, pi.d, n);
    sig::copy_after_calls(heap, s, pi.raw, pi.a, n);
    sig::copy_after_calls(heap, s, pi.a, pi.raw, n);
}
