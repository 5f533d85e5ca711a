// upcxx-extra-nvshmem: NVSHMEM initialised and finalised on upcxx::world(). Part of
// <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
//
//   upcxx::init();
//   upcxx::extra::nvshmem_init();        // collective: this rank's GPU, NVSHMEM bootstrapped by UPC++
//   ... nvshmem_malloc, upcxx::extra::nvshmem_heap, heap.copy ...
//   heap.destroy();                      // 1. the heap
//   upcxx::extra::nvshmem_finalize();    // 2. NVSHMEM (refused while a heap is active)
//   upcxx::finalize();                   // 3. UPC++
//
// How this reaches NVSHMEM: through the C library (upcxx_extra_nvshmem_nvshmem_load, _get_uniqueid,
// _init, _finalize, _check_pe_map in upcxx_extra_nvshmem.h), which finds NVSHMEM's host library
// (libnvshmem_host.so.3) at run time, loading it when the program does not link it, and owns its
// ABI. So this header includes none of NVSHMEM's headers (they need CCCL), a program that never
// calls NVSHMEM itself needs no NVSHMEM at build time, and a missing NVSHMEM is an exception on
// every rank instead of a loader error. This header keeps the UPC++ side: the collective rounds,
// the unique id's bytes broadcast by UPC++, the GPU selection's CUDA calls (its rule, and the
// environment nvshmem_init() sets, are policy.hpp's) and the device library's hooks.
//
// NVSHMEM's device library (libnvshmem_device.a, linked with nvcc -rdc=true by programs with their
// own NVSHMEM kernels) keeps the state its device functions read; it is initialised only when
// NVSHMEM is initialised through it. A program with such kernels includes
// <upcxx_extra/nvshmem/device_library.hpp> in one of its sources (CMake's
// upcxx_extra_nvshmem_add_device_code() does it); nvshmem_init() then goes through the device
// library, as nvshmemx_init_attr() does.
#ifndef UPCXX_EXTRA_NVSHMEM_INIT_HPP
#define UPCXX_EXTRA_NVSHMEM_INIT_HPP

#include <upcxx/upcxx.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "upcxx_extra_nvshmem.h"
#include "upcxx_extra/nvshmem/collective.hpp"
#include "upcxx_extra/nvshmem/device_hooks.hpp"
#include "upcxx_extra/nvshmem/error.hpp"
#include "upcxx_extra/nvshmem/policy.hpp"  // env_override, choose_device

