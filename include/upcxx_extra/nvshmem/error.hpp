// upcxx-extra-nvshmem: the C++ layer's exception. Part of <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
#ifndef UPCXX_EXTRA_NVSHMEM_ERROR_HPP
#define UPCXX_EXTRA_NVSHMEM_ERROR_HPP

#include <stdexcept>
#include <string>

#include "upcxx_extra_nvshmem.h"

namespace upcxx {
namespace extra {

/// Where an nvshmem_error comes from: the C library (status() says which status), or a condition
/// only the C++ layer has.
enum class nvshmem_errc {
    c_status,               ///< the C library returned status(); what() is its message
    upcxx_not_initialized,  ///< UPC++ is not initialised (status() INVALID_ARGUMENT)
    heap_inactive,          ///< the nvshmem_heap was destroyed or moved from (status() TABLE_NOT_SET), or is being
                            ///< destroyed: its copy engine is closed (status() ENGINE_CLOSED)
    heap_exists,            ///< another nvshmem_heap is active in this process (status() INVALID_ARGUMENT)
    device_in_use,          ///< UPC++ < 2022.3: the GPU already has a upcxx::cuda_device (INVALID_ARGUMENT)
    exchange_failed,        ///< rank 0 could not allocate the exchange buffer in its UPC++ shared segment
    peers_mismatch,         ///< NVSHMEM's PEs are not upcxx::world()'s ranks (INVALID_ARGUMENT or BAD_PE)
    heap_changed,           ///< update(): the NVSHMEM heap is not the one the heap was built on
    segment_limit,          ///< update(): the heap would need more UPC++ device segments than allowed
    cuda,                   ///< a CUDA runtime call failed (status() CUDA_ERROR); what() has CUDA's message
    nvshmem_init_failed,    ///< nvshmem_init(): NVSHMEM could not be initialised (status() NOT_INITIALIZED)
    nvshmem_in_use,         ///< nvshmem_finalize(): an nvshmem_heap is still active
    forked,                 ///< heap.copy in a fork() child of the process that made the heap (status() FORKED)
    copies_in_flight,   ///< destroy(): upcxx::copy calls through the heap did not complete in time (INVALID_ARGUMENT)
    upcxx_unsupported,  ///< heap.copy would be an upcxx::copy this UPC++ release crashes on (INVALID_ARGUMENT)
    bad_environment,    ///< nvshmem_heap: a knob of docs/copy.md has a value it does not take (INVALID_ARGUMENT)
    stream_capture,     ///< after() / copy_on_stream(): the stream is being captured into a CUDA graph (STREAM_CAPTURE)
};

/// An error of the C library, of a CUDA call, or of a collective step. status() is the C status
/// (for conditions of the C++ layer alone, the closest C status);
/// errc() says which condition it is; what() names the function, address, range, PE or rank.
/// Collective steps throw on every rank together: the same status and errc, failed_rank() set.
class nvshmem_error : public std::runtime_error {
public:
    nvshmem_error(upcxx_extra_nvshmem_status_t status, const std::string &what,
                  nvshmem_errc errc = nvshmem_errc::c_status, int failed_rank = -1)
        : std::runtime_error(what), status_(status), errc_(errc), failed_rank_(failed_rank) {}
    upcxx_extra_nvshmem_status_t status() const noexcept { return status_; }
    nvshmem_errc errc() const noexcept { return errc_; }
    /// For a collective failure: the world rank whose error every rank threw (this rank's own
    /// when it is that rank). -1 for an error of this rank alone.
    int failed_rank() const noexcept { return failed_rank_; }

private:
    upcxx_extra_nvshmem_status_t status_;
    nvshmem_errc errc_;
    int failed_rank_;
};

namespace detail {
/// The C library's status `s` with its strerror and the thread's last error.
inline nvshmem_error c_error(upcxx_extra_nvshmem_status_t s) {
    return nvshmem_error(s, std::string(upcxx_extra_nvshmem_strerror(s)) + ": " + upcxx_extra_nvshmem_last_error());
}
inline void check(upcxx_extra_nvshmem_status_t s) {
    if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw c_error(s);
}
}  // namespace detail

}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_ERROR_HPP
