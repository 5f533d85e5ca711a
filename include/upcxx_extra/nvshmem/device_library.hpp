// upcxx-extra-nvshmem: for programs with their own NVSHMEM kernels (nvcc -rdc=true, linked with
// NVSHMEM's device library libnvshmem_device.a). Include this header in ONE source file of such a
// program (more is harmless); upcxx::extra::nvshmem_init() then initialises NVSHMEM through the
// device library, so that the device state the kernels read (nvshmemi_device_state_d) is set, and
// upcxx::extra::nvshmem_finalize() finalises it the same way. CMake's
// upcxx_extra_nvshmem_add_device_code(target) adds such a file to the target by itself.
//
// Without it, nvshmem_init() initialises NVSHMEM's host library alone (nvshmemx_hostlib_init_attr):
// right for host-only programs (nvshmem_malloc, nvshmem_putmem, heap.copy...), but an NVSHMEM
// call inside a kernel would then read an uninitialised device state.
//
// Needs NVSHMEM's headers (and the CUDA/CCCL headers they include), not UPC++.
// SPDX-License-Identifier: BSD-3-Clause
#ifndef UPCXX_EXTRA_NVSHMEM_DEVICE_LIBRARY_HPP
#define UPCXX_EXTRA_NVSHMEM_DEVICE_LIBRARY_HPP

#include <nvshmem.h>
#include <nvshmemx.h>

#include "upcxx_extra/nvshmem/device_hooks.hpp"

namespace upcxx {
namespace extra {
namespace detail {

// What NVSHMEM's own nvshmemx_init_attr() (host/nvshmemx_api.h) does with the unique-id bootstrap,
// returning NVSHMEM's status instead of exiting the process on failure: nvshmemi_init_thread is
// the device library's entry point, which initialises the host library and registers the device
// library's state with it.
inline int device_library_init(int rank, int n_ranks, const void *uniqueid) {
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    int status =
        nvshmemx_set_attr_uniqueid_args(rank, n_ranks, static_cast<const nvshmemx_uniqueid_t *>(uniqueid), &attr);
    if (status != 0) return status;
    int provided = 0;
    nvshmemi_version_t version = {NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION,
                                  NVSHMEM_VENDOR_PATCH_VERSION};
    return nvshmemi_init_thread(NVSHMEM_THREAD_SERIALIZED, &provided, NVSHMEMX_INIT_WITH_UNIQUEID, &attr, version);
}

// What NVSHMEM's own nvshmem_finalize() does.
inline void device_library_finalize() { nvshmemi_finalize(); }

struct device_library_registration {
    device_library_registration() noexcept {
        device_library_hooks &h = device_library();
        h.init = &device_library_init;
        h.finalize = &device_library_finalize;
        h.major = NVSHMEM_VENDOR_MAJOR_VERSION;
        h.minor = NVSHMEM_VENDOR_MINOR_VERSION;
        h.patch = NVSHMEM_VENDOR_PATCH_VERSION;
    }
};
// One per program (an inline variable), constructed before main().
inline const device_library_registration device_library_registered{};

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_DEVICE_LIBRARY_HPP
