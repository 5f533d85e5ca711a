/* The call floor (bench_floor.c): same signatures as the translation calls, no translation. */
#ifndef UXN_BENCH_FLOOR_H
#define UXN_BENCH_FLOOR_H
#include "upcxx_extra_nvshmem.h"
#ifdef __cplusplus
extern "C" {
#endif
enum upcxx_extra_nvshmem_status_t uxn_bench_floor_to_global_ptr(const void *sym_addr, int pe,
                                                                upcxx_extra_nvshmem_gptr_t *out);
enum upcxx_extra_nvshmem_status_t uxn_bench_floor_from_global_ptr(int rank, const void *raw, void **sym_addr, int *pe);
#ifdef __cplusplus
}
#endif
#endif
