// upcxx-extra-nvshmem: where <upcxx_extra/nvshmem/device_library.hpp> registers NVSHMEM's device
// library for upcxx::extra::nvshmem_init(). Included by both; needs neither UPC++ nor NVSHMEM.
// SPDX-License-Identifier: BSD-3-Clause
#ifndef UPCXX_EXTRA_NVSHMEM_DEVICE_HOOKS_HPP
#define UPCXX_EXTRA_NVSHMEM_DEVICE_HOOKS_HPP

namespace upcxx {
namespace extra {
namespace detail {

/// How nvshmem_init()/nvshmem_finalize() reach NVSHMEM's device library (libnvshmem_device.a),
/// set before main() by a translation unit that includes <upcxx_extra/nvshmem/device_library.hpp>.
/// Null: the program has no such unit, and NVSHMEM is initialised through its host library alone.
struct device_library_hooks {
    /// NVSHMEM initialised with the unique-id bootstrap through the device library (what
    /// nvshmemx_init_attr() does), returning NVSHMEM's status (0: success). `uniqueid` points to
    /// an nvshmemx_uniqueid_t.
    int (*init)(int rank, int n_ranks, const void *uniqueid) = nullptr;
    /// What nvshmem_finalize() does: the device library's state, then the host library.
    void (*finalize)() = nullptr;
    /// The NVSHMEM release whose headers the hooks were compiled with (messages).
    int major = 0, minor = 0, patch = 0;
};

inline device_library_hooks &device_library() noexcept {
    static device_library_hooks hooks;
    return hooks;
}

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_DEVICE_HOOKS_HPP
