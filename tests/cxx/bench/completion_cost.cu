// completion_cost: what a completion costs the GPU between back-to-back copies on one stream, the
// way copy_on_stream issues them (docs/streams.md, "What copy_on_stream costs"; BENCHMARKS.md).
// For each size, 100 copies from one cudaMalloc buffer to another, then the stream is waited for;
// the best of 15 windows, in us per copy, for each way of telling the host a copy has landed:
//   ce            cuMemcpyAsync alone (NVSHMEM's on-stream put between two PEs of one node)
//   ce_write      cuMemcpyAsync, then cuStreamWriteValue32 of a word of mapped host memory (the
//                 library's copy above copy_batch_bytes())
//   ce_event      cuMemcpyAsync, then cuEventRecord of a CU_EVENT_DISABLE_TIMING event
//   dtod_event    cuMemcpyDtoDAsync (the call NVSHMEM's on-stream put makes between the PEs of one
//                 node), then cuEventRecord
//   ce_write_dev  cuMemcpyAsync, then cuStreamWriteValue32 of a word of device memory
//   ce_write_10th cuMemcpyAsync, and a write after every tenth copy only
//   kernel_signal the library's copy kernel that writes the completion word itself
//                 (uxn_copy_one_signal: a device-scope fence per block, a system-scope fence by the
//                 last), grid as src/cuda.rs sizes it (the library's copy up to copy_batch_bytes())
//   kernel_plain  the library's kernel without a completion (uxn_copy_batch, one descriptor)
//   kernel_gpu_fence the signalling kernel with a device-scope fence instead of the system-scope one
//   kernel_event  a copy kernel whose one parameter is the copy's descriptor (24 bytes: no batch,
//                 no word), then cuEventRecord: a copy above copy_batch_bytes() by the copy kernel
//                 instead of cuMemcpyAsync
//   batch_event   the library's batch kernel (a 3 KiB parameter) with one descriptor, then
//                 cuEventRecord
// One CSV line per size; then the host time of one call of each driver operation, the copies
// between two cudaMalloc buffers and between two buffers of VMM memory (cuMemCreate and cuMemMap,
// as NVSHMEM maps its heap).
//   nvcc -O2 -arch=native -o completion_cost tests/cxx/bench/completion_cost.cu -lcuda && ./completion_cost
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "../../../src/cuda/batch_copy.cu"

