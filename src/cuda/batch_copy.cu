// The kernels of heap.copy's batched fast path and of the stream operations (src/cuda.rs loads
// their PTX, batch_copy.ptx). Block (x, y) copies its share of descriptor y: gridDim.y
// descriptors, gridDim.x blocks each. 16-byte accesses when both ends are 16-byte aligned, bytes
// otherwise.
#include <stddef.h>
#include <stdint.h>

struct uxn_copy_desc {
    const unsigned char *src;
    unsigned char *dst;
    size_t bytes;
};
// 128 descriptors: UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX, src/cuda.rs BATCH_MAX (its test reads the
// parameter's size in the PTX).
struct uxn_copy_batch {
    uxn_copy_desc d[128];
};
// A completion word the launch writes once every block's copies landed: `counter` is a zeroed
// word of device memory this launch alone uses (left zeroed again), `word` a word of host memory
// mapped for the device that the host polls, `value` what is stored there.
struct uxn_signal {
    unsigned int *counter;
    unsigned int *word;
    unsigned int value;
};

__device__ void uxn_copy_share(const uxn_copy_desc d) {
    const size_t threads = (size_t)gridDim.x * blockDim.x;
    const size_t me = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if ((((uintptr_t)d.src | (uintptr_t)d.dst) & 15) == 0) {
        const size_t n16 = d.bytes / 16;
        const int4 *s = (const int4 *)d.src;
        int4 *t = (int4 *)d.dst;
        size_t i = me;
        for (; i + 3 * threads < n16; i += 4 * threads) {  // four loads in flight, then their stores
            const int4 a = s[i], b = s[i + threads], c = s[i + 2 * threads], e = s[i + 3 * threads];
            t[i] = a;
            t[i + threads] = b;
            t[i + 2 * threads] = c;
            t[i + 3 * threads] = e;
        }
        for (; i < n16; i += threads) t[i] = s[i];
        done = n16 * 16;
    }
    for (size_t i = done + me; i < d.bytes; i += threads) d.dst[i] = d.src[i];
}

extern "C" __global__ void uxn_copy_batch(const uxn_copy_batch b) { uxn_copy_share(b.d[blockIdx.y]); }

// One copy: a lone copy's launch (copy_on_stream above the batch size, a batch of one), whose
// parameter is 24 bytes instead of a batch's 3 KiB.
extern "C" __global__ void uxn_copy_one(const uxn_copy_desc d) { uxn_copy_share(d); }

// The launch's completion word, after the copies of every block: each block's stores are made
// visible to the device before it counts itself done (a device-scope fence by one thread after
// the block's barrier); the last block to count (atomicInc wraps the counter back to zero) makes
// every block's stores visible to the system with one system-scope fence (cumulative: it covers
// the stores the counter ordered before it), then stores the value. A lone block only fences and
// stores.
__device__ void uxn_signal_done(const uxn_signal sig) {
    __syncthreads();
    if (threadIdx.x != 0) return;
    const unsigned blocks = gridDim.x * gridDim.y;
    if (blocks > 1) {  // one block: no other to wait for
        __threadfence();
        if (atomicInc(sig.counter, blocks - 1) != blocks - 1) return;
    }
    __threadfence_system();
    *(volatile unsigned int *)sig.word = sig.value;
}

// The same copies, then the completion word (copies on a caller's stream and their completion in
// one launch).
extern "C" __global__ void uxn_copy_batch_signal(const struct uxn_copy_batch b, const uxn_signal sig) {
    uxn_copy_share(b.d[blockIdx.y]);
    uxn_signal_done(sig);
}

// One copy, then the completion word: copy_on_stream's launch, whose parameter is 48 bytes
// instead of a batch's 3 KiB (what the driver copies at each launch).
extern "C" __global__ void uxn_copy_one_signal(const uxn_copy_desc d, const uxn_signal sig) {
    uxn_copy_share(d);
    uxn_signal_done(sig);
}
