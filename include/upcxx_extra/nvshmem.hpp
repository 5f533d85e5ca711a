// upcxx-extra-nvshmem: the UPC++ layer. Header-only, over the C ABI (upcxx_extra_nvshmem.h).
// SPDX-License-Identifier: BSD-3-Clause
//
// upcxx::extra::nvshmem_heap makes NVSHMEM's symmetric heap addressable from UPC++: a private
// UPC++ device segment over NVSHMEM's memory (never used to allocate: NVSHMEM's own internal
// buffers sit at the start of its heap), translation between symmetric addresses (for
// nvshmem_put & co.) and UPC++ global pointers (for upcxx::copy & co.), and heap.copy, a drop-in
// for upcxx::copy that moves heap memory through NVSHMEM's peer mapping at NVLink speed. The C
// library owns the heap's state and does every translation; this header converts types and
// errors and runs the collectives.
//
//   upcxx::init(); upcxx::extra::nvshmem_init();         // collective: GPU choice, NVSHMEM bootstrap
//   upcxx::extra::nvshmem_heap heap;                      // collective over upcxx::world()
//   int *a = (int *)nvshmem_malloc(n * sizeof(int));      // collective, NVSHMEM as usual
//   heap.update();                                        // collective: covers what NVSHMEM mapped since
//   auto gp = heap.to_global_ptr(a, (heap.my_pe() + 1) % heap.n_pes());
//   heap.copy(gp, heap.to_global_ptr(a), n).wait();       // takes whatever upcxx::copy takes
//   auto back = heap.from_global_ptr(gp);                 // {a, pe}: ready for nvshmem_put
//   heap.destroy();                                       // collective, before nvshmem_finalize
//   upcxx::extra::nvshmem_finalize(); upcxx::finalize();
//
// The parts, under upcxx_extra/nvshmem/:
//   error.hpp        nvshmem_error: the C status, errc() for conditions of the C++ layer alone
//   collective.hpp   collective steps that fail on every rank together
//   upcxx_internals.hpp  every UPC++ internal the layer reads, each detected at compile time; the
//                    mode (fast, or public-API: UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1 forces it)
//   backend.hpp      the UPC++ release and the mode, chosen once (allocator API, what a global
//                    pointer is, upcxx::copy's completion machinery)
//   copy_engine.hpp  the fast copies: stream, events, one completion LPC per copy on its persona
//   copy.hpp         one heap.copy: arguments, where each end is, the path, its notifications
//   heap.hpp         nvshmem_heap
//   init.hpp         nvshmem_init() / nvshmem_finalize(): NVSHMEM bootstrapped by UPC++
//   device_library.hpp  (include it in one source of a program with its own NVSHMEM kernels)
//
// Supported UPC++ releases (docs/compatibility.md): 2020.10.0 and later, built with CUDA.
#ifndef UPCXX_EXTRA_NVSHMEM_HPP
#define UPCXX_EXTRA_NVSHMEM_HPP

#include "upcxx_extra/nvshmem/error.hpp"
#include "upcxx_extra/nvshmem/policy.hpp"
#include "upcxx_extra/nvshmem/collective.hpp"
#include "upcxx_extra/nvshmem/backend.hpp"
#include "upcxx_extra/nvshmem/copy_engine.hpp"
#include "upcxx_extra/nvshmem/copy.hpp"
#include "upcxx_extra/nvshmem/heap.hpp"
#include "upcxx_extra/nvshmem/init.hpp"

#endif  // UPCXX_EXTRA_NVSHMEM_HPP
