// multinode_test: nvshmem_heap across nodes. UPC++'s udp conduit with processes as separate nodes
// (GASNET_SPAWNFN=L GASNET_SUPERNODE_MAXSIZE=k: local_team() has k ranks), over the CUDA + NVSHMEM
// stand-in with the same node boundaries (UXN_STANDIN_NODE_SIZE=k: NVSHMEM maps only the heaps of
// its own node's PEs, nvshmem_ptr is NULL for the others, and NVSHMEM's peer base table lists
// every PE, as a multi-node NVSHMEM's does). 2 ranks or more; every rank checks, rank 0 sums.
// NVSHMEM's nodes may be larger than UPC++'s (a multi-node NVLink domain): UXN_STANDIN_NODE_SIZE,
// or on a GPU host UXN_MN_NVSHMEM_NODE_SIZE, says how many PEs NVSHMEM maps together.
//
//   M1 the nodes: local_team() is the ranks of my node (rank / k), as the stand-in's nodes are
//   M2 upcxx::extra::nvshmem_init() over UPC++ across nodes: PE == rank; nvshmem_ptr non-NULL
//      exactly for the PEs of my node
//   M3 NVSHMEM's peer base table read by the library (set_peers_from_nvshmem): every PE's base as
//      that PE has it (exchanged over UPC++), local_ptr non-NULL exactly on my node; then the heap:
//      to_global_ptr / from_global_ptr round trips for every PE (where() == PE)
//   M4 heap.copy between my heap and every other PE's, both directions, every completion form the
//      release has (remote_cx::as_rpc from 2021.3, as_defer / as_eager from 2023.3): the fast path
//      exactly on my node, upcxx::copy (counted fallback) across nodes; each completion once, on
//      the right persona; as_rpc reads the bytes at the target; bytes right on both sides. Also a
//      private host buffer and a peer's UPC++ host memory at one end (fast only on my node), and
//      third-party copies between two other PEs' heaps (fast only when both are on my node)
//   M5 a mixed flood: 240 copies per rank, on and off node, puts and gets, 1 B .. 8 KiB, all in
//      flight at once: paths counted, bytes right
//   M6 growth (CUDA VMM): nvshmem_malloc past the mapped memory; before update() the new memory is
//      refused naming update(); heap.update() on every node; then copies to and from every PE's
//      new memory, paths and bytes right
//   M7 heap.copy_on_stream with every PE (fast on this NVSHMEM node, upcxx::copy elsewhere: the
//      stream waits on the GPU for its completion), a read of a get's destination queued on the
//      stream after it, a put whose source the stream writes just before it; heap.after waits.
//   M8 destroy() with off-node copies in flight (512 KiB puts and gets, not waited for): destroy
//      returns with every one complete, bytes right at both ends; also with a halo exchange on one
//      stream in flight (off node, then a fast copy behind its stream ticket)
//
// Other modes (argv[1]):
//   kill=init|update|destroy|flood   the last rank (on the last node) dies by SIGKILL while the
//                                    others are in nvshmem_init(), heap.update(), heap.destroy()
//                                    with copies to it in flight, or a flood of copies; each other
//                                    rank says "FAULT rank R: in WHERE" first. Never ends by itself:
//                                    the job must be ended by GASNet (fault.cmake checks it).
//   kill=bootstrap                   the same, the last rank dying inside NVSHMEM's initialisation
//                                    (the stand-in's UXN_STANDIN_KILL_INIT_PE), the others waiting
//                                    in NVSHMEM's bootstrap, outside UPC++'s progress
//   init_fails                       UXN_STANDIN_FAIL_INIT_PE=p: p's NVSHMEM fails to initialise;
//                                    every rank must throw the same collective error naming p.
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <unistd.h>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "copy_test_util.hpp"

#if UPCXX_VERSION > 20201000L
#define COPY_HAS_REMOTE_CX 1  // upcxx::copy has no remote_cx in 2020.10
#else
#define COPY_HAS_REMOTE_CX 0
#endif
// A raw host T* with another rank's device memory: upcxx::copy crashes for it before 2021.3.0, so
// heap.copy refuses that fallback there (errc upcxx_unsupported) and takes only the fast path.
#if UPCXX_VERSION < 20210300L
#define RAW_FALLBACK_REFUSED 1
#else
#define RAW_FALLBACK_REFUSED 0
#endif
#if UPCXX_VERSION >= 20230300L
#define COPY_HAS_EAGER 1
#else
#define COPY_HAS_EAGER 0
#endif

using namespace copy_test;
using upcxx::operation_cx;
using upcxx::source_cx;
#if COPY_HAS_REMOTE_CX
using upcxx::remote_cx;
#endif
using upcxx::extra::nvshmem_heap;
using byte_t = unsigned char;
using dptr = upcxx::global_ptr<byte_t, upcxx::memory_kind::cuda_device>;

