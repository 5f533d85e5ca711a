// upcxx-extra-nvshmem: the UPC++ layer. Header-only, over the C ABI (upcxx_extra_nvshmem.h).
// SPDX-License-Identifier: BSD-3-Clause
//
// upcxx::extra::nvshmem_heap makes NVSHMEM's symmetric heap addressable from UPC++: a private
// upcxx::device_allocator<upcxx::cuda_device> over NVSHMEM's memory (never used to allocate:
// NVSHMEM's own internal buffers sit at the start of its heap), plus translation between
// symmetric addresses (for nvshmem_put & co.) and UPC++ global pointers (for upcxx::copy & co.).
// All translation is done by the C library; this header only converts types and errors.
//
//   upcxx::init(); nvshmem init ...;
//   upcxx::extra::nvshmem_heap heap;                      // collective over upcxx::world()
//   int *a = (int *)nvshmem_malloc(n * sizeof(int));      // collective, NVSHMEM as usual
//   auto gp = heap.to_global_ptr(a, (heap.my_pe() + 1) % heap.n_pes());
//   upcxx::copy(gp, local_dev_ptr, n).wait();             // UPC++ on the same bytes
//   auto back = heap.from_global_ptr(gp);                 // {a, pe}: ready for nvshmem_put
//   heap.destroy();                                       // collective, before nvshmem_finalize
#ifndef UPCXX_EXTRA_NVSHMEM_HPP
#define UPCXX_EXTRA_NVSHMEM_HPP

#include <upcxx/upcxx.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "upcxx_extra_nvshmem.h"

#if !defined(UPCXX_VERSION)
#error "upcxx_extra/nvshmem.hpp needs UPC++ (UPCXX_VERSION is not defined)"
#endif
#if !UPCXX_CUDA_ENABLED
#error "upcxx_extra/nvshmem.hpp needs a UPC++ built with CUDA support (--enable-cuda)"
#endif

namespace upcxx {
namespace extra {

/// An error of the C library, with its status and message (address, heap range, PE).
class nvshmem_error : public std::runtime_error {
public:
    nvshmem_error(upcxx_extra_nvshmem_status_t status, const std::string &what)
        : std::runtime_error(what), status_(status) {}
    upcxx_extra_nvshmem_status_t status() const noexcept { return status_; }

private:
    upcxx_extra_nvshmem_status_t status_;
};

namespace detail {
inline void check(upcxx_extra_nvshmem_status_t s) {
    if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK)
        throw nvshmem_error(s, std::string(upcxx_extra_nvshmem_strerror(s)) + ": " + upcxx_extra_nvshmem_last_error());
}
}  // namespace detail

/// NVSHMEM's symmetric heap as a private UPC++ device segment. Construct collectively over
/// upcxx::world() after upcxx::init() and NVSHMEM init; destroy() collectively before
/// nvshmem_finalize(). World ranks and NVSHMEM PEs must be the same processes (rank_n == n_pes);
/// the PE -> rank map may be any permutation.
class nvshmem_heap {
public:
    using device_gptr = upcxx::global_ptr<char, upcxx::memory_kind::cuda_device>;

    nvshmem_heap() {
        upcxx_extra_nvshmem_heap_info_t h;
        detail::check(upcxx_extra_nvshmem_heap_query(&h));
        if (h.n_pes != upcxx::rank_n())
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                "nvshmem_heap: NVSHMEM has " + std::to_string(h.n_pes) + " PEs but upcxx::world() has " +
                                    std::to_string(upcxx::rank_n()) + " ranks; they must be the same processes");
        if (h.mapped_size == 0 || h.device < 0)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR,
                                "nvshmem_heap: the mapped extent or the CUDA device of the heap is unknown");
        info_ = h;
        // A UPC++ segment over the *mapped* extent only: a conduit that registers the segment
        // with a NIC needs backed memory, not the whole reservation.
#if UPCXX_VERSION >= 20220300L
        // UPC++ 2022.3.0 and later (written to the spec; not tested here: no such UPC++ available).
        alloc_.reset(new allocator_type(
            upcxx::make_gpu_allocator<upcxx::cuda_device>(h.mapped_size, h.device, h.base)));
#else
        gpu_.reset(new upcxx::cuda_device(h.device));
        alloc_.reset(new allocator_type(*gpu_, h.base, h.mapped_size));
#endif
        device_gptr my_base = alloc_->to_global_ptr<char>(static_cast<char *>(h.base));

