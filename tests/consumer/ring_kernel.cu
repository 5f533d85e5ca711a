// The kernel of ring_kernel (tests/consumer): NVSHMEM called from device code, so the program
// links NVSHMEM's device library and nvshmem_init() must initialise it.
#include <nvshmem.h>

// Every PE writes its PE number into `slot` on the next PE.
__global__ void put_my_pe(int *slot) {
    const int me = nvshmem_my_pe();
    nvshmem_int_p(slot, me, (me + 1) % nvshmem_n_pes());
}

int launch_put_my_pe(int *slot) {
    put_my_pe<<<1, 1>>>(slot);
    return static_cast<int>(cudaDeviceSynchronize());
}