namespace {

int me = 0, n = 1;
int k = 1;                // ranks per UPC++ node (GASNET_SUPERNODE_MAXSIZE: local_team())
int kn = 1;               // PEs per NVSHMEM node (UXN_STANDIN_NODE_SIZE, default k): NVSHMEM maps these peers
byte_t *g_sym = nullptr;  // this PE's block of the symmetric heap
nvshmem_heap *g_heap = nullptr;
long rpc_arrived = 0;  // remote completions that ran here
long rpc_wrong = 0;    // ... that found the wrong bytes, or ran off the master persona
long lpc_wrong = 0;    // as_lpc callbacks that ran elsewhere than on the initiating persona

bool same_node(int a, int b) { return a / kn == b / kn; }  // NVSHMEM maps b's heap in a
bool same_upcxx_node(int a, int b) { return a / k == b / k; }

// ---- the layout of the block (the same offsets on every PE) ---------------------------------------
constexpr std::size_t kSlot = 8192;  // M4: one copy's slot (at most kSlot - 64 bytes copied)
enum form : int {
    f_default,
    f_op_future,
    f_promise,
    f_lpc,
    f_source_op,
#if COPY_HAS_EAGER
    f_defer,
    f_eager,
#endif
#if COPY_HAS_REMOTE_CX
    f_op_rpc,
    f_rpc,
#endif
    n_forms
};
const char *form_name(int f) {
    static const char *names[] = {"default",
                                  "operation_cx::as_future",
                                  "as_promise",
                                  "as_lpc",
                                  "source_cx::as_future|operation_cx::as_future",
#if COPY_HAS_EAGER
                                  "as_defer_future",
                                  "as_eager_future|source as_eager_future",
#endif
#if COPY_HAS_REMOTE_CX
                                  "as_future|remote_cx::as_rpc",
                                  "remote_cx::as_rpc alone",
#endif
                                  "?"};
    return names[f];
}
bool has_rpc(int f) {
#if COPY_HAS_REMOTE_CX
    return f == f_op_rpc || f == f_rpc;
#else
    (void)f;
    return false;
#endif
}
// M4 slot of (initiator i, peer p, form f, direction d: 0 put, 1 get).
std::size_t pair_off(int i, int p, int f, int d) {
    return ((std::size_t(i) * std::size_t(n) + std::size_t(p)) * n_forms + std::size_t(f)) * 2 * kSlot +
           std::size_t(d) * kSlot;
}
std::size_t pair_bytes(int i, int p, int f, int d) {
    return 1 + (std::size_t(i * 131 + p * 17 + f * 389 + d * 1000) % (kSlot - 64));
}
int pair_salt(int i, int p, int f, int d) { return ((i * n + p) * n_forms + f) * 2 + d; }
std::size_t pairs_end() { return pair_off(n - 1, n - 1, n_forms - 1, 1) + kSlot; }
// M4 host ends: 2 slots per (initiator, peer) after the pairs.
std::size_t host_off(int i, int p, int d) { return pairs_end() + ((std::size_t(i) * n + p) * 2 + d) * kSlot; }
std::size_t host_end() { return host_off(n - 1, n - 1, 1) + kSlot; }
// M5 the flood.
constexpr int kFlood = 240;
constexpr std::size_t kFloodSlot = 8192 + 512;
int flood_peer(int i, int j) { return (i + 1 + j % (n - 1)) % n; }
int flood_dir(int i, int j) { return ((j / (n - 1)) + i) % 2; }
std::size_t flood_bytes(int i, int j) { return 1 + std::size_t(j * 7919 + i * 104729) % 8192; }
std::size_t flood_off(int i, int j) { return host_end() + (std::size_t(i) * kFlood + std::size_t(j)) * kFloodSlot; }
int flood_salt(int i, int j) { return 3000 + i * kFlood + j; }
std::size_t flood_end() { return flood_off(n - 1, kFlood - 1) + kFloodSlot; }
// M8 destroy with copies in flight: (initiator, peer, direction).
constexpr std::size_t kBig = 512 * 1024;
std::size_t big_off(int i, int p, int d) { return flood_end() + ((std::size_t(i) * n + p) * 2 + d) * kBig; }
int big_salt(int i, int p, int d) { return 9000 + (i * n + p) * 2 + d; }
// M4 third-party: initiator i copies PE p's heap -> PE q's heap (i, p, q distinct).
constexpr std::size_t kThird = 2048;
std::size_t third_off(int i, int p, int q) {
    return big_off(n - 1, n - 1, 1) + kBig + ((std::size_t(i) * n + p) * n + q) * kThird;
}
std::size_t third_bytes(int i, int p, int q) { return 1 + std::size_t((i + p + q) * 97 + q) % (kThird - 16); }
int third_salt(int i, int p, int q) { return 11000 + (i * n + p) * n + q; }
// M7: per (initiator i, peer p) four slots: [0] p's get source, [1] i's get destination, [2] the
// put's destination on p, [3] the put's source on i (written by i's stream before the copy).
std::size_t stream_off(int i, int p, int slot) {
    return third_off(n - 1, n - 1, n - 1) + kThird + ((std::size_t(i) * n + p) * 4 + std::size_t(slot)) * kSlot;
}
std::size_t block_bytes() { return stream_off(n - 1, n - 1, 3) + kSlot; }
#if COPY_HAS_REMOTE_CX
constexpr int n_plain_forms = f_op_rpc;  // the forms without a remote completion
#else
constexpr int n_plain_forms = n_forms;
#endif

dptr at(int pe, std::size_t off) { return g_heap->to_global_ptr(g_sym + off, pe); }

// ---- one copy, by completion form ----------------------------------------------------------------
// The future is ready when every notification asked for has come (remote-only: at once; the
// target counts its arrivals). `who`/`salt`: the bytes the destination must hold (checked by as_rpc).
template <class S, class D>
upcxx::future<> issue(S src, D dst, std::size_t len, int f, int dst_rank, std::size_t dst_off, int who, int salt) {
    (void)dst_rank;
    (void)dst_off;
    (void)who;
    (void)salt;
    nvshmem_heap &h = *g_heap;
    switch (f) {
        case f_default:
            return h.copy(src, dst, len);
        case f_op_future:
            return h.copy(src, dst, len, operation_cx::as_future());
        case f_promise: {
            upcxx::promise<> p;
            h.copy(src, dst, len, operation_cx::as_promise(p));
            return p.finalize();
        }
        case f_lpc: {
            auto p = std::make_shared<upcxx::promise<>>();
            p->require_anonymous(1);
            upcxx::persona *init = &upcxx::current_persona();
            h.copy(src, dst, len, operation_cx::as_lpc(*init, [p, init] {
                       if (&upcxx::current_persona() != init) lpc_wrong++;
                       p->fulfill_anonymous(1);
                   }));
            return p->finalize();
        }
        case f_source_op: {
            upcxx::future<> s, o;
            std::tie(s, o) = h.copy(src, dst, len, source_cx::as_future() | operation_cx::as_future());
            return upcxx::when_all(s, o);
        }
#if COPY_HAS_EAGER
        case f_defer: {
            upcxx::future<> o = h.copy(src, dst, len, operation_cx::as_defer_future());
            if (ready(o)) rpc_wrong++;  // a deferred notification is never ready at return
            return o;
        }
        case f_eager: {
            upcxx::future<> o, s;
            std::tie(o, s) = h.copy(src, dst, len, operation_cx::as_eager_future() | source_cx::as_eager_future());
            return upcxx::when_all(o, s);
        }
#endif
#if COPY_HAS_REMOTE_CX
        case f_op_rpc:
        case f_rpc: {
            auto rpc = [](std::size_t off, std::size_t bytes, int w, int s) {
                rpc_arrived++;
                if (!upcxx::master_persona().active_with_caller() || count_wrong(g_sym + off, bytes, w, s) != 0)
                    rpc_wrong++;
            };
            if (f == f_rpc) {
                h.copy(src, dst, len, remote_cx::as_rpc(rpc, dst_off, len, who, salt));
                return upcxx::make_future();
            }
            return h.copy(src, dst, len, operation_cx::as_future() | remote_cx::as_rpc(rpc, dst_off, len, who, salt));
        }
#endif
        default:
            return upcxx::make_future();
    }
}

// The path of one copy: `fast` exactly when expected, else one fallback.
bool path_right(const nvshmem_heap::copy_counts &before, bool fast) {
    const nvshmem_heap::copy_counts a = g_heap->copies();
    return fast ? (a.fast == before.fast + 1 && a.fallback == before.fallback)
                : (a.fallback == before.fallback + 1 && a.fast == before.fast);
}

template <class T>
std::vector<T> gather_all(T mine) {
    upcxx::dist_object<T> d(mine);
    std::vector<T> all(static_cast<std::size_t>(n));
    for (int r = 0; r < n; r++) all[std::size_t(r)] = d.fetch(r).wait();
    upcxx::barrier();  // d lives until every rank fetched
    return all;
}

// ---- M1 .. M3 ---------------------------------------------------------------------------------------
void check_nodes() {
    upcxx::team &lt = upcxx::local_team();
    bool ok = lt.rank_n() == k;
    for (int r = 0; r < lt.rank_n(); r++) ok = ok && same_upcxx_node(lt[r], me);
    check("M1.local_team", ok, "local_team() has %d ranks (want %d, the ranks of node %d)", lt.rank_n(), k, me / k);
}

void check_nvshmem() {
    check("M2.pe", nvshmem_my_pe() == me && nvshmem_n_pes() == n, "nvshmem_my_pe %d of %d (rank %d of %d)",
          nvshmem_my_pe(), nvshmem_n_pes(), me, n);
    int wrong = 0;
    for (int pe = 0; pe < n; pe++) wrong += (nvshmem_ptr(g_sym, pe) != nullptr) != same_node(pe, me);
    check("M2.nvshmem_ptr", wrong == 0, "nvshmem_ptr non-NULL exactly for the %d PEs of NVSHMEM node %d (%d wrong)", kn,
          me / kn, wrong);
}

void check_remote_table() {
    const std::vector<std::uintptr_t> bases = gather_all(reinterpret_cast<std::uintptr_t>(g_sym));
    upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_set_peers_from_nvshmem(nullptr);
    check(
        "M3.set_peers_from_nvshmem", s == UPCXX_EXTRA_NVSHMEM_STATUS_OK, "status %d: %s", int(s),
        s == UPCXX_EXTRA_NVSHMEM_STATUS_OK ? "NVSHMEM's peer_heap_base_remote read" : upcxx_extra_nvshmem_last_error());
    int wrong_base = 0, wrong_local = 0;
    for (int pe = 0; pe < n; pe++) {
        upcxx_extra_nvshmem_gptr_t g{};
        if (upcxx_extra_nvshmem_to_global_ptr(g_sym, pe, &g) != UPCXX_EXTRA_NVSHMEM_STATUS_OK || g.rank != pe ||
            reinterpret_cast<std::uintptr_t>(g.raw) != bases[std::size_t(pe)])
            wrong_base++;
        void *local = nullptr;
        if (upcxx_extra_nvshmem_local_ptr(pe, reinterpret_cast<void *>(bases[std::size_t(pe)]), 1, &local, nullptr,
                                          nullptr) != UPCXX_EXTRA_NVSHMEM_STATUS_OK ||
            (local != nullptr) != same_node(pe, me))
            wrong_local++;
    }
    check("M3.remote_bases", wrong_base == 0, "to_global_ptr from NVSHMEM's table: every PE's own address (%d wrong)",
          wrong_base);
    check("M3.local_ptr", wrong_local == 0, "local_ptr non-NULL exactly on NVSHMEM node %d (%d wrong)", me / kn,
          wrong_local);
}

void check_translation() {
    int wrong = 0;
    for (int pe = 0; pe < n; pe++)
        for (std::size_t off : {std::size_t(0), std::size_t(4097), block_bytes() - 1}) {
            dptr g = g_heap->to_global_ptr(g_sym + off, pe);
            std::pair<byte_t *, int> back = g_heap->from_global_ptr(g);
            if (g.where() != pe || back.first != g_sym + off || back.second != pe) wrong++;
        }
    wrong += g_heap->to_global_ptr(g_sym) != g_heap->to_global_ptr(g_sym, me);
    check("M3.translation", wrong == 0, "to_global_ptr / from_global_ptr for all %d PEs (%d wrong)", n, wrong);
}

// ---- M4 ---------------------------------------------------------------------------------------------
void fill_sources() {
    // Put sources (mine), get sources (for every initiator), the host-end get sources, flood, M8.
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        for (int f = 0; f < n_forms; f++) {
            fill(g_sym + pair_off(me, p, f, 0), pair_bytes(me, p, f, 0), me, pair_salt(me, p, f, 0));
            fill(g_sym + pair_off(p, me, f, 1), pair_bytes(p, me, f, 1), me, pair_salt(p, me, f, 1));
        }
        fill(g_sym + host_off(p, me, 1), kSlot, me, 2000 + p);
        fill(g_sym + big_off(me, p, 0), kBig, me, big_salt(me, p, 0));
        fill(g_sym + big_off(p, me, 1), kBig, me, big_salt(p, me, 1));
    }
    for (int i = 0; i < n; i++)
        for (int q = 0; q < n; q++)
            if (i != me && q != me && q != i)
                fill(g_sym + third_off(i, me, q), third_bytes(i, me, q), me, third_salt(i, me, q));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < kFlood; j++) {
            const int p = flood_peer(i, j), d = flood_dir(i, j);
            if ((d == 0 && i == me) || (d == 1 && p == me))
                fill(g_sym + flood_off(i, j), flood_bytes(i, j), me, flood_salt(i, j));
        }
}

