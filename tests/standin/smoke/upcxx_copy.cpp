// Smoke test (b): real UPC++ on the CUDA stand-in. A cuda_device segment over cudaMalloc'd memory,
// upcxx::copy device <-> host and device <-> the peer's device on 2 (or more) ranks, with copy
// delays and a few completion forms. Checks with the C++ tests' check.hpp (tests/cxx: "CHECK rank R
// PASS|FAIL: ..."), then "RESULT upcxx_copy PASS|FAIL: ..." on rank 0.
// SPDX-License-Identifier: BSD-3-Clause
#include <cuda_runtime_api.h>
#include <upcxx/upcxx.hpp>

#include <cstdio>
#include <vector>

#include "check.hpp"  // tests/cxx/check.hpp

static int got = 0;
static void bump() { ++got; }

using dptr = upcxx::global_ptr<int, upcxx::memory_kind::cuda_device>;

static bool all_equal(const std::vector<int> &v, int want) {
    for (int x : v)
        if (x != want) return false;
    return true;
}

int main() {
    upcxx::init();
    const int me = upcxx::rank_me(), n = upcxx::rank_n(), peer = (me + 1) % n;
    const size_t seg = size_t(4) << 20, N = 4096;
    void *base = nullptr;
    CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
    CHECK(cudaMalloc(&base, seg) == cudaSuccess, "cudaMalloc of the segment");
#if UPCXX_VERSION >= 20230300
    auto alloc = upcxx::make_gpu_allocator<upcxx::cuda_device>(seg, 0, base);
#else
    upcxx::cuda_device gpu(0);
    upcxx::device_allocator<upcxx::cuda_device> alloc(gpu, base, seg);
#endif
    dptr d = alloc.allocate<int>(N);
    CHECK(d != nullptr, "device_allocator::allocate");
    upcxx::global_ptr<int> h = upcxx::new_array<int>(N);
    std::vector<int> local(N);

    // host -> own device, own device -> host
    for (size_t i = 0; i < N; ++i) h.local()[i] = 1000 * me + 1;
    upcxx::copy(h, d, N).wait();
    upcxx::copy(d, local.data(), N).wait();
    CHECK(all_equal(local, 1000 * me + 1), "host -> own device -> host");

    // own device -> the peer's device (into its d_in: no buffer is read and written at once),
    // then each rank checks its d_in.
    dptr d_in = alloc.allocate<int>(N);
    upcxx::dist_object<dptr> dd(d_in);
    upcxx::dist_object<upcxx::global_ptr<int>> dh(h);
    dptr pd = dd.fetch(peer).wait();
    upcxx::global_ptr<int> ph = dh.fetch(peer).wait();
    upcxx::barrier();
    upcxx::promise<> p;
    upcxx::copy(d, pd, N, upcxx::operation_cx::as_promise(p));
    p.finalize().wait();
    upcxx::barrier();
    upcxx::copy(d_in, local.data(), N).wait();
    int from = (me + n - 1) % n;
    CHECK(all_equal(local, 1000 * from + 1), "own device -> the peer's device (rank %d's value here)", from);
    upcxx::barrier();

    // The peer's device -> own host (it holds my value now).
    upcxx::global_ptr<int> h2 = upcxx::new_array<int>(N);  // a remote source: a shared-segment target
    upcxx::copy(pd, h2, N).wait();
    CHECK(all_equal(std::vector<int>(h2.local(), h2.local() + N), 1000 * me + 1), "the peer's device -> own host");
    upcxx::delete_array(h2);
    upcxx::barrier();

    // The peer's host -> own device.
    upcxx::copy(ph, d, N).wait();
    upcxx::copy(d, local.data(), N).wait();
    CHECK(all_equal(local, 1000 * peer + 1), "the peer's host -> own device");

    // A remote completion on the peer after a device -> peer device copy (2020.10's copy with
    // remote_cx does not compile here: not a stand-in matter).
#if UPCXX_VERSION >= 20230300
    upcxx::barrier();
    upcxx::copy(d, pd, N, upcxx::operation_cx::as_future() | upcxx::remote_cx::as_rpc(bump)).wait();
    while (got == 0) upcxx::progress();
#endif
    upcxx::barrier();

    alloc.deallocate(d);
    alloc.deallocate(d_in);
    upcxx::delete_array(h);
#if UPCXX_VERSION >= 20230300
    alloc.destroy();
#else
    gpu.destroy();
#endif
    CHECK(cudaFree(base) == cudaSuccess, "cudaFree of the segment");
    char detail[64];
    std::snprintf(detail, sizeof detail, "(UPC++ %ld)", long(UPCXX_VERSION));
    const int rc = uxn_check::finish("upcxx_copy", detail);
    upcxx::finalize();
    return rc;
}