namespace upcxx {
namespace extra {

/// Options of nvshmem_init(). The defaults serve a job with one GPU per rank.
struct nvshmem_init_options {
    /// This rank's CUDA device (a CUDA runtime device index). -1 (default): the device the caller
    /// chose already, i.e. the device of the CUDA context current on the calling thread (CUDA 12
    /// and later make it current in cudaSetDevice; before, in the first CUDA call after it); when
    /// none is current, upcxx::local_team().rank_me() modulo the number of visible devices.
    int device = -1;
    /// NVSHMEM's symmetric heap size in bytes, set as NVSHMEM_SYMMETRIC_SIZE for NVSHMEM's
    /// initialisation (it overrides the environment's) and put back when nvshmem_init() returns.
    /// 0 (default): the environment's NVSHMEM_SYMMETRIC_SIZE, else NVSHMEM's default. Must be the
    /// same on every rank. The environment is changed during the call: no other thread may read
    /// or change it meanwhile (getenv/setenv are not thread-safe against setenv).
    std::size_t heap_size = 0;
};

namespace detail {

/// NVSHMEM's host library, found (or loaded) by the C library, described in `info`.
inline outcome load_nvshmem(upcxx_extra_nvshmem_nvshmem_info_t &info) {
    const upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_nvshmem_load(&info);
    if (s == UPCXX_EXTRA_NVSHMEM_STATUS_OK) return outcome{};
    return outcome{
        s, nvshmem_errc::nvshmem_init_failed,
        "nvshmem_init: rank " + std::to_string(upcxx::rank_me()) + ": " + c_reason("upcxx_extra_nvshmem_nvshmem_load")};
}

/// This rank's device (the rule is policy.hpp's choose_device), made current with its primary
/// context (NVSHMEM initialises on the context current at its init; with none it defers, and
/// nvshmem_malloc & co. would initialise later).
inline outcome select_device(int requested, int &chosen, std::string &how) {
    const std::string me = std::to_string(upcxx::rank_me());
    int count = 0, current = -1;  // `current`: the device of the CUDA context current on this thread, if any
    upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_cuda_devices(&count, &current);
    if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK)
        return outcome{s, nvshmem_errc::cuda,
                       "nvshmem_init: rank " + me + " has no usable CUDA device: " + upcxx_extra_nvshmem_last_error()};
    if (count <= 0)
        return outcome{UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR, nvshmem_errc::cuda,
                       "nvshmem_init: rank " + me + " has no usable CUDA device (0 devices)"};
    if (requested >= count)
        return outcome{UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR, nvshmem_errc::cuda,
                       "nvshmem_init: rank " + me + " asked for CUDA device " + std::to_string(requested) + " but " +
                           std::to_string(count) + " are visible"};
    if (requested >= 0) current = -1;
    const int dev = choose_device(requested, count, current, upcxx::local_team().rank_me(), how);  // policy.hpp
    s = upcxx_extra_nvshmem_cuda_use_device(dev);  // its primary context, current on this thread
    if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK)
        return outcome{s, nvshmem_errc::cuda,
                       "nvshmem_init: rank " + me + " cannot use CUDA device " + std::to_string(dev) + ": " +
                           upcxx_extra_nvshmem_last_error()};
    chosen = dev;
    return outcome{};
}

/// What nvshmem_init() did, for nvshmem_finalize().
struct nvshmem_init_state {
    bool owned = false;           // nvshmem_init() initialised NVSHMEM (nvshmem_finalize() finalises it)
    bool device_library = false;  // ... through the device library's hooks
};
inline nvshmem_init_state &init_state() {
    static nvshmem_init_state s;
    return s;
}

/// One rank's view, exchanged in the first round of nvshmem_init().
struct nvshmem_init_entry {
    int status;   // OK, or why this rank cannot go on
    int already;  // NVSHMEM is initialised (or bootstrapped) in this process already
    int pe;       // ... as PE
    int n_pes;    // ... of
    std::uint64_t heap_size;
};

}  // namespace detail