void copy_pairs(upcxx::global_ptr<byte_t> my_host) {
    std::vector<upcxx::global_ptr<byte_t>> hosts = gather_all(my_host);
    upcxx::future<> all = upcxx::make_future();
    int wrong_path = 0, paths = 0;
    std::vector<std::vector<byte_t>> priv(std::size_t(n), host_pattern(kSlot, me, 1000 + me));
    std::vector<std::vector<byte_t>> got(std::size_t(n), std::vector<byte_t>(kSlot, 0));
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        const bool fast = same_node(p, me);
        for (int f = 0; f < n_forms; f++) {
            for (int d = 0; d < 2; d++) {
                const std::size_t off = pair_off(me, p, f, d), len = pair_bytes(me, p, f, d);
                const nvshmem_heap::copy_counts c = g_heap->copies();
                upcxx::future<> fut = d == 0
                                          ? issue(at(me, off), at(p, off), len, f, p, off, me, pair_salt(me, p, f, 0))
                                          : issue(at(p, off), at(me, off), len, f, me, off, p, pair_salt(me, p, f, 1));
                paths++;
                if (!path_right(c, fast)) {
                    wrong_path++;
                    check("M4.path", false, "%s %s PE %d, %s: fast %d, fallback %d (want %s)",
                          d ? "get from" : "put to", fast ? "same-node" : "off-node", p, form_name(f),
                          int(g_heap->copies().fast), int(g_heap->copies().fallback), fast ? "fast" : "fallback");
                }
                all = upcxx::when_all(all, fut);
            }
        }
        // Host ends: private memory -> PE p's heap, PE p's heap -> private memory; my heap -> PE p's
        // UPC++ host memory (local to me only on my node).
        nvshmem_heap::copy_counts c = g_heap->copies();
        if (RAW_FALLBACK_REFUSED && !fast) {
            int refused = 0;
            for (int d = 0; d < 2; d++) try {
                    if (d == 0)
                        (void)g_heap->copy(priv[std::size_t(p)].data(), at(p, host_off(me, p, 0)), kSlot);
                    else
                        (void)g_heap->copy(at(p, host_off(me, p, 1)), got[std::size_t(p)].data(), kSlot);
                } catch (const heap_error &e) {
                    refused += e.errc() == upcxx::extra::nvshmem_errc::upcxx_unsupported;
                }
            check("M4.raw_refused",
                  refused == 2 && g_heap->copies().fast == c.fast && g_heap->copies().fallback == c.fallback,
                  "a raw host T* with off-node PE %d's heap: refused (upcxx_unsupported), as upcxx::copy of UPC++ "
                  "%ld crashes for it",
                  p, long(UPCXX_VERSION));
        } else {
            all = upcxx::when_all(all, g_heap->copy(priv[std::size_t(p)].data(), at(p, host_off(me, p, 0)), kSlot));
            wrong_path += !path_right(c, fast);
            c = g_heap->copies();
            all = upcxx::when_all(all, g_heap->copy(at(p, host_off(me, p, 1)), got[std::size_t(p)].data(), kSlot));
            wrong_path += !path_right(c, fast);
            paths += 2;
        }
        c = g_heap->copies();
        all = upcxx::when_all(all, g_heap->copy(at(me, host_off(p, me, 1)), hosts[std::size_t(p)] + me * kSlot, kSlot));
        wrong_path += !path_right(c, same_upcxx_node(p, me));  // UPC++ host memory: local on my UPC++ node
        paths += 1;
    }
    // Third-party: from PE p's heap to PE q's, neither mine: fast only when NVSHMEM maps both here.
    int third = 0;
    for (int p = 0; p < n; p++)
        for (int q = 0; q < n; q++) {
            if (p == me || q == me || p == q) continue;
            const int f = (p + q) % n_plain_forms;
            const std::size_t off = third_off(me, p, q);
            const nvshmem_heap::copy_counts c = g_heap->copies();
            all = upcxx::when_all(
                all, issue(at(p, off), at(q, off), third_bytes(me, p, q), f, q, off, p, third_salt(me, p, q)));
            wrong_path += !path_right(c, same_node(p, me) && same_node(q, me));
            paths++;
            third++;
        }
    check("M4.paths", wrong_path == 0,
          "%d copies (%d third-party): fast exactly where NVSHMEM maps the ends (node %d of %d PEs; UPC++ host "
          "memory: UPC++ node %d), upcxx::copy (fallback) otherwise (%d wrong)",
          paths, third, me / kn, kn, me / k, wrong_path);
    check("M4.complete", wait_for(all, 120), "every copy's notifications came");
    // Remote completions: 2 forms x (puts to me from every other rank + my own gets).
    int want_rpc = 0;
    for (int f = 0; f < n_forms; f++) want_rpc += has_rpc(f) ? 2 * (n - 1) : 0;
    const bool rpcs_came = progress_until([&] { return rpc_arrived >= want_rpc; }, 120);
    check("M4.as_rpc", rpcs_came && rpc_arrived == want_rpc,
          "%ld of %d remote completions ran here, on the master persona with the bytes landed (%ld wrong)", rpc_arrived,
          want_rpc, rpc_wrong);
    check("M4.rpc_bytes", rpc_wrong == 0,
          "as_rpc found the bytes at the target; as_defer not ready at return (%ld wrong)", rpc_wrong);
    check("M4.as_lpc", lpc_wrong == 0, "as_lpc ran on the initiating persona (%ld wrong)", lpc_wrong);
    upcxx::barrier();
    long wrong = 0;
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        for (int f = 0; f < n_forms; f++) {
            wrong += count_wrong(g_sym + pair_off(p, me, f, 0), pair_bytes(p, me, f, 0), p, pair_salt(p, me, f, 0));
            wrong += count_wrong(g_sym + pair_off(me, p, f, 1), pair_bytes(me, p, f, 1), p, pair_salt(me, p, f, 1));
        }
        if (!RAW_FALLBACK_REFUSED || same_node(p, me)) {
            wrong += count_wrong(g_sym + host_off(p, me, 0), kSlot, p, 1000 + p);
            const std::vector<byte_t> want = host_pattern(kSlot, p, 2000 + me);
            wrong += std::memcmp(got[std::size_t(p)].data(), want.data(), kSlot) != 0 ? 1 : 0;
        }
        wrong += count_wrong(my_host.local() + p * kSlot, kSlot, p, 2000 + me);
        for (int i = 0; i < n; i++)  // third-party copies into me: initiator i, from PE p
            if (i != me && i != p)
                wrong += count_wrong(g_sym + third_off(i, p, me), third_bytes(i, p, me), p, third_salt(i, p, me));
    }
    check("M4.bytes", wrong == 0, "the bytes of every copy to and from me, on both ends (%ld wrong)", wrong);
}

