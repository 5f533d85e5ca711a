// upcxx-extra-nvshmem: the UPC++ release, chosen once. Part of <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
//
// Everything the C++ layer needs from UPC++ that differs between releases lives here, in one
// type, detail::upcxx_backend, of which there is one definition per allocator API:
//   - UPCXX_VERSION >= 2022.3.0: make_gpu_allocator; several allocators per GPU; a global pointer
//     names its segment by a heap index.
//   - older (2020.10.0): cuda_device + device_allocator; one cuda_device per GPU per process; a
//     global pointer names its segment by the CUDA device id.
// The rest of the layer is written once against that type: its segment (one UPC++ device segment
// over NVSHMEM memory), view() (what a global pointer is, read without pointer arithmetic, which
// UPC++'s debug codemode forbids across allocators) and cx (the completion machinery
// upcxx::copy itself uses, so that heap.copy notifies exactly as upcxx::copy does).
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
    /// With GASNet-EX native memory kinds (a NIC registers device memory), a segment must cover
    /// only mapped memory, so every update() that grows the heap makes one more segment (UPC++
    /// never recycles their endpoints). With reference kinds (the default) device copies name
    /// memory by address on the segment's device, so one segment serves the heap as it grows.
#if defined(UPCXXI_GEX_MK_CUDA) && (UPCXXI_GEX_MK_CUDA + 0)
    static constexpr bool segment_per_growth = true;
#else
    static constexpr bool segment_per_growth = false;
#endif
    static constexpr const char *api = "make_gpu_allocator";
    /// remote_cx::as_rpc is delivered on the fast path (sent to the target once the bytes landed).
    static constexpr bool fast_remote = true;

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

    /// The segment a device global pointer names (its heap index), one field read.
    static long segment_of(const device_gptr &p) noexcept { return p.private_detail_do_not_use_heap_idx_; }

    // The fields UPCXXI_INTERNAL_ONLY(raw_ptr_) and UPCXXI_INTERNAL_ONLY(heap_idx_) (upcxx.hpp
    // undefines that macro at its end), as upcxx::copy reads them.
    template <class T, upcxx::memory_kind K>
    static gptr_view view(const upcxx::global_ptr<T, K> &p) {
        return gptr_view{p.where(), const_cast<void *>(static_cast<const void *>(p.private_detail_do_not_use_raw_ptr_)),
                         static_cast<long>(p.private_detail_do_not_use_heap_idx_),
                         K == upcxx::memory_kind::any ? p.dynamic_kind() : K};
    }

    /// upcxx::copy's completion machinery for the completions `Cxs` (upcxx/copy.hpp's copy_traits).
    template <class Cxs>
    struct cx {
        using traits = upcxx::detail::copy_traits<Cxs>;
        using here_t = typename traits::cxs_here_t;
        using returner_t = typename traits::returner;
        /// The remote completion with its arguments bound by value at the call (as_rpc binds an
        /// lvalue by reference; the caller's variable may be gone when the copy lands).
        using remote_t = typename traits::deserialized_cxs_remote_bound_t;
        static constexpr bool want_remote = traits::want_remote;
        static remote_t bind_remote(Cxs &&cxs) {
            return traits::cxs_remote_deserialized_value(traits::bind_remote(std::forward<Cxs>(cxs)));
        }
        /// upcxx::copy's own checks of the element type and the completions.
        template <class T>
        static void assert_sane() {
            traits::template assert_sane<T>();
        }
        /// The value copy() returns; `done`: the operation completed before it (as rget does).
        static returner_t returner(here_t &here, bool done) {
            return returner_t(here,
                              done ? upcxx::detail::cx_event_done::operation : upcxx::detail::cx_event_done::none);
        }
        /// A remote completion is owed from `initiator` until it is sent: upcxx::progress_required()
        /// and upcxx::discharge() wait for it, as for upcxx::copy's own.
        static void owe_remote(upcxx::persona &initiator) noexcept {
            if constexpr (want_remote) initiator.private_detail_do_not_use_undischarged_n_ += 1;
        }
        /// remote_cx::as_rpc, sent as upcxx::copy sends it: an AM run on the target's master
        /// persona at user level. Runs on `initiator`, which owed it.
        static void send_remote(upcxx::persona &initiator, int rank, remote_t &&bound) {
            if constexpr (want_remote) {
                initiator.private_detail_do_not_use_undischarged_n_ -= 1;
                upcxx::backend::send_am_master<upcxx::progress_level::user>(rank, std::move(bound));
            }
        }
    };
    /// upcxx::copy's default completion (an operation future).
    static upcxx::detail::operation_cx_as_future_t default_cx() { return upcxx::detail::operation_cx_as_future_t{{}}; }
};
#else
/// UPC++ before 2022.3.0 (2020.10.0): cuda_device + device_allocator, one cuda_device per GPU.
struct upcxx_backend {
    /// A global pointer is (rank, CUDA device, address) and copies run through the device's
    /// context: one segment serves the heap as it grows.
    static constexpr bool segment_per_growth = false;
    static constexpr const char *api = "cuda_device + device_allocator";
    /// upcxx::copy of this release has no remote completion: copies asking for one go to it.
    static constexpr bool fast_remote = false;

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

    /// The segment a device global pointer names (its CUDA device), one field read.
    static long segment_of(const device_gptr &p) noexcept { return p.device_; }

    template <class T, upcxx::memory_kind K>
    static gptr_view view(const upcxx::global_ptr<T, K> &p) {
        return gptr_view{p.rank_, const_cast<void *>(static_cast<const void *>(p.raw_ptr_)),
                         static_cast<long>(p.device_),
                         p.device_ == -1 ? upcxx::memory_kind::host : upcxx::memory_kind::cuda_device};
    }

    template <class Cxs>
    struct cx {
        using decayed = typename std::decay<Cxs>::type;
        using here_t =
            upcxx::detail::completions_state<upcxx::detail::event_is_here, upcxx::detail::rput_event_values, decayed>;
        using returner_t = upcxx::detail::completions_returner<upcxx::detail::event_is_here,
                                                               upcxx::detail::rput_event_values, decayed>;
        using remote_t = int;  // unused: 2020.10's upcxx::copy has no remote completion
        // A remote completion goes to upcxx::copy, as the release defines it.
        static constexpr bool want_remote =
            upcxx::detail::completions_has_event<decayed, upcxx::remote_cx_event>::value;
        static remote_t bind_remote(Cxs &&) { return 0; }
        template <class T>
        static void assert_sane() {}
        static returner_t returner(here_t &here, bool) { return returner_t(here); }
        static void owe_remote(upcxx::persona &) noexcept {}
        static void send_remote(upcxx::persona &, int, remote_t &&) {}
    };
    static upcxx::completions<upcxx::future_cx<upcxx::operation_cx_event>> default_cx() {
        return upcxx::completions<upcxx::future_cx<upcxx::operation_cx_event>>{{}};
    }
};
#endif

/// The element type, and whether a global pointer, of one upcxx::copy end (T*, const T*,
/// global_ptr<T, K>, global_ptr<const T, K>); `known` false for anything else.
template <class P>
struct copy_end {
    static constexpr bool known = false;
};
template <class T>
struct copy_end<T *> {
    static constexpr bool known = true;
    static constexpr bool global = false;
    using element = typename std::remove_const<T>::type;
};
template <class T, upcxx::memory_kind K>
struct copy_end<upcxx::global_ptr<T, K>> {
    static constexpr bool known = true;
    static constexpr bool global = true;
    using element = typename std::remove_const<T>::type;
};

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_BACKEND_HPP
