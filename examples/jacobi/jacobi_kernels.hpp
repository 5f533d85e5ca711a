// The GPU side of jacobi_upcxx (jacobi_kernels.cu, compiled by nvcc): the Jacobi sweep over one row
// slab, its L2 norm, the left and right boundary condition. The host side (jacobi.cpp, the C++
// compiler with UPC++'s flags) sees only these declarations.
// SPDX-License-Identifier: BSD-3-Clause
#ifndef UXN_EXAMPLES_JACOBI_KERNELS_HPP
#define UXN_EXAMPLES_JACOBI_KERNELS_HPP

#include <cuda_runtime_api.h>

namespace jacobi {

/// The mesh's element type: single precision, as NVIDIA's NVSHMEM solver (nvshmem_float_p).
using real = float;

/// Where a sweep writes the new values of its first and last row besides the slab itself.
enum class halo_write {
    none,     // nowhere: the rows are moved after the sweep (-halo copy, -halo upcxx)
    local,    // into rows of the same array with plain stores (the single-GPU reference)
    nvshmem,  // into the neighbours' halo rows with nvshmem_float_p (-halo device)
};

/// One sweep: rows [iy_start, iy_end) of an array `nx` wide are computed into `a_new` from `a`
/// (columns 1 .. nx-2; columns 0 and nx-1 hold the boundary condition). The squared change of
/// every cell is added to `*l2`. With halo_write::local / nvshmem the new row iy_start is also
/// written to row top_iy (of PE top_pe) and row iy_end-1 to row bottom_iy (of PE bottom_pe).
struct sweep {
    real *a_new;
    const real *a;
    real *l2;
    int iy_start, iy_end, nx;
    int top_pe, top_iy, bottom_pe, bottom_iy;
};

/// Launches one sweep on `stream` (blocks of 32 x 32 threads); the launch's error.
cudaError_t launch_sweep(halo_write how, const sweep &s, cudaStream_t stream);

/// Sets the left and right boundary (columns 0 and nx-1) of rows 1 .. rows of `a` and `a_new`:
/// sin(2 pi g / (ny_interior - 1)) for the interior row g = first_row + (row - 1) of the mesh
/// (0-based among the ny - 2 interior rows). Waits for it; the error.
cudaError_t set_boundaries(real *a, real *a_new, int first_row, int rows, int nx, int ny_interior);

}  // namespace jacobi

#endif  // UXN_EXAMPLES_JACOBI_KERNELS_HPP
