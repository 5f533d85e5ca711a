// batch_methods: three ways to move a window of W device-to-device copies from the host, timed
// alternately in one process on one GPU (BENCHMARKS.md, section 12): W x cudaMemcpyAsync, one
// cudaMemcpyBatchAsync (CUDA 12.8 and later), and launches of the library's batch kernel
// (src/cuda/batch_copy.cu, 128 copies a launch, blocks as src/cuda.rs sizes them). Each window is
// issued, then the stream is waited for; the minimum and the median of the timed windows are
// printed as CSV. No UPC++, no NVSHMEM: what it compares is the enqueue cost of each method.
//   nvcc -O2 -arch=native -o batch_methods tests/cxx/bench/batch_methods.cu && ./batch_methods
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "../../../src/cuda/batch_copy.cu"

#define CK(x)                                                                             \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            std::printf("FAIL %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

using clk = std::chrono::steady_clock;

int main() {
    const size_t sizes[] = {8, 64, 512, 4096, 32768, 65536, 262144, 1048576, 4194304};
    const int windows[] = {1, 10, 100, 1000};
    const size_t cap = size_t(1000) * 4194304;
    unsigned char *src = nullptr, *dst = nullptr;
    CK(cudaMalloc(&src, cap));
    CK(cudaMalloc(&dst, cap));
    CK(cudaMemset(src, 1, cap));
    CK(cudaMemset(dst, 0, cap));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const char *names[] = {"memcpy_async", "memcpy_batch_async", "batch_kernel"};
    std::printf("CSV,method,window,bytes,min_us,median_us\n");
    for (int w : windows)
        for (size_t n : sizes) {
            const int reps = w >= 1000 ? 5 : 15;
            std::vector<double> t[3];
            for (int r = 0; r < reps + 2; r++)
                for (int m = 0; m < 3; m++) {  // alternating: drift hits every method alike
                    const auto a = clk::now();
                    if (m == 0) {
                        for (int i = 0; i < w; i++)
                            CK(cudaMemcpyAsync(dst + i * n, src + i * n, n, cudaMemcpyDefault, st));
                    } else if (m == 1) {
#if CUDART_VERSION >= 12080
                        std::vector<void *> d(w);
                        std::vector<const void *> s(w);
                        std::vector<size_t> sz(w, n);
                        for (int i = 0; i < w; i++) d[i] = dst + i * n, s[i] = src + i * n;
                        cudaMemcpyAttributes at{};
                        at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
                        at.flags = cudaMemcpyFlagPreferOverlapWithCompute;
                        size_t idx = 0;
#if CUDART_VERSION >= 13000
                        CK(cudaMemcpyBatchAsync(d.data(), s.data(), sz.data(), w, &at, &idx, 1, st));
#else
                        size_t fail = 0;
                        CK(cudaMemcpyBatchAsync(d.data(), s.data(), sz.data(), w, &at, &idx, 1, &fail, st));
#endif
#endif
                    } else {
                        for (int i0 = 0; i0 < w; i0 += 128) {
                            struct uxn_copy_batch b;  // the kernel has the struct's name
                            const int k = std::min(128, w - i0);
                            for (int i = 0; i < k; i++)
                                b.d[i] = uxn_copy_desc{src + (i0 + i) * n, dst + (i0 + i) * n, n};
                            const unsigned blocks =
                                (unsigned)std::min<size_t>(64, std::max<size_t>(1, (n + 4095) / 4096));
                            uxn_copy_batch<<<dim3(blocks, k), 256, 0, st>>>(b);
                            CK(cudaGetLastError());
                        }
                    }
                    CK(cudaStreamSynchronize(st));
                    if (r >= 2) t[m].push_back(std::chrono::duration<double, std::micro>(clk::now() - a).count());
                }
            for (int m = 0; m < 3; m++) {
                std::sort(t[m].begin(), t[m].end());
                std::printf("CSV,%s,%d,%zu,%.2f,%.2f\n", names[m], w, n, t[m][0], t[m][t[m].size() / 2]);
            }
            std::fflush(stdout);
        }
    std::vector<unsigned char> h(cap / 1000);
    CK(cudaMemcpy(h.data(), dst, h.size(), cudaMemcpyDefault));
    for (unsigned char c : h)
        if (c != 1) {
            std::printf("FAIL: wrong bytes\n");
            return 1;
        }
    std::printf("DONE\n");
    return 0;
}