// ---- M5 ---------------------------------------------------------------------------------------------
void flood() {
    const nvshmem_heap::copy_counts c0 = g_heap->copies();
    std::size_t want_fast = 0, want_fallback = 0;
    upcxx::promise<> prom;
    upcxx::future<> all = upcxx::make_future();
    for (int j = 0; j < kFlood; j++) {
        const int p = flood_peer(me, j), d = flood_dir(me, j);
        const std::size_t off = flood_off(me, j), len = flood_bytes(me, j);
        (same_node(p, me) ? want_fast : want_fallback)++;
        const dptr src = d == 0 ? at(me, off) : at(p, off), dst = d == 0 ? at(p, off) : at(me, off);
        if (j % 3 == 0)
            g_heap->copy(src, dst, len, operation_cx::as_promise(prom));
        else
            all = upcxx::when_all(all, g_heap->copy(src, dst, len));
    }
    const nvshmem_heap::copy_counts c1 = g_heap->copies();
    check("M5.paths", c1.fast - c0.fast == want_fast && c1.fallback - c0.fallback == want_fallback,
          "%d copies in flight: %zu fast (want %zu, NVSHMEM node %d), %zu fallback (want %zu)", kFlood,
          std::size_t(c1.fast - c0.fast), want_fast, me / kn, std::size_t(c1.fallback - c0.fallback), want_fallback);
    check("M5.complete", wait_for(upcxx::when_all(all, prom.finalize()), 120), "every copy of the flood completed");
    upcxx::barrier();
    long wrong = 0;
    for (int i = 0; i < n; i++)
        for (int q = 0; q < n; q++)
            if (i != me && q != me && q != i)
                fill(g_sym + third_off(i, me, q), third_bytes(i, me, q), me, third_salt(i, me, q));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < kFlood; j++) {
            const int p = flood_peer(i, j), d = flood_dir(i, j);
            if (d == 0 && p == me)
                wrong += count_wrong(g_sym + flood_off(i, j), flood_bytes(i, j), i, flood_salt(i, j));
            if (d == 1 && i == me)
                wrong += count_wrong(g_sym + flood_off(i, j), flood_bytes(i, j), p, flood_salt(i, j));
        }
    check("M5.bytes", wrong == 0, "the bytes of every flood copy to and from me (%ld wrong)", wrong);
}