#define CK(x)                                                                       \
    do {                                                                            \
        CUresult r_ = (x);                                                          \
        if (r_ != CUDA_SUCCESS) {                                                   \
            std::printf("FAIL %s: CUresult %d (line %d)\n", #x, int(r_), __LINE__); \
            return 1;                                                               \
        }                                                                           \
    } while (0)

// uxn_copy_one_signal with a device-scope fence where the library's has a system-scope one.
extern "C" __global__ void gpu_fence_signal(const uxn_copy_desc d, const uxn_signal sig) {
    uxn_copy_share(d);
    __syncthreads();
    if (threadIdx.x != 0) return;
    const unsigned blocks = gridDim.x * gridDim.y;
    __threadfence();
    if (blocks > 1 && atomicInc(sig.counter, blocks - 1) != blocks - 1) return;
    *(volatile unsigned int *)sig.word = sig.value;
}

// One copy and nothing else: the parameter is the descriptor alone.
extern "C" __global__ void one_plain(const uxn_copy_desc d) { uxn_copy_share(d); }

using clk = std::chrono::steady_clock;

int main() {
    if (cuInit(0) != CUDA_SUCCESS || cudaFree(nullptr) != cudaSuccess) {
        std::printf("SKIPPED: no GPU\n");
        return 77;
    }
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const size_t cap = size_t(64) << 20;
    CUdeviceptr a, b, counter, devword;
    CK(cuMemAlloc(&a, 2 * cap));
    CK(cuMemAlloc(&b, 2 * cap));
    CK(cuMemsetD8(a, 1, 2 * cap));
    CK(cuMemAlloc(&counter, 64));
    CK(cuMemsetD8(counter, 0, 64));
    CK(cuMemAlloc(&devword, 64));
    unsigned *word = nullptr;
    CK(cuMemHostAlloc(reinterpret_cast<void **>(&word), 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CUdeviceptr dword;
    CK(cuMemHostGetDevicePointer(&dword, word, 0));
    CUevent ev;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    unsigned value = 0;
    bool failed = false;
    auto per_copy = [&](const std::function<CUresult(int)> &issue) {
        double best = 1e30;
        for (int r = 0; r < 17; r++) {
            cuStreamSynchronize(s);
            const auto t0 = clk::now();
            for (int i = 0; i < 100; i++)
                if (issue(i) != CUDA_SUCCESS) failed = true;
            if (cuStreamSynchronize(s) != CUDA_SUCCESS) failed = true;
            const double us = std::chrono::duration<double, std::micro>(clk::now() - t0).count() / 100;
            if (r >= 2) best = std::min(best, us);
        }
        return best;
    };
    std::printf(
        "CSV,bytes,ce,ce_write,ce_event,dtod_event,ce_write_dev,ce_write_10th,"
        "kernel_signal,kernel_plain,kernel_gpu_fence,kernel_event,batch_event\n");
    for (size_t n : {size_t(8), size_t(4096), size_t(65536), size_t(262144), size_t(524288), size_t(1) << 20,
                     size_t(4) << 20, size_t(16) << 20, cap}) {
        auto src = [&](int i) { return a + (i & 1) * cap; };
        auto dst = [&](int i) { return b + (i & 1) * cap; };
        auto ce = [&](int i) { return cuMemcpyAsync(dst(i), src(i), n, s); };
        const unsigned blocks = unsigned(std::min<size_t>(std::max<size_t>((n + 4095) / 4096, 1), 512));
        auto kernel = [&](int i, int kind) {
            const uxn_copy_desc d{reinterpret_cast<const unsigned char *>(src(i)),
                                  reinterpret_cast<unsigned char *>(dst(i)), n};
            const uxn_signal g{reinterpret_cast<unsigned *>(counter), reinterpret_cast<unsigned *>(dword), ++value};
            if (kind == 0) {
                struct uxn_copy_batch b1;  // the kernel has the struct's name
                b1.d[0] = d;
                uxn_copy_batch<<<dim3(blocks, 1), 256, 0, (cudaStream_t)s>>>(b1);
            } else if (kind == 3) {
                one_plain<<<blocks, 256, 0, (cudaStream_t)s>>>(d);
            } else if (kind == 1) {
                uxn_copy_one_signal<<<blocks, 256, 0, (cudaStream_t)s>>>(d, g);
            } else {
                gpu_fence_signal<<<blocks, 256, 0, (cudaStream_t)s>>>(d, g);
            }
            return cudaGetLastError() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
        };
        const double t_ce = per_copy(ce);
        const double t_write = per_copy([&](int i) {
            const CUresult r = ce(i);
            return r ? r : cuStreamWriteValue32(s, dword, ++value, 0);
        });
        const double t_event = per_copy([&](int i) {
            const CUresult r = ce(i);
            return r ? r : cuEventRecord(ev, s);
        });
        const double t_dtod = per_copy([&](int i) {
            const CUresult r = cuMemcpyDtoDAsync(dst(i), src(i), n, s);
            return r ? r : cuEventRecord(ev, s);
        });
        const double t_dev = per_copy([&](int i) {
            const CUresult r = ce(i);
            return r ? r : cuStreamWriteValue32(s, devword, ++value, 0);
        });
        const double t_10th = per_copy([&](int i) {
            const CUresult r = ce(i);
            return r || i % 10 != 9 ? r : cuStreamWriteValue32(s, dword, ++value, 0);
        });
        const double t_ks = per_copy([&](int i) { return kernel(i, 1); });
        const double t_kp = per_copy([&](int i) { return kernel(i, 0); });
        const double t_kg = per_copy([&](int i) { return kernel(i, 2); });
        const double t_ke = per_copy([&](int i) {
            const CUresult r = kernel(i, 3);
            return r ? r : cuEventRecord(ev, s);
        });
        const double t_be = per_copy([&](int i) {
            const CUresult r = kernel(i, 0);
            return r ? r : cuEventRecord(ev, s);
        });
        std::printf("CSV,%zu,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f\n", n, t_ce, t_write, t_event,
                    t_dtod, t_dev, t_10th, t_ks, t_kp, t_kg, t_ke, t_be);
        std::fflush(stdout);
    }
    auto host = [&](const std::function<CUresult()> &f) {
        double best = 1e30;
        for (int r = 0; r < 20; r++) {
            cuStreamSynchronize(s);
            const auto t0 = clk::now();
            for (int i = 0; i < 100; i++)
                if (f() != CUDA_SUCCESS) failed = true;
            best = std::min(best, std::chrono::duration<double, std::micro>(clk::now() - t0).count() / 100);
        }
        cuStreamSynchronize(s);
        return best;
    };
    const double h_copy = host([&] { return cuMemcpyAsync(b, a, 8, s); });
    const double h_dtod = host([&] { return cuMemcpyDtoDAsync(b, a, 8, s); });
    // Two buffers of VMM memory, as NVSHMEM's heap is mapped.
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    for (int k = 0; k < 2; k++) {
        CUmemGenericAllocationHandle h;
        CK(cuMemCreate(&h, gran, &prop, 0));
        CK(cuMemMap(va + k * gran, gran, 0, h, 0));
        CK(cuMemRelease(h));
    }
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(va, 2 * gran, &access, 1));
    const double h_vmm_copy = host([&] { return cuMemcpyAsync(va + gran, va, 8, s); });
    const double h_vmm_dtod = host([&] { return cuMemcpyDtoDAsync(va + gran, va, 8, s); });
    const double h_write = host([&] { return cuStreamWriteValue32(s, dword, ++value, 0); });
    const double h_record = host([&] { return cuEventRecord(ev, s); });
    const double h_query = host([&] { return cuEventQuery(ev); });
    // The host time of a launch, by the size of the kernel's parameter: one 8-byte copy.
    const uxn_copy_desc d8{reinterpret_cast<const unsigned char *>(a), reinterpret_cast<unsigned char *>(b), 8};
    const double h_one = host([&] {
        one_plain<<<1, 256, 0, (cudaStream_t)s>>>(d8);
        return cudaGetLastError() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
    });
    const double h_one_signal = host([&] {
        const uxn_signal g{reinterpret_cast<unsigned *>(counter), reinterpret_cast<unsigned *>(dword), ++value};
        uxn_copy_one_signal<<<1, 256, 0, (cudaStream_t)s>>>(d8, g);
        return cudaGetLastError() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
    });
    struct uxn_copy_batch b8;
    b8.d[0] = d8;
    const double h_batch = host([&] {
        uxn_copy_batch<<<1, 256, 0, (cudaStream_t)s>>>(b8);
        return cudaGetLastError() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
    });
    std::printf(
        "HOST,us per call,cuMemcpyAsync %.2f,cuMemcpyDtoDAsync %.2f,VMM cuMemcpyAsync %.2f,VMM cuMemcpyDtoDAsync "
        "%.2f,cuStreamWriteValue32 %.2f,cuEventRecord %.2f,cuEventQuery %.2f\n",
        h_copy, h_dtod, h_vmm_copy, h_vmm_dtod, h_write, h_record, h_query);
    std::printf(
        "LAUNCH,us per call,one descriptor (24 B) %.2f,one descriptor and a word (48 B) %.2f,a batch (3 KiB) %.2f\n",
        h_one, h_one_signal, h_batch);
    // The last completion word written holds the last value (every signal above landed).
    if (failed || *reinterpret_cast<volatile unsigned *>(word) != value) {
        std::printf("FAIL: a driver call failed, or the word holds %u, not %u\n", *word, value);
        return 1;
    }
    std::printf("DONE\n");
    return 0;
}
