// upcxx-extra-nvshmem: the UPC++ release and the copy mode, chosen once. Part of
// <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
//
// Everything the C++ layer needs from UPC++ that differs between releases lives here, in one
// type, detail::upcxx_backend, of which there is one definition per allocator API (public API):
//   - UPCXX_VERSION >= 2022.3.0: make_gpu_allocator; several allocators per GPU; a global pointer
//     names its segment by a heap index.
//   - older (2020.10.0): cuda_device + device_allocator; one cuda_device per GPU per process; a
//     global pointer names its segment by the CUDA device id.
// The UPC++ internals it reads (global pointer fields, upcxx::copy's completion machinery) are
// all in upcxx_internals.hpp, each detected at compile time; `fast` says whether they were all
// found (fast mode) or the layer uses UPC++'s public API only (public-API mode: every heap.copy
// is upcxx::copy). The rest of the layer is written once against this type: its segment (one
// UPC++ device segment over NVSHMEM memory), view() (what a global pointer is, read without
// pointer arithmetic, which UPC++'s debug codemode forbids across allocators; fast mode only) and
// cx (the completion machinery upcxx::copy itself uses, so that heap.copy notifies exactly as
// upcxx::copy does; fast mode only).
#ifndef UPCXX_EXTRA_NVSHMEM_BACKEND_HPP
#define UPCXX_EXTRA_NVSHMEM_BACKEND_HPP

#include <upcxx/upcxx.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#define UPCXX_EXTRA_NVSHMEM_STR2_(x) #x
#define UPCXX_EXTRA_NVSHMEM_STR_(x) UPCXX_EXTRA_NVSHMEM_STR2_(x)

#if !defined(UPCXX_VERSION)
#error "upcxx_extra/nvshmem.hpp needs UPC++: <upcxx/upcxx.hpp> did not define UPCXX_VERSION"
#endif

// CUDA support: UPCXX_KIND_CUDA (2021.3.0 onwards, the documented feature macro) or
// UPCXX_CUDA_ENABLED (2020.10 and older). A UPC++ without either was built without CUDA.
#if !((defined(UPCXX_KIND_CUDA) && (UPCXX_KIND_CUDA + 0) > 0) || \
      (defined(UPCXX_CUDA_ENABLED) && (UPCXX_CUDA_ENABLED + 0)))
#pragma message("upcxx_extra/nvshmem.hpp: found UPC++ UPCXX_VERSION " UPCXX_EXTRA_NVSHMEM_STR_( \
    UPCXX_VERSION) " with neither UPCXX_KIND_CUDA nor UPCXX_CUDA_ENABLED")
#error \
    "upcxx_extra/nvshmem.hpp needs a UPC++ built with CUDA support (configure --enable-cuda); this UPC++ (UPCXX_VERSION above) has none"
#endif

#include "upcxx_extra/nvshmem/upcxx_internals.hpp"

namespace upcxx {
namespace extra {
namespace detail {

using device_gptr = upcxx::global_ptr<char, upcxx::memory_kind::cuda_device>;

/// What a global pointer is: rank, address on that rank, the segment it names, its kind.
struct gptr_view {
    int rank;
    void *raw;
    long segment;
    upcxx::memory_kind kind;
};

#if UPCXX_VERSION >= 20220300L
/// UPC++ 2022.3.0 and later: make_gpu_allocator.
struct upcxx_backend {
    /// Every UPC++ internal of this release line found (upcxx_internals.hpp): fast copies.
    static constexpr bool fast = internals::fast;
    /// With GASNet-EX native memory kinds (a NIC registers device memory), a segment must cover
    /// only mapped memory, so every update() that grows the heap makes one more segment (UPC++
    /// never recycles their endpoints). With reference kinds (the default) device copies name
    /// memory by address on the segment's device, so one segment serves the heap as it grows.
    /// The same in both modes; where the kind cannot be told, "native" (upcxx_internals.hpp).
    static constexpr bool segment_per_growth = internals::gex_mk_cuda;
    static constexpr const char *api = "make_gpu_allocator";

    /// One UPC++ device segment over [base, base + size) of CUDA device `device`. Collective to
    /// make and to destroy(); abandon() leaves it to upcxx::finalize() (no collective possible).
    class segment {
    public:
        segment(int device, char *base, std::size_t size)
            : alloc_(std::make_unique<allocator>(upcxx::make_gpu_allocator<upcxx::cuda_device>(size, device, base))),
              base_(alloc_->to_global_ptr<char>(base)) {}
        device_gptr base() const noexcept { return base_; }
        void destroy() {
            alloc_->destroy();
            alloc_.reset();
        }
        void abandon() noexcept { (void)alloc_.release(); }

    private:
        using allocator = upcxx::device_allocator<upcxx::cuda_device>;
        std::unique_ptr<allocator> alloc_;
        device_gptr base_;
    };

