/* Shared helpers of the C tests of upcxx-extra-nvshmem, and their one CHECK format (CHECK,
 * EXPECT_STATUS, EXPECT_LAST_ERROR, uxn_finish): the C ABI's tests from C and CUDA use it, the GPU
 * one (heap_check.cu) included; the C++ layer's tests have tests/cxx/check.hpp.
 *
 * No GPU in test_*.c: the "symmetric heap" every test attaches with upcxx_extra_nvshmem_attach is
 * a plain malloc'd HOST buffer standing in for NVSHMEM's device heap. The library only does address
 * arithmetic on it, so host memory exercises exactly the same code. Each MPI rank mallocs its own
 * buffer and uses it from a rank-dependent offset, so the heap bases differ from rank to rank
 * even when malloc happens to return the same address in every process. */
#ifndef UXN_TEST_H
#define UXN_TEST_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "upcxx_extra_nvshmem.h"

/* ctest's SKIP_RETURN_CODE. */
#define UXN_SKIP 77

static int uxn_rank = 0;
static int uxn_size = 1;
static int uxn_failures = 0;
static int uxn_checks = 0;

#define UXN_FAIL(...)                                                             \
    do {                                                                          \
        fprintf(stderr, "[rank %d] %s:%d: FAIL: ", uxn_rank, __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                                             \
        fputc('\n', stderr);                                                      \
        uxn_failures++;                                                           \
    } while (0)

#define CHECK(cond, ...)                                                                                 \
    do {                                                                                                 \
        uxn_checks++;                                                                                    \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "[rank %d] %s:%d: CHECK(%s) failed: ", uxn_rank, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                                \
            fputc('\n', stderr);                                                                         \
            uxn_failures++;                                                                              \
        }                                                                                                \
    } while (0)

static inline const char *uxn_status_name(int s) {
    switch (s) {
        case UPCXX_EXTRA_NVSHMEM_STATUS_OK:
            return "OK";
        case UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT:
            return "NULL_ARGUMENT";
        case UPCXX_EXTRA_NVSHMEM_STATUS_NOT_LOADED:
            return "NOT_LOADED";
        case UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED:
            return "NOT_INITIALIZED";
        case UPCXX_EXTRA_NVSHMEM_STATUS_UNSUPPORTED_LAYOUT:
            return "UNSUPPORTED_LAYOUT";
        case UPCXX_EXTRA_NVSHMEM_STATUS_VALIDATION_FAILED:
            return "VALIDATION_FAILED";
        case UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP:
            return "OUT_OF_HEAP";
        case UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE:
            return "BAD_PE";
        case UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK:
            return "BAD_RANK";
        case UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET:
            return "TABLE_NOT_SET";
        case UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT:
            return "INVALID_ARGUMENT";
        case UPCXX_EXTRA_NVSHMEM_STATUS_STEP_UNAVAILABLE:
            return "STEP_UNAVAILABLE";
        case UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR:
            return "CUDA_ERROR";
        case UPCXX_EXTRA_NVSHMEM_STATUS_BUFFER_TOO_SMALL:
            return "BUFFER_TOO_SMALL";
        case UPCXX_EXTRA_NVSHMEM_STATUS_PANIC:
            return "PANIC";
        default:
            return "?";
    }
}

/* Checks that `call` returns `want`; on a mismatch prints both and the last error. */
#define EXPECT_STATUS(want, call)                                                                                 \
    do {                                                                                                          \
        int uxn_got_ = (int)(call);                                                                               \
        uxn_checks++;                                                                                             \
        if (uxn_got_ != (int)(want)) {                                                                            \
            fprintf(stderr, "[rank %d] %s:%d: %s returned %s (%d), expected %s (%d); last_error: %s\n", uxn_rank, \
                    __FILE__, __LINE__, #call, uxn_status_name(uxn_got_), uxn_got_, uxn_status_name((int)(want)), \
                    (int)(want), upcxx_extra_nvshmem_last_error());                                               \
            uxn_failures++;                                                                                       \
        }                                                                                                         \
    } while (0)

#define EXPECT_OK(call) EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_OK, call)

/* Checks that the last error contains every one of the NULL-terminated substrings. */
#define EXPECT_LAST_ERROR(...) uxn_expect_last_error(__FILE__, __LINE__, __VA_ARGS__, (const char *)NULL)

