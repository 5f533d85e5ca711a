// The kernels of nvshmem_kernel_upcxx (nvshmem_kernel_upcxx.cpp): NVSHMEM called from device
// code. Such a program links NVSHMEM's device library (CMake: upcxx_extra_nvshmem_add_device_code),
// and upcxx::extra::nvshmem_init() then initialises NVSHMEM through it, so the kernels see its state.
#include <cuda_runtime.h>
#include <nvshmem.h>

// field[i] = this PE's value for element i.
__global__ void fill(int *field, size_t n, int pe) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        field[i] = pe * 1000003 + static_cast<int>(i % 1000003);
}

// Each block puts its chunk of `field` into `inbox` on the next PE (a one-sided NVSHMEM put from the
// GPU: stores through NVSHMEM's mapping of the peer's heap on one node), then waits for its puts.
__global__ void put_to_next(int *inbox, const int *field, size_t n) {
    const int next = (nvshmem_my_pe() + 1) % nvshmem_n_pes();
    const size_t chunk = (n + gridDim.x - 1) / gridDim.x;
    const size_t lo = blockIdx.x * chunk;
    if (lo < n) {
        const size_t len = lo + chunk < n ? chunk : n - lo;
        nvshmemx_int_put_nbi_block(inbox + lo, field + lo, len, next);
    }
    nvshmem_quiet();
}

// Launched from the host program (which UPC++'s compiler wrapper or any C++ compiler builds).
cudaError_t launch_fill(int *field, size_t n, int pe, cudaStream_t s) {
    fill<<<256, 256, 0, s>>>(field, n, pe);
    return cudaGetLastError();
}

cudaError_t launch_put_to_next(int *inbox, const int *field, size_t n, cudaStream_t s) {
    put_to_next<<<64, 256, 0, s>>>(inbox, field, n);
    return cudaGetLastError();
}