/// Collective over upcxx::world(), from the master persona, after upcxx::init(): selects this
/// rank's GPU (nvshmem_init_options::device) and initialises NVSHMEM on it with the unique-id
/// bootstrap, the id made by rank 0 and broadcast by UPC++ (no MPI). Afterwards NVSHMEM's PE
/// numbers are the world ranks. When NVSHMEM is initialised already on every rank (e.g. with
/// NVSHMEM's MPI bootstrap), it only checks that every rank agrees (NVSHMEM's PEs are
/// upcxx::world()'s ranks) and leaves NVSHMEM to its initialiser. A second call does the same.
///
/// Any failure on any rank (UPC++ not initialised excepted: that one is local) throws
/// nvshmem_error on EVERY rank: the lowest failing rank's status, errc() and message, with
/// failed_rank() naming it. errc(): nvshmem_init_failed (NVSHMEM not found, not 3.x, its
/// initialisation failed, ranks that disagree), cuda (no GPU, a bad device, a CUDA failure),
/// peers_mismatch (NVSHMEM initialised by the caller with PEs that are not the world ranks),
/// upcxx_not_initialized. Every check that can fail runs before NVSHMEM is called, in agreement
/// rounds; only a failure inside NVSHMEM's own bootstrap on some ranks alone can still keep the
/// others waiting there.
inline void nvshmem_init(const nvshmem_init_options &opts = nvshmem_init_options{}) {
    const char *what = "nvshmem_init";
    if (!upcxx::initialized())
        throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                            "nvshmem_init: UPC++ is not initialised (call upcxx::init() first)",
                            nvshmem_errc::upcxx_not_initialized);
    const int me = upcxx::rank_me(), n = upcxx::rank_n();
    detail::nvshmem_init_state &state = detail::init_state();

    // 1. NVSHMEM's host library, the options, and whether NVSHMEM is initialised already.
    upcxx_extra_nvshmem_nvshmem_info_t info;
    std::memset(&info, 0, sizeof info);
    detail::outcome found = detail::load_nvshmem(info);
    if (found.ok() && opts.device < -1)
        found = detail::outcome{UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, nvshmem_errc::nvshmem_init_failed,
                                "nvshmem_init: rank " + std::to_string(me) + " passed device " +
                                    std::to_string(opts.device) + " (a device index, or -1 for the default)"};
    detail::nvshmem_init_entry mine{found.status, 0, -1, -1, static_cast<std::uint64_t>(opts.heap_size)};
    if (found.ok()) {
        mine.already = info.init_status >= 1;  // bootstrapped or initialised
        mine.pe = info.my_pe;
        mine.n_pes = info.n_pes;
    }
    const std::vector<detail::nvshmem_init_entry> all = detail::allgather(mine, what);
    int first = n;
    for (int r = 0; r < n && first == n; r++)
        if (all[static_cast<std::size_t>(r)].status != UPCXX_EXTRA_NVSHMEM_STATUS_OK) first = r;
    detail::fail_together(first, found, what);
    // Every rank checks the same data, so every rank throws the same error, or none does.
    for (int r = 1; r < n; r++) {
        const detail::nvshmem_init_entry &e = all[static_cast<std::size_t>(r)];
        if (e.already != all[0].already)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                std::string("nvshmem_init: NVSHMEM is initialised on rank ") +
                                    (e.already ? std::to_string(r) : "0") + " but not on rank " +
                                    (e.already ? "0" : std::to_string(r)) +
                                    ": initialise it on every rank, or on none and let nvshmem_init do it",
                                nvshmem_errc::nvshmem_init_failed, r);
        if (e.heap_size != all[0].heap_size)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                "nvshmem_init: rank " + std::to_string(r) + " asked for a heap of " +
                                    std::to_string(e.heap_size) + " bytes, rank 0 for " +
                                    std::to_string(all[0].heap_size) + ": the heap size must be the same on every rank",
                                nvshmem_errc::nvshmem_init_failed, r);
    }
    if (all[0].already) {
        std::vector<int> pe_of_rank, n_pes_of_rank;
        for (const detail::nvshmem_init_entry &e : all) {
            pe_of_rank.push_back(e.pe);
            n_pes_of_rank.push_back(e.n_pes);
        }
        detail::check_pe_map(pe_of_rank, n_pes_of_rank, "nvshmem_init: NVSHMEM is initialised already, but ");
        return;  // the caller's NVSHMEM (or ours, from an earlier call): nothing to do
    }

    // 2. The GPU, made current.
    int device = -1;
    std::string how;
    detail::agree(detail::select_device(opts.device, device, how), what);

    // 3. The unique id: made by rank 0 (a listening socket of NVSHMEM's bootstrap), sent by UPC++.
    detail::env_override heap_size("NVSHMEM_SYMMETRIC_SIZE", opts.heap_size);  // until nvshmem_init returns
    struct id_wire {
        int ok;
        upcxx_extra_nvshmem_uniqueid_t id;
    } wire;
    std::memset(&wire, 0, sizeof wire);
    detail::outcome made;
    if (me == 0) {
        const upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_nvshmem_get_uniqueid(&wire.id);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK)
            made = detail::outcome{
                s, nvshmem_errc::nvshmem_init_failed,
                "nvshmem_init: rank 0: " + detail::c_reason("upcxx_extra_nvshmem_nvshmem_get_uniqueid")};
        wire.ok = made.ok();
    }
    wire = upcxx::broadcast(wire, 0).wait();
    detail::fail_together(wire.ok ? n : 0, made, what);

    // 4. NVSHMEM's initialisation: through the device library when the program registered it,
    // else the host library alone.
    const detail::device_library_hooks &hooks = detail::device_library();
    const std::string where =
        "nvshmem_init: rank " + std::to_string(me) + " (CUDA device " + std::to_string(device) + ", " + how + "): ";
    detail::outcome inited;
    if (hooks.init) {
        const std::string call = "nvshmemi_init_thread (NVSHMEM's device library, NVSHMEM " +
                                 std::to_string(hooks.major) + "." + std::to_string(hooks.minor) + "." +
                                 std::to_string(hooks.patch) + " headers)";
        alignas(8) unsigned char id[sizeof wire.id.bytes];  // an nvshmemx_uniqueid_t's bytes, aligned as one
        std::memcpy(id, wire.id.bytes, sizeof id);
        const int s = hooks.init(me, n, id);
        if (s != 0)
            inited = detail::outcome{
                UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED, nvshmem_errc::nvshmem_init_failed,
                where + call + " returned " + std::to_string(s) + " (NVSHMEM_DEBUG=WARN prints NVSHMEM's reasons)"};
        else if (upcxx_extra_nvshmem_nvshmem_check_init(me, n) != UPCXX_EXTRA_NVSHMEM_STATUS_OK)
            inited = detail::outcome{
                UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED, nvshmem_errc::nvshmem_init_failed,
                where + call + " returned 0, but " + detail::c_reason("upcxx_extra_nvshmem_nvshmem_check_init")};
    } else {
        const upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_nvshmem_init(&wire.id, me, n);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK)
            inited = detail::outcome{s, nvshmem_errc::nvshmem_init_failed,
                                     where + detail::c_reason("upcxx_extra_nvshmem_nvshmem_init")};
    }
    detail::agree(inited, what);
    state.owned = true;
    state.device_library = hooks.init != nullptr;
}

