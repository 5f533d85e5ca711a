// The kernels of jacobi_upcxx (see jacobi_kernels.hpp). NVSHMEM is called from device code only
// in the sweep that writes the neighbours' halo rows (halo_write::nvshmem), which is why the
// program is linked with NVSHMEM's device library (upcxx_extra_nvshmem_add_device_code).
// SPDX-License-Identifier: BSD-3-Clause
#include <nvshmem.h>

#include <cmath>

#include "jacobi_kernels.hpp"

namespace jacobi {
namespace {

constexpr int block_x = 32, block_y = 32;  // one thread per cell, 1024 threads per block

// The block's sum of `v`, added to `*total` by one thread: each warp sums its lanes by shuffles,
// the first warp sums the warps' partial sums.
__device__ void add_block_sum(real v, real *total) {
    __shared__ real warp_sums[block_x * block_y / 32];
    const int t = threadIdx.y * blockDim.x + threadIdx.x, lane = t % 32, warp = t / 32;
    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (blockDim.x * blockDim.y) / 32 ? warp_sums[lane] : real(0);
        for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
        if (lane == 0) atomicAdd(total, v);
    }
}

template <halo_write How>
__global__ void __launch_bounds__(block_x *block_y) sweep_kernel(sweep s) {
    const int iy = blockIdx.y * blockDim.y + threadIdx.y + s.iy_start;
    const int ix = blockIdx.x * blockDim.x + threadIdx.x + 1;
    const int nx = s.nx;
    real change2 = 0;
    if (iy < s.iy_end && ix < nx - 1) {
        const real *a = s.a;
        const real v =
            real(0.25) * (a[iy * nx + ix + 1] + a[iy * nx + ix - 1] + a[(iy + 1) * nx + ix] + a[(iy - 1) * nx + ix]);
        s.a_new[iy * nx + ix] = v;
        const real d = v - a[iy * nx + ix];
        change2 = d * d;
        if constexpr (How == halo_write::local) {
            if (iy == s.iy_start) s.a_new[s.top_iy * nx + ix] = v;
            if (iy == s.iy_end - 1) s.a_new[s.bottom_iy * nx + ix] = v;
        } else if constexpr (How == halo_write::nvshmem) {
            if (iy == s.iy_start) nvshmem_float_p(s.a_new + s.top_iy * nx + ix, v, s.top_pe);
            if (iy == s.iy_end - 1) nvshmem_float_p(s.a_new + s.bottom_iy * nx + ix, v, s.bottom_pe);
        }
    }
    add_block_sum(change2, s.l2);
}

__global__ void boundaries_kernel(real *a, real *a_new, int first_row, int rows, int nx, int ny_interior) {
    const real two_pi = real(2.0 * 3.14159265358979323846);
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += blockDim.x * gridDim.x) {
        const real y0 = sinf(two_pi * real(first_row + r) / real(ny_interior - 1));
        const int row = (r + 1) * nx;
        a[row] = a[row + nx - 1] = a_new[row] = a_new[row + nx - 1] = y0;
    }
}

}  // namespace

cudaError_t launch_sweep(halo_write how, const sweep &s, cudaStream_t stream) {
    const int rows = s.iy_end - s.iy_start;
    if (rows <= 0) return cudaSuccess;
    const dim3 block(block_x, block_y), grid((s.nx + block_x - 1) / block_x, (rows + block_y - 1) / block_y);
    switch (how) {
        case halo_write::none:
            sweep_kernel<halo_write::none><<<grid, block, 0, stream>>>(s);
            break;
        case halo_write::local:
            sweep_kernel<halo_write::local><<<grid, block, 0, stream>>>(s);
            break;
        case halo_write::nvshmem:
            sweep_kernel<halo_write::nvshmem><<<grid, block, 0, stream>>>(s);
            break;
    }
    return cudaGetLastError();
}

cudaError_t set_boundaries(real *a, real *a_new, int first_row, int rows, int nx, int ny_interior) {
    boundaries_kernel<<<rows / 128 + 1, 128>>>(a, a_new, first_row, rows, nx, ny_interior);
    const cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

}  // namespace jacobi