// ---- M6 ---------------------------------------------------------------------------------------------
void growth(std::size_t grow) {
    const std::size_t e0 = g_heap->extent();
    byte_t *big = static_cast<byte_t *>(nvshmem_malloc(grow));  // collective
    if (!big) {
        check("M6.nvshmem_malloc", false, "nvshmem_malloc(%zu) returned NULL", grow);
        return;
    }
    byte_t *tail = big + grow - kSlot;
    bool refused = false;
    try {
        (void)g_heap->to_global_ptr(tail, (me + 1) % n);
    } catch (const heap_error &e) {
        refused = e.status() == UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP && std::strstr(e.what(), "update()");
    }
    check("M6.before_update", refused, "memory mapped after construction refused, naming update() (extent %zu)", e0);
    const std::size_t e1 = g_heap->update();  // collective, every node
    const std::vector<std::size_t> all_e = gather_all(e1);
    bool same = true;
    for (std::size_t e : all_e) same = same && e == e1;
    const std::size_t need = std::size_t(tail + kSlot - static_cast<byte_t *>(g_heap->base()));
    check("M6.update", e1 > e0 && e1 >= need && same, "update(): extent %zu -> %zu (>= %zu), the same on every rank",
          e0, e1, need);
    // tail[0, 64): my pattern (what the others get); tail + kSlot / 2 + i * 64: initiator i's put;
    // tail + kSlot / 2 + (n + p) * 64: my get from PE p.
    fill(tail, 64, me, 7000 + me);
    upcxx::barrier();
    upcxx::future<> all = upcxx::make_future();
    int wrong_path = 0;
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        nvshmem_heap::copy_counts c = g_heap->copies();
        all = upcxx::when_all(
            all, g_heap->copy(g_heap->to_global_ptr(tail), g_heap->to_global_ptr(tail + kSlot / 2 + me * 64, p), 64));
        wrong_path += !path_right(c, same_node(p, me));
        c = g_heap->copies();
        all = upcxx::when_all(all, g_heap->copy(g_heap->to_global_ptr(tail, p),
                                                g_heap->to_global_ptr(tail + kSlot / 2 + (n + p) * 64), 64));
        wrong_path += !path_right(c, same_node(p, me));
    }
    check("M6.paths", wrong_path == 0,
          "copies to and from every PE's grown memory: fast on NVSHMEM node %d only (%d wrong)", me / kn, wrong_path);
    check("M6.complete", wait_for(all, 120), "every copy into grown memory completed");
    upcxx::barrier();
    long wrong = 0;
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        wrong += count_wrong(tail + kSlot / 2 + p * 64, 64, p, 7000 + p);        // p's put
        wrong += count_wrong(tail + kSlot / 2 + (n + p) * 64, 64, p, 7000 + p);  // my get from p
    }
    check("M6.bytes", wrong == 0, "the bytes put into and got from grown memory, every PE (%ld wrong)", wrong);
    nvshmem_free(big);  // collective; every copy of it is over (barrier above)
}