/// Collective over upcxx::world(), before upcxx::finalize(). Refused on every rank (nvshmem_error,
/// errc nvshmem_in_use) while an nvshmem_heap is active on any rank: the order is heap.destroy(),
/// nvshmem_finalize(), upcxx::finalize(). Finalises NVSHMEM when nvshmem_init() initialised it (the
/// way it did: host library, or device library); NVSHMEM that the caller initialised is left to
/// the caller. Harmless twice, and without nvshmem_init().
inline void nvshmem_finalize() {
    const char *what = "nvshmem_finalize";
    if (!upcxx::initialized())
        throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                            "nvshmem_finalize: UPC++ is not initialised (call it before upcxx::finalize())",
                            nvshmem_errc::upcxx_not_initialized);
    detail::outcome mine;
    if (detail::active_heaps() > 0)
        mine = detail::outcome{UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, nvshmem_errc::nvshmem_in_use,
                               "nvshmem_finalize: an nvshmem_heap is still active on rank " +
                                   std::to_string(upcxx::rank_me()) +
                                   ": destroy() it first (the order is heap.destroy(), "
                                   "upcxx::extra::nvshmem_finalize(), upcxx::finalize())"};
    detail::agree(mine, what);
    detail::nvshmem_init_state &state = detail::init_state();
    if (!state.owned) return;
    state.owned = false;
    const detail::device_library_hooks &hooks = detail::device_library();
    if (state.device_library && hooks.finalize)
        hooks.finalize();
    else
        (void)upcxx_extra_nvshmem_nvshmem_finalize();  // OK: the library was found by nvshmem_init()
}

}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_INIT_HPP
