// copy_semantics_test's shared state and helpers (every file of semantics/ includes it): the ranks,
// the heap under test, the path counters, bounded waits, the RPC that checks bytes at a copy's
// target, and group(), which runs one check group.
#ifndef UXN_SEMANTICS_COMMON_HPP
#define UXN_SEMANTICS_COMMON_HPP

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "../copy_test_util.hpp"

using copy_test::check;
using copy_test::count_not;
using copy_test::count_wrong;
using copy_test::fill;
using copy_test::heap_error;
using copy_test::ready;
using copy_test::skip;
using copy_test::wait_for;
using upcxx::extra::nvshmem_heap;
using dptr = upcxx::global_ptr<unsigned char, upcxx::memory_kind::cuda_device>;
using aptr = upcxx::global_ptr<unsigned char, upcxx::memory_kind::any>;
using hptr = upcxx::global_ptr<unsigned char>;
using upcxx::operation_cx;
using upcxx::remote_cx;
using upcxx::source_cx;

#if UPCXX_VERSION > 20201000L
#define COPY_HAS_REMOTE_CX 1  // upcxx::copy has no remote_cx in 2020.10 (its body does not compile)
#else
#define COPY_HAS_REMOTE_CX 0
#endif
#if UPCXX_VERSION >= 20230300L
#define COPY_HAS_EAGER 1  // as_eager_* / as_defer_*, eager by default
#else
#define COPY_HAS_EAGER 0  // every notification is delivered in progress
#endif
#if UPCXX_VERSION >= 20220300L
#define HAS_GPU_ALLOCATOR 1
#else
#define HAS_GPU_ALLOCATOR 0
#endif

static const std::size_t MiB = std::size_t(1) << 20;
static const std::size_t big = 64 * MiB;  // an asynchronous fast copy
static const std::size_t small = 4096;    // one that may complete inside copy()
static const std::size_t cap = 128 * MiB + 4096;

static nvshmem_heap *g_heap = nullptr;
static int me, nranks, next, prev, gpu;
static bool mapped = false;  // NVSHMEM maps the next PE's heap here: fast copies between the PEs
static bool forced = false;  // UPCXX_EXTRA_NVSHMEM_COPY=upcxx or the public-API mode: every copy falls back

// The CUDA stand-in's failure control `name` (standin_control.h): uxn_standin_fail_next_copies(n),
// the next n asynchronous copies enqueued in this process (a batch kernel's launch is one, and fails
// all of its copies) move no bytes and fail asynchronously (reported by an event or a synchronize, or
// as a context fault by cuStreamQuery after a stream write); uxn_standin_fail_next_launches(n), the
// next n batch kernel launches are refused at the call. nullptr on a real GPU, where a copy cannot be
// failed safely: the checks that need it are skipped there, saying so. The library has no switch of
// its own for this (nothing test-only ships, issue 52).
using standin_fail_fn = int (*)(int);
static standin_fail_fn standin_fail_control(const char *name) {
    return reinterpret_cast<standin_fail_fn>(dlsym(RTLD_DEFAULT, name));
}
// uxn_standin_fail_next_copies, or nullptr once group `group` said it is skipped (a real GPU);
// `what` names the copy it fails ("a copy", "a copy_on_stream").
static standin_fail_fn standin_fail_copies(const char *group, const char *what) {
    const standin_fail_fn f = standin_fail_control("uxn_standin_fail_next_copies");
    if (!f) {
        const std::string why = std::string("runs on the CUDA stand-in only: it fails ") + what +
                                " asynchronously through the stand-in's uxn_standin_fail_next_copies, which a GPU "
                                "cannot do safely";
        skip(group, why.c_str());
    }
    return f;
}

static const char *sz(std::size_t n) { return n >= MiB ? "64 MiB" : "4 KiB"; }

// The path the copies since c0 took: `fast` fast copies and `fallback` fallback ones.
static bool path_is(const char *name, const nvshmem_heap::copy_counts &c0, std::size_t fast, std::size_t fallback,
                    const char *what) {
    const auto c1 = g_heap->copies();
    if (forced) {
        fallback += fast;
        fast = 0;
    }
    return check(name, c1.fast - c0.fast == fast && c1.fallback - c0.fallback == fallback,
                 "%s: %zu fast + %zu fallback copies (expected %zu + %zu)", what, c1.fast - c0.fast,
                 c1.fallback - c0.fallback, fast, fallback);
}