// ---- M7 ---------------------------------------------------------------------------------------------
// heap.copy_on_stream and heap.after with every peer: fast to PEs NVSHMEM maps here, upcxx::copy
// (the stream then waits on the GPU for its completion) to the others. A get, then a read of its
// destination queued on the stream: the read must see the peer's bytes. A put whose source the
// stream writes (after a 50 ms host function) just before it: the peer must find the new bytes.
void CUDART_CB m7_sleep(void *ms) { usleep(static_cast<useconds_t>(*static_cast<int *>(ms)) * 1000u); }
void stream_ops() {
    constexpr std::size_t len = kSlot - 64;
    for (int i = 0; i < n; i++)
        if (i != me) fill(g_sym + stream_off(i, me, 0), len, me, 12000 + i);
    upcxx::barrier();
    cudaStream_t s = nullptr;
    byte_t *pinned = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMallocHost(reinterpret_cast<void **>(&pinned), len) != cudaSuccess) {
        check("M7.setup", false, "a stream and %zu bytes of pinned memory", len);
        return;
    }
    static int ms = 50;
    int wrong_path = 0;
    long wrong_get = 0;
    bool done = true;
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        const bool fast = same_node(p, me);
        // The get, and the read of its destination queued on the stream after it.
        std::memset(pinned, 0, len);
        nvshmem_heap::copy_counts c = g_heap->copies();
        upcxx::future<> got = g_heap->copy_on_stream(s, at(p, stream_off(me, p, 0)), at(me, stream_off(me, p, 1)), len);
        wrong_path += !path_right(c, fast);
        cudaMemcpyAsync(pinned, g_sym + stream_off(me, p, 1), len, cudaMemcpyDefault, s);
        // The put: its source written on the stream after a host function sleeps.
        cudaLaunchHostFunc(s, m7_sleep, &ms);
        cudaMemsetAsync(g_sym + stream_off(me, p, 3), 0x40 + me, len, s);
        c = g_heap->copies();
        upcxx::future<> put = g_heap->copy_on_stream(s, at(me, stream_off(me, p, 3)), at(p, stream_off(me, p, 2)), len);
        wrong_path += !path_right(c, fast);
        done = wait_for(upcxx::when_all(got, put, g_heap->after(s)), 120) && done;
        wrong_get += count_wrong(pinned, len, p, 12000 + me);
    }
    check("M7.paths", wrong_path == 0, "copy_on_stream: fast on NVSHMEM node %d only, upcxx::copy elsewhere (%d wrong)",
          me / kn, wrong_path);
    check("M7.get_ordered", done && wrong_get == 0,
          "a get from every PE, then a read of its destination on the stream: %ld wrong bytes", wrong_get);
    upcxx::barrier();  // every put landed (each initiator waited for its own)
    long wrong_put = 0;
    for (int i = 0; i < n; i++)
        if (i != me) wrong_put += count_not(g_sym + stream_off(i, me, 2), len, static_cast<unsigned char>(0x40 + i));
    check("M7.put_ordered", wrong_put == 0,
          "every PE's put, its source written on its stream just before: %ld wrong bytes here", wrong_put);
    cudaFreeHost(pinned);
    cudaStreamDestroy(s);
}