static inline void uxn_expect_last_error(const char *file, int line, ...) {
    const char *msg = upcxx_extra_nvshmem_last_error();
    va_list ap;
    va_start(ap, line);
    for (const char *want = va_arg(ap, const char *); want; want = va_arg(ap, const char *)) {
        uxn_checks++;
        if (!msg || !strstr(msg, want)) {
            fprintf(stderr, "[rank %d] %s:%d: last_error \"%s\" does not contain \"%s\"\n", uxn_rank, file, line,
                    msg ? msg : "(null)", want);
            uxn_failures++;
        }
    }
    va_end(ap);
}

/* "0x..." as the library prints addresses (lower-case hex, no padding). */
static inline const char *uxn_hex(char buf[32], uintptr_t v) {
    snprintf(buf, 32, "0x%" PRIxPTR, v);
    return buf;
}

static inline void uxn_init(int *argc, char ***argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &uxn_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &uxn_size);
}

/* Sums the failures over all ranks, reports, finalises MPI; the process's exit status. */
static inline int uxn_finish(const char *name) {
    int total = 0, checks = 0;
    MPI_Allreduce(&uxn_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&uxn_checks, &checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (uxn_rank == 0)
        printf("%s: %d ranks, %d checks, %d failures: %s\n", name, uxn_size, checks, total,
               total ? "FAILED" : "passed");
    MPI_Finalize();
    return total ? 1 : 0;
}

/* The stand-in heap: host memory (see the top of this file). */
typedef struct uxn_heap {
    unsigned char *alloc; /* what malloc returned */
    unsigned char *base;  /* the heap base: alloc + a rank-dependent offset */
    size_t size;
} uxn_heap;

static inline uxn_heap uxn_heap_alloc(size_t size) {
    uxn_heap h;
    size_t shift = 64 * (size_t)(uxn_rank + 1);
    h.alloc = (unsigned char *)malloc(size + shift);
    if (!h.alloc) {
        fprintf(stderr, "[rank %d] malloc(%zu) failed\n", uxn_rank, size + shift);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    h.base = h.alloc + shift;
    h.size = size;
    memset(h.alloc, 0, size + shift);
    return h;
}

static inline void uxn_heap_free(uxn_heap *h) {
    free(h->alloc);
    h->alloc = h->base = NULL;
}

static inline upcxx_extra_nvshmem_heap_info_t uxn_info(const uxn_heap *h, int my_pe, int n_pes, int device) {
    upcxx_extra_nvshmem_heap_info_t info;
    memset(&info, 0, sizeof info);
    info.base = h->base;
    info.size = h->size;
    info.mapped_size = h->size;
    info.my_pe = my_pe;
    info.n_pes = n_pes;
    info.device = device;
    info.version_major = info.version_minor = info.version_patch = -1;
    info.source = UPCXX_EXTRA_NVSHMEM_SOURCE_NONE;
    return info;
}

/* Every rank's heap base, indexed by rank (MPI_Allgather). */
static inline uintptr_t *uxn_gather_bases(const uxn_heap *h) {
    uint64_t mine = (uint64_t)(uintptr_t)h->base;
    uint64_t *all = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)uxn_size);
    uintptr_t *out = (uintptr_t *)malloc(sizeof(uintptr_t) * (size_t)uxn_size);
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < uxn_size; r++) out[r] = (uintptr_t)all[r];
    free(all);
    return out;
}

/* PE -> rank maps that are not the identity (for n > 1). */
static inline int uxn_rotate(int pe, int n) { return (pe + 1) % n; }
static inline int uxn_reverse(int pe, int n) { return n - 1 - pe; }

/* The peers array for a PE -> rank map, bases gathered by rank. Caller frees. */
static inline upcxx_extra_nvshmem_peer_t *uxn_peers(int n, int (*rank_of_pe)(int, int), const uintptr_t *base_of_rank) {
    upcxx_extra_nvshmem_peer_t *p = (upcxx_extra_nvshmem_peer_t *)malloc(sizeof *p * (size_t)n);
    for (int pe = 0; pe < n; pe++) {
        p[pe].rank = rank_of_pe(pe, n);
        p[pe].base = (void *)base_of_rank[p[pe].rank];
    }
    return p;
}

static inline int uxn_pe_of_rank(int rank, int n, int (*rank_of_pe)(int, int)) {
    for (int pe = 0; pe < n; pe++)
        if (rank_of_pe(pe, n) == rank) return pe;
    return -1;
}

#endif