        // Every rank's PE, base address and base global pointer.
        using entry = std::tuple<int, std::uintptr_t, device_gptr>;
        upcxx::dist_object<entry> mine(entry(h.my_pe, reinterpret_cast<std::uintptr_t>(h.base), my_base));
        const int n = upcxx::rank_n();
        base_gp_.resize(n);
        base_raw_.resize(n);
        std::vector<upcxx_extra_nvshmem_peer_t> peers(n);
        std::vector<int> seen(n, 0);
        for (int r = 0; r < n; r++) {
            entry e = r == upcxx::rank_me() ? *mine : mine.fetch(r).wait();
            int pe = std::get<0>(e);
            if (pe < 0 || pe >= n || seen[pe]++)
                throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE,
                                    "nvshmem_heap: rank " + std::to_string(r) + " reports PE " + std::to_string(pe) +
                                        ", out of range or taken by another rank");
            base_raw_[r] = std::get<1>(e);
            base_gp_[r] = std::get<2>(e);
            peers[pe].rank = r;
            peers[pe].base = reinterpret_cast<void *>(std::get<1>(e));
        }
        detail::check(upcxx_extra_nvshmem_set_peers(n, peers.data()));
        upcxx::barrier();
    }

    nvshmem_heap(const nvshmem_heap &) = delete;
    nvshmem_heap &operator=(const nvshmem_heap &) = delete;

    ~nvshmem_heap() {
        // destroy() is collective and must come first; a heap left alive at exit is the
        // caller's bug, but never a crash here.
    }

    /// Collective: tears the UPC++ segment down (before nvshmem_finalize) and forgets the table.
    void destroy() {
        if (!alloc_) return;
        upcxx::barrier();
#if UPCXX_VERSION >= 20220300L
        alloc_->destroy();  // collective: releases the device segment (the allocator owns the device)
        alloc_.reset();
#else
        alloc_.reset();
        gpu_->destroy();  // collective: releases the device and its segment
        gpu_.reset();
#endif
        upcxx_extra_nvshmem_detach();
    }

    int my_pe() const { return info_.my_pe; }
    int n_pes() const { return info_.n_pes; }
    int device() const { return info_.device; }
    void *base() const { return info_.base; }
    /// The extent UPC++ can address: the mapped size at construction.
    std::size_t extent() const { return info_.mapped_size; }

    /// The global pointer to PE `pe`'s copy of the symmetric object `sym`.
    template <class T>
    upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> to_global_ptr(T *sym, int pe) const {
        check_extent(sym, sizeof(T));
        upcxx_extra_nvshmem_gptr_t g;
        detail::check(upcxx_extra_nvshmem_to_global_ptr(static_cast<const void *>(sym), pe, &g));
        device_gptr gp = base_gp_[g.rank] + static_cast<std::ptrdiff_t>(reinterpret_cast<std::uintptr_t>(g.raw) - base_raw_[g.rank]);
        return upcxx::reinterpret_pointer_cast<T>(gp);
    }
    template <class T>
    upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> to_global_ptr(T *sym) const {
        return to_global_ptr(sym, my_pe());
    }

    /// The symmetric address and the PE of `gp` (which must point into an nvshmem_heap).
    template <class T>
    std::pair<T *, int> from_global_ptr(upcxx::global_ptr<T, upcxx::memory_kind::cuda_device> gp) const {
        if (!gp)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, "from_global_ptr: null global pointer");
        const int r = gp.where();
        if (r < 0 || r >= static_cast<int>(base_gp_.size()))
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK, "from_global_ptr: rank " + std::to_string(r) + " out of range");
        device_gptr c = upcxx::reinterpret_pointer_cast<char>(gp);
        std::ptrdiff_t off = c - base_gp_[r];
        const void *raw = reinterpret_cast<const void *>(base_raw_[r] + static_cast<std::uintptr_t>(off));
        void *sym = nullptr;
        int pe = -1;
        detail::check(upcxx_extra_nvshmem_from_global_ptr(r, raw, &sym, &pe));
        return {static_cast<T *>(sym), pe};
    }

private:
    using allocator_type = upcxx::device_allocator<upcxx::cuda_device>;

    void check_extent(const void *sym, std::size_t bytes) const {
        if (!sym) throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, "to_global_ptr: sym is NULL");
        std::size_t off = 0;
        detail::check(upcxx_extra_nvshmem_offset(sym, &off));
        if (off + bytes > info_.mapped_size)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP,
                                "to_global_ptr: offset " + std::to_string(off) + " is past the " +
                                    std::to_string(info_.mapped_size) +
                                    " bytes of NVSHMEM heap mapped when this nvshmem_heap was constructed: the heap "
                                    "grew since (nvshmem_malloc maps more on demand). destroy() it and construct a "
                                    "new nvshmem_heap after your nvshmem_malloc calls");
    }

    upcxx_extra_nvshmem_heap_info_t info_{};
#if UPCXX_VERSION < 20220300L
    std::unique_ptr<upcxx::cuda_device> gpu_;
#endif
    std::unique_ptr<allocator_type> alloc_;
    std::vector<device_gptr> base_gp_;
    std::vector<std::uintptr_t> base_raw_;
};

}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_HPP