// ---- M8 ---------------------------------------------------------------------------------------------
void destroy_in_flight() {
    std::vector<upcxx::future<>> futs;
    int off_node = 0;
    for (int p = 0; p < n; p++) {
        if (same_node(p, me)) continue;
        off_node++;
        futs.push_back(g_heap->copy(at(me, big_off(me, p, 0)), at(p, big_off(me, p, 0)), kBig));
        futs.push_back(g_heap->copy(at(p, big_off(me, p, 1)), at(me, big_off(me, p, 1)), kBig));
    }
    int early = 0;
    for (const upcxx::future<> &f : futs) early += ready(f);
    // A halo exchange on one stream left in flight: off node (upcxx::copy: the stream then waits
    // for its stream ticket), then a fast copy on the same stream behind that wait (within my heap,
    // on M7's unused slots of my own). destroy() must make the progress that does the ticket.
    constexpr std::size_t halo = kSlot - 64;
    cudaStream_t hs = nullptr;
    cudaStreamCreateWithFlags(&hs, cudaStreamNonBlocking);
    fill(g_sym + stream_off(me, me, 0), halo, me, 13000);
    const int off = (me + kn) % n;  // a PE of another node (none with one node)
    if (!same_node(off, me))
        (void)g_heap->copy_on_stream(hs, at(me, stream_off(me, me, 2)), at(off, stream_off(me, off, 2)), halo);
    (void)g_heap->copy_on_stream(hs, at(me, stream_off(me, me, 0)), at(me, stream_off(me, me, 1)), halo);
    bool threw = false;
    try {
        g_heap->destroy();  // collective: waits for the upcxx::copy calls above
    } catch (const heap_error &e) {
        threw = true;
        check("M8.destroy", false, "destroy() threw: %s", e.what());
    }
    int done = 0;
    for (const upcxx::future<> &f : futs) done += ready(f);
    if (!threw)
        check("M8.destroy",
              !g_heap->is_active() && done == int(futs.size()) && (futs.empty() || early < int(futs.size())),
              "destroy() returned with all %zu off-node copies complete (%d ready at issue, %d at return; %d off-node "
              "PEs)",
              futs.size(), early, done, off_node);
    upcxx::barrier();
    long wrong = 0;
    for (int p = 0; p < n; p++) {
        if (same_node(p, me)) continue;
        wrong += count_wrong(g_sym + big_off(p, me, 0), kBig, p, big_salt(p, me, 0));
        wrong += count_wrong(g_sym + big_off(me, p, 1), kBig, p, big_salt(me, p, 1));
    }
    check("M8.bytes", wrong == 0, "the bytes of the copies destroy() waited for, at both ends (%ld wrong)", wrong);
    const long wrong_halo = count_wrong(g_sym + stream_off(me, me, 1), halo, me, 13000);
    check("M8.halo", wrong_halo == 0 && cudaStreamSynchronize(hs) == cudaSuccess,
          "an off-node copy_on_stream, then a fast one behind its ticket on the same stream: destroy() returned, the "
          "fast copy landed (%ld wrong), the stream went on",
          wrong_halo);
    cudaStreamDestroy(hs);
}

// ---- faults -------------------------------------------------------------------------------------------
void say_fault(const char *where) {
    std::printf("FAULT rank %d: in %s\n", me, where);
    std::fflush(stdout);
}
// The victim dies a little after the others entered `where`.
void victim_dies() {
    usleep(300 * 1000);
    std::printf("FAULT rank %d: SIGKILL\n", me);
    std::fflush(stdout);
    raise(SIGKILL);
}

