// The kernel of heap.copy's batched fast path (src/cuda.rs loads its PTX, batch_copy.ptx).
// Block (x, y) copies its share of descriptor y: gridDim.y descriptors, gridDim.x blocks each.
// 16-byte accesses when both ends are 16-byte aligned, bytes otherwise.
#include <stddef.h>
#include <stdint.h>

struct uxn_copy_desc {
    const unsigned char *src;
    unsigned char *dst;
    size_t bytes;
};
// Must equal UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX (src/cuda.rs: BATCH_MAX).
struct uxn_copy_batch {
    uxn_copy_desc d[128];
};

extern "C" __global__ void uxn_copy_batch(const uxn_copy_batch b) {
    const uxn_copy_desc d = b.d[blockIdx.y];
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if ((((uintptr_t)d.src | (uintptr_t)d.dst) & 15) == 0) {
        const size_t n16 = d.bytes / 16;
        const int4 *s = (const int4 *)d.src;
        int4 *t = (int4 *)d.dst;
        for (size_t i = first; i < n16; i += stride) t[i] = s[i];
        done = n16 * 16;
    }
    for (size_t i = done + first; i < d.bytes; i += stride) d.dst[i] = d.src[i];
}