    /// Why this process cannot make a segment on `device` now ("" when it can).
    static std::string device_unavailable(int) { return std::string(); }

    /// Fast mode: what a global pointer is (the fields upcxx::copy reads).
    template <class T, upcxx::memory_kind K>
    static gptr_view view(const upcxx::global_ptr<T, K> &p) {
        return gptr_view{p.where(), internals::raw_ptr(p), internals::segment_of(p),
                         K == upcxx::memory_kind::any ? p.dynamic_kind() : K};
    }
#else
/// UPC++ before 2022.3.0 (2020.10.0): cuda_device + device_allocator, one cuda_device per GPU.
struct upcxx_backend {
    static constexpr bool fast = internals::fast;
    /// A global pointer is (rank, CUDA device, address) and copies run through the device's
    /// context: one segment serves the heap as it grows.
    static constexpr bool segment_per_growth = false;
    static constexpr const char *api = "cuda_device + device_allocator";

    class segment {
    public:
        segment(int device, char *base, std::size_t size)
            : gpu_(std::make_unique<upcxx::cuda_device>(device)),
              alloc_(std::make_unique<allocator>(*gpu_, base, size)),
              base_(alloc_->to_global_ptr<char>(base)) {}
        device_gptr base() const noexcept { return base_; }
        void destroy() {
            alloc_.reset();
            gpu_->destroy();  // collective: releases the device and its segment
            gpu_.reset();
        }
        void abandon() noexcept {
            (void)alloc_.release();
            (void)gpu_.release();
        }

    private:
        using allocator = upcxx::device_allocator<upcxx::cuda_device>;
        std::unique_ptr<upcxx::cuda_device> gpu_;
        std::unique_ptr<allocator> alloc_;
        device_gptr base_;
    };

    /// UPC++ 2020.10 allows one cuda_device per GPU per process and aborts on a second.
    static std::string device_unavailable(int device) {
        if (device >= 0 && device < upcxx::cuda::max_devices && upcxx::cuda::devices[device] != nullptr)
            return "CUDA device " + std::to_string(device) +
                   " already has a upcxx::cuda_device in this process, and UPC++ " UPCXX_EXTRA_NVSHMEM_STR_(
                       UPCXX_VERSION) " allows one per GPU; destroy() it first, or allocate those buffers with "
                                      "nvshmem_malloc (docs/compatibility.md)";
        return std::string();
    }

    /// Fast mode: what a global pointer is (the fields upcxx::copy reads; device -1 is host).
    template <class T, upcxx::memory_kind K>
    static gptr_view view(const upcxx::global_ptr<T, K> &p) {
        const long seg = internals::segment_of(p);
        return gptr_view{internals::old_rank(p), internals::raw_ptr(p), seg,
                         seg == -1 ? upcxx::memory_kind::host : upcxx::memory_kind::cuda_device};
    }
#endif
    /// Fast mode: the segment a device global pointer names (its heap index; 2020.10: its CUDA
    /// device), one field read.
    static long segment_of(const device_gptr &p) noexcept { return internals::segment_of(p); }

    /// Fast mode: upcxx::copy's completion machinery for the completions `Cxs`: here_t,
    /// returner_t, remote_t, want_remote, fast_remote (a remote completion on the fast path),
    /// prepare_remote, assert_sane, returner, owe_remote, send_remote (upcxx_internals.hpp).
    template <class Cxs>
    using cx = internals::copy_cx<Cxs>;

    /// upcxx::copy's default completion (an operation future), through the public API: the type
    /// upcxx::copy defaults to (operation_cx_as_future_t in 2023.9, completions<future_cx<
    /// operation_cx_event>> in 2020.10) is what operation_cx::as_future() returns.
    static auto default_cx() { return upcxx::operation_cx::as_future(); }
};

/// The element type, and whether a global pointer, of one upcxx::copy end (T*, const T*,
/// global_ptr<T, K>, global_ptr<const T, K>); `known` false for anything else.
template <class P>
struct copy_end {
    static constexpr bool known = false;
    static constexpr bool global = false;
    static constexpr upcxx::memory_kind kind = upcxx::memory_kind::any;
};
template <class T>
struct copy_end<T *> {
    static constexpr bool known = true;
    static constexpr bool global = false;
    static constexpr upcxx::memory_kind kind = upcxx::memory_kind::host;  // as upcxx::copy reads a T*
    using element = typename std::remove_const<T>::type;
};
template <class T, upcxx::memory_kind K>
struct copy_end<upcxx::global_ptr<T, K>> {
    static constexpr bool known = true;
    static constexpr bool global = true;
    static constexpr upcxx::memory_kind kind = K;
    using element = typename std::remove_const<T>::type;
};

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_BACKEND_HPP