int run_init_fails() {
    const char *e = std::getenv("UXN_STANDIN_FAIL_INIT_PE");
    const int bad = e ? std::atoi(e) : -1;
    check("I.setup", bad >= 0 && bad < n, "UXN_STANDIN_FAIL_INIT_PE=%d names a rank", bad);
    std::string msg;
    try {
        upcxx::extra::nvshmem_init();
        check("I.throws", false, "nvshmem_init() returned although PE %d failed", bad);
    } catch (const heap_error &x) {
        msg = x.what();
        std::printf("rank %d: %s\n", me, x.what());
        // The failing rank's own message; every other rank's is it after "nvshmem_init: failed on rank P: ".
        const std::string prefix = "nvshmem_init: failed on rank " + std::to_string(bad) + ": ";
        if (me != bad && msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
        const std::string rank_txt = "nvshmem_init: rank " + std::to_string(bad) + " ";
        check("I.throws",
              x.errc() == upcxx::extra::nvshmem_errc::nvshmem_init_failed && x.failed_rank() == bad &&
                  msg.rfind(rank_txt, 0) == 0 && msg.find("returned 7") != std::string::npos,
              "errc nvshmem_init_failed, failed_rank %d (want %d), rank %d's message naming NVSHMEM's status 7",
              x.failed_rank(), bad, bad);
    }
    const std::uint64_t hsh = std::hash<std::string>()(msg);
    const std::uint64_t lo = upcxx::reduce_all(hsh, upcxx::op_fast_min).wait();
    const std::uint64_t hi = upcxx::reduce_all(hsh, upcxx::op_fast_max).wait();
    check("I.same", lo == hi && !msg.empty(), "every rank threw rank %d's message", bad);
    return finish();
}

int run_kill(const std::string &where) {
    const int victim = n - 1;
    auto enter = [&](const char *what) {
        upcxx::barrier();
        if (me == victim) victim_dies();
        say_fault(what);
    };
    if (where == "bootstrap") {  // the stand-in kills the victim inside NVSHMEM's init (UXN_STANDIN_KILL_INIT_PE)
        upcxx::barrier();
        say_fault(me == victim ? "nvshmem_init, to die there" : "nvshmem_init");
        if (me == victim) std::printf("FAULT rank %d: SIGKILL\n", me);
        std::fflush(stdout);
        upcxx::extra::nvshmem_init();
        std::printf("FAULT rank %d: nvshmem_init returned\n", me);
        return 3;
    }
    if (where == "init") {
        enter("nvshmem_init");
        upcxx::extra::nvshmem_init();
        std::printf("FAULT rank %d: nvshmem_init returned\n", me);
        return 3;
    }
    upcxx::extra::nvshmem_init();
    g_sym = static_cast<byte_t *>(nvshmem_malloc(block_bytes()));
    nvshmem_heap heap;
    g_heap = &heap;
    if (me != victim) fill(g_sym + big_off(0, 0, 0), kBig, me, 1);
    if (where == "update") {
        enter("update");
        (void)heap.update();
    } else if (where == "destroy") {
        upcxx::barrier();
        std::vector<upcxx::future<>> futs;
        if (me != victim)
            for (int r = 0; r < 8; r++)
                futs.push_back(heap.copy(at(victim, big_off(me, 0, 0)), at(me, big_off(me, 0, 1)), kBig));
        enter("destroy");
        heap.destroy();
    } else if (where == "flood") {
        upcxx::barrier();
        if (me == victim) victim_dies();
        say_fault("flood");
        for (int round = 0; round < 1000; round++) {
            upcxx::future<> all = upcxx::make_future();
            for (int p = 0; p < n; p++)
                if (p != me)
                    all = upcxx::when_all(all, heap.copy(at(p, big_off(0, 0, 0)), at(me, big_off(me, p, 1)), kBig));
            all.wait();
        }
    } else {
        std::printf("unknown fault '%s'\n", where.c_str());
        return 2;
    }
    std::printf("FAULT rank %d: %s returned\n", me, where.c_str());
    return 3;  // never reached when GASNet ends the job
}

}  // namespace

int main(int argc, char **argv) {
    program() = "multinode_test";
    upcxx::init();
    start_watchdog();
    me = upcxx::rank_me();
    n = upcxx::rank_n();
    const char *ks = std::getenv("GASNET_SUPERNODE_MAXSIZE");
    const char *ns = std::getenv("UXN_MN_NVSHMEM_NODE_SIZE");  // a GPU host: what NVSHMEM maps
    if (!ns || !*ns) ns = std::getenv("UXN_STANDIN_NODE_SIZE");
    k = ks ? std::atoi(ks) : 0;
    kn = ns && *ns ? std::atoi(ns) : k;
    const std::string mode = argc > 1 ? argv[1] : "all";
    if (n < 2 || k < 1 || kn < 1 || n % k != 0 || n % kn != 0) {
        if (me == 0)
            std::printf(
                "RESULT multinode_test FAIL: needs 2+ ranks, GASNET_SUPERNODE_MAXSIZE and UXN_STANDIN_NODE_SIZE "
                "dividing them\n");
        upcxx::finalize();
        return 1;
    }
    if (mode.rfind("kill=", 0) == 0) {
        const int rc = run_kill(mode.substr(5));
        std::_Exit(rc);
    }
    if (mode == "init_fails") {
        const int rc = run_init_fails();
        upcxx::finalize();
        return rc;
    }
    if (me == 0)
        std::printf("multinode_test: %d ranks as %d UPC++ nodes of %d, NVSHMEM nodes of %d PEs (UPC++ %ld)\n", n, n / k,
                    k, kn, long(UPCXX_VERSION));
    check_nodes();
    try {
        upcxx::extra::nvshmem_init();
        g_sym = static_cast<byte_t *>(nvshmem_malloc(block_bytes()));
        check("M2.nvshmem_malloc", g_sym != nullptr, "nvshmem_malloc(%zu)", block_bytes());
        check_nvshmem();
        check_remote_table();
        nvshmem_heap heap;
        g_heap = &heap;
        check_translation();
        fill_sources();
        upcxx::global_ptr<byte_t> my_host = upcxx::new_array<byte_t>(std::size_t(n) * kSlot);
        upcxx::barrier();
        copy_pairs(my_host);
        flood();
        const char *vmm_off = std::getenv("NVSHMEM_DISABLE_CUDA_VMM");
        if (vmm_off && *vmm_off && std::strcmp(vmm_off, "0") != 0)
            skip("M6", "CUDA VMM off: NVSHMEM's heap does not grow");
        else
            growth(g_heap->extent() + (std::size_t(64) << 20));  // past what is mapped now
        stream_ops();                                            // M7: copy_on_stream and after() with off-node ends
        destroy_in_flight();
        upcxx::delete_array(my_host);
        nvshmem_free(g_sym);
        upcxx::extra::nvshmem_finalize();
    } catch (const heap_error &e) {
        check("exception", false, "%s", e.what());
    }
    const int rc = finish();
    upcxx::finalize();
    return rc;
}
