// upcxx-extra-nvshmem: collective steps that fail on every rank together. Part of
// <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
//
// Every collective of the C++ layer (nvshmem_init, the heap's construction, update, destroy,
// nvshmem_finalize) runs its local work first, then agrees: when any rank failed, every rank throws
// the error of the lowest failing rank (that rank its own error; the others the same status and
// errc, the message naming the rank). No rank is left waiting in a later collective.
#ifndef UPCXX_EXTRA_NVSHMEM_COLLECTIVE_HPP
#define UPCXX_EXTRA_NVSHMEM_COLLECTIVE_HPP

#include <upcxx/upcxx.hpp>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "upcxx_extra/nvshmem/error.hpp"

namespace upcxx {
namespace extra {
namespace detail {

/// One rank's outcome of a local step: OK, or the error it would throw.
struct outcome {
    upcxx_extra_nvshmem_status_t status = UPCXX_EXTRA_NVSHMEM_STATUS_OK;
    nvshmem_errc errc = nvshmem_errc::c_status;
    std::string msg;

    bool ok() const noexcept { return status == UPCXX_EXTRA_NVSHMEM_STATUS_OK; }
    static outcome of(const nvshmem_error &e) { return outcome{e.status(), e.errc(), e.what()}; }
    nvshmem_error error(int failed_rank = -1) const { return nvshmem_error(status, msg, errc, failed_rank); }
};

/// Runs `step` locally; an nvshmem_error it throws becomes the outcome (anything else propagates).
template <class F>
outcome attempt(F &&step) {
    try {
        std::forward<F>(step)();
        return outcome{};
    } catch (const nvshmem_error &e) {
        return outcome::of(e);
    }
}

/// Called by every rank with the same `failed_rank` (rank_n(): none failed). The failing rank
/// throws its own error; every other rank throws that rank's status and errc, its message prefixed
/// with `what` and the rank.
inline void fail_together(int failed_rank, const outcome &mine, const char *what) {
    if (failed_rank < 0 || failed_rank >= upcxx::rank_n()) return;
    struct wire {
        int status;
        int errc;
        char msg[760];
    } w{};
    if (upcxx::rank_me() == failed_rank) {
        w.status = mine.status;
        w.errc = static_cast<int>(mine.errc);
        std::snprintf(w.msg, sizeof w.msg, "%s", mine.msg.c_str());
    }
    upcxx::broadcast(&w, 1, failed_rank).wait();
    w.msg[sizeof w.msg - 1] = 0;
    if (upcxx::rank_me() == failed_rank) throw mine.error(failed_rank);
    throw nvshmem_error(static_cast<upcxx_extra_nvshmem_status_t>(w.status),
                        std::string(what) + ": failed on rank " + std::to_string(failed_rank) + ": " + w.msg,
                        static_cast<nvshmem_errc>(w.errc), failed_rank);
}

/// A local outcome made collective: one reduction (the lowest failing rank), then fail_together.
inline void agree(const outcome &mine, const char *what) {
    const int me_or_none = mine.ok() ? upcxx::rank_n() : upcxx::rank_me();
    fail_together(upcxx::reduce_all(me_or_none, upcxx::op_fast_min).wait(), mine, what);
}

/// Every rank's `mine`, in rank order, in O(1) collective rounds: rank 0 lends a buffer of its
/// shared segment (broadcast of its address), every rank puts its element there, a barrier, and
/// rank 0 broadcasts the whole array. Messages: the n-1 puts, two broadcasts and a barrier. A
/// buffer rank 0 cannot allocate fails on every rank alike (errc exchange_failed).
template <class T>
std::vector<T> allgather(const T &mine, const char *what) {
    static_assert(std::is_trivially_copyable<T>::value, "allgather moves raw bytes");
    const int n = upcxx::rank_n(), me = upcxx::rank_me();
    upcxx::global_ptr<T> buf;
    if (me == 0) buf = upcxx::allocate<T>(static_cast<std::size_t>(n));
    buf = upcxx::broadcast(buf, 0).wait();
    if (!buf)
        throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                            std::string(what) + ": rank 0 could not allocate " + std::to_string(n * sizeof(T)) +
                                " bytes of its UPC++ shared segment for the exchange (raise UPCXX_SHARED_HEAP_SIZE)",
                            nvshmem_errc::exchange_failed, 0);
    upcxx::rput(mine, buf + me).wait();
    upcxx::barrier();
    std::vector<T> all(static_cast<std::size_t>(n));
    if (me == 0) std::memcpy(static_cast<void *>(all.data()), buf.local(), all.size() * sizeof(T));
    upcxx::broadcast(all.data(), all.size(), 0).wait();
    if (me == 0) upcxx::deallocate(buf);
    return all;
}

/// This thread's last error of the C function `fn` without the function's name: the reason, for a
/// message that names its own caller.
inline std::string c_reason(const char *fn) {
    std::string e = upcxx_extra_nvshmem_last_error();
    const std::string name = std::string(fn) + ": ";
    if (e.compare(0, name.size(), name) == 0) e.erase(0, name.size());
    return e;
}

/// The PE/rank agreement (NVSHMEM's PEs are upcxx::world()'s ranks, each a different PE), checked
/// by the C library's one check, upcxx_extra_nvshmem_check_pe_map: `pe_of_rank[r]` and
/// `n_pes_of_rank[r]` are what NVSHMEM reports on rank r. Throws nvshmem_error (errc
/// peers_mismatch, status INVALID_ARGUMENT for a PE count, BAD_PE for a PE, failed_rank() the
/// first failing rank, message `prefix` + the C library's reason). Every rank passes the same
/// maps, so every rank throws the same error, or none does.
inline void check_pe_map(const std::vector<int> &pe_of_rank, const std::vector<int> &n_pes_of_rank,
                         const std::string &prefix) {
    int failed = -1;
    const upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_check_pe_map(
        static_cast<int>(pe_of_rank.size()), pe_of_rank.data(), n_pes_of_rank.data(), &failed);
    if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK)
        throw nvshmem_error(s, prefix + c_reason("upcxx_extra_nvshmem_check_pe_map"), nvshmem_errc::peers_mismatch,
                            failed);
}

/// The number of live nvshmem_heap objects of this process (the C table is process-wide; one
/// heap is active at a time, and nvshmem_finalize() refuses while one is).
inline int &active_heaps() noexcept {
    static int n = 0;
    return n;
}

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_COLLECTIVE_HPP
