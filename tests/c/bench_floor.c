/* bench_floor: the cost floor of any exported translation call. Two functions with exactly the
 * signatures of upcxx_extra_nvshmem_to_global_ptr / from_global_ptr that do no translation at
 * all (they copy their arguments into the results), built as their own shared library so that a
 * call to them goes through the PLT like a call into libupcxx_extra_nvshmem does. Whatever a
 * C ABI translation costs beyond these is the translation; what these cost, no out-of-line
 * implementation can avoid. Used by bench_translate and tests/c/heap_check.cu; not a test. */
#include "upcxx_extra_nvshmem.h"

__attribute__((visibility("default"))) enum upcxx_extra_nvshmem_status_t uxn_bench_floor_to_global_ptr(
    const void *sym_addr, int pe, upcxx_extra_nvshmem_gptr_t *out) {
    if (!sym_addr || !out) return UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT;
    out->rank = pe;
    out->device = -1;
    out->raw = (void *)sym_addr;
    out->pe = pe;
    return UPCXX_EXTRA_NVSHMEM_STATUS_OK;
}

__attribute__((visibility("default"))) enum upcxx_extra_nvshmem_status_t uxn_bench_floor_from_global_ptr(
    int rank, const void *raw, void **sym_addr, int *pe) {
    if (!raw || !sym_addr || !pe) return UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT;
    *sym_addr = (void *)raw;
    *pe = rank;
    return UPCXX_EXTRA_NVSHMEM_STATUS_OK;
}