template <class F>
static void expect_error(const char *name, upcxx_extra_nvshmem_status_t want, const char *needle, const char *what,
                         F f) {
    try {
        f();
        check(name, false, "%s: no exception", what);
    } catch (const heap_error &e) {
        check(name, e.status() == want && std::strstr(e.what(), needle),
              "%s -> status %d (want %d), message naming '%s': %s", what, static_cast<int>(e.status()),
              static_cast<int>(want), needle, e.what());
    } catch (const std::exception &e) {
        check(name, false, "%s: another exception: %s", what, e.what());
    }
}

// wait_for with a FAIL line.
template <class Fut>
static bool waited(const char *name, const Fut &f, const char *what, double seconds = 60) {
    if (wait_for(f, seconds)) return true;
    check(name, false, "%s: not complete after %.0f s", what, seconds);
    return false;
}

static void barrier() { upcxx::barrier(); }

// Rank-symmetric setup for a copy `mine -> next's dst`: my src := pattern(me, salt), my dst := 0.
static void prepare(unsigned char *src, unsigned char *dst, std::size_t n, int salt) {
    fill(src, n, me, salt);
    cudaMemset(dst, 0, n);
    cudaDeviceSynchronize();
    barrier();
}

static void CUDART_CB sleep_host_fn(void *ms) { usleep(static_cast<useconds_t>(*static_cast<int *>(ms)) * 1000u); }

// A stream's slow work without a clock: gate_host_fn, queued on a stream, returns only once the
// test calls gate_open() (or after 10 s: an implementation that waits for the stream on the host
// then fails, late, instead of hanging), and gate_passed() says whether it has returned. "The call
// returned before the stream's earlier work ran" is then !gate_passed() at return, however late
// anything is scheduled. Close it (gate_close()) before queueing it; open it before waiting on
// the stream.
static std::atomic<bool> g_gate_open{true}, g_gate_passed{true};
static void gate_close() {
    g_gate_open = false;
    g_gate_passed = false;
}
static void gate_open() { g_gate_open = true; }
static bool gate_passed() { return g_gate_passed.load(); }
static void CUDART_CB gate_host_fn(void *) {
    const double end = copy_test::now() + 10;
    while (!g_gate_open.load() && copy_test::now() < end) usleep(500);
    g_gate_passed = true;
}

static std::atomic<long> g_rpc_replies{0}, g_rpc_wrong{0}, g_rpc_misplaced{0};
#if COPY_HAS_REMOTE_CX
// At the target: are the bytes there, and is this the master persona in progress?
static void rpc_check_at_target(dptr dst, std::size_t n, int initiator, int salt) {
    const bool placed = &upcxx::current_persona() == &upcxx::master_persona() && dst.where() == upcxx::rank_me();
    long wrong = static_cast<long>(n);
    try {
        unsigned char *local = g_heap->from_global_ptr(dst).first;
        wrong = count_wrong(local, n, initiator, salt);
    } catch (...) {
    }
    upcxx::rpc_ff(
        initiator,
        [](long w, bool p) {
            g_rpc_wrong += w;
            g_rpc_misplaced += !p;
            g_rpc_replies++;
        },
        wrong, placed);
}
#endif

// One check group. An exception out of it (heap.copy throwing where it must not) is a FAIL line
// naming the group, then an abort: the other ranks may be waiting in a collective of the group,
// and UPC++ / GASNet end the whole job on the abort instead of leaving them to the watchdog.
// UXN_SEMANTICS_GROUPS=F22,F27 (a debugging aid, never set by the suite) runs only those groups
// (and the shared heap's destroy()).
template <class F>
static void group(const char *name, F f) {
    const char *only = std::getenv("UXN_SEMANTICS_GROUPS");
    if (only && std::strcmp(name, "destroy") != 0 &&
        ("," + std::string(only) + ",").find("," + std::string(name) + ",") == std::string::npos)
        return;
    try {
        f();
    } catch (const std::exception &e) {
        check(name, false, "an exception left the check group: %s", e.what());
        std::fflush(stdout);
        std::abort();
    }
}

#endif  // UXN_SEMANTICS_COMMON_HPP
