/* bench_translate: the cost of upcxx_extra_nvshmem_to_global_ptr / from_global_ptr against the
 * same arithmetic inlined in C, for peer tables of 2 .. 1,048,576 PEs.
 *
 *   bench_translate [--calls N] [--reps R] [--max-pes P]
 *
 * The heap is a malloc'd HOST buffer (no GPU): translation is address arithmetic only. Three cases
 * per size: "uniform+identity" (every PE's base equals mine, PE == rank: the library's O(1)
 * table; NVSHMEM with CUDA VMM), "random+identity" (random per-PE bases, PE == rank: NVSHMEM
 * without VMM) and "random+shuffled" (random per-PE bases, a random PE -> rank permutation). Each
 * timing is the median of R repetitions of a loop of N calls over random PEs and offsets
 * precomputed in arrays; the repetitions go round all the tables in turn (interleaved).
 * Each row also times the call floor (bench_floor.c: a function of the same signature in another
 * shared library that translates nothing), the least any out-of-line C ABI call can cost in this
 * loop. The same-run comparison with host nvshmem_ptr() on a real NVSHMEM heap is the timing
 * section of tests/c/heap_check.cu (NVSHMEM 3.x's headers and nvshmem_init need nvcc, not a C
 * compiler). Not a ctest. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_floor.h"
#include "upcxx_extra_nvshmem.h"

#define HEAP_SIZE ((size_t)1 << 20)
#define IDX_BITS 20 /* 1M precomputed (pe, offset) pairs, cycled */
#define IDX_N ((size_t)1 << IDX_BITS)
#define MAX_REPS 32

static uint64_t rng = 0x853c49e6748fea9bull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what, int st) {
    fprintf(stderr, "bench_translate: %s: %s (%d): %s\n", what, upcxx_extra_nvshmem_strerror(st), st,
            upcxx_extra_nvshmem_last_error());
    exit(1);
}

/* The data of one table. */
typedef struct {
    int n;
    int mode;           /* 0 uniform+identity, 1 random+identity, 2 random+shuffled */
    uintptr_t *bases;   /* by PE */
    int *rank_of_pe;    /* by PE */
    int *pe_of_rank;    /* by rank */
    uint32_t *idx_pe;   /* IDX_N random PEs */
    uint32_t *idx_off;  /* IDX_N random offsets */
    uintptr_t *idx_raw; /* bases[pe] + off, for from_global */
    int *idx_rank;      /* rank_of_pe[pe] */
} table;

static volatile uintptr_t sink;
static unsigned char *heap;
static const int my_pe = 1;

/* The timing loops of the library's calls and of the call floor's, stamped out by a macro rather
 * than sharing a function pointer, so that each is a direct call through the PLT as in a user's
 * code. */
#define DEFINE_TIME_TO(name, fn)                             \
    static double name(const table *t, long calls) {         \
        uintptr_t acc = 0;                                   \
        upcxx_extra_nvshmem_gptr_t g;                        \
        double t0 = now_ns();                                \
        for (long i = 0; i < calls; i++) {                   \
            size_t k = (size_t)i & (IDX_N - 1);              \
            fn(heap + t->idx_off[k], (int)t->idx_pe[k], &g); \
            acc += (uintptr_t)g.raw + (uintptr_t)g.rank;     \
        }                                                    \
        double dt = now_ns() - t0;                           \
        sink = acc;                                          \
        return dt / (double)calls;                           \
    }
#define DEFINE_TIME_FROM(name, fn)                                      \
    static double name(const table *t, long calls) {                    \
        uintptr_t acc = 0;                                              \
        void *sym;                                                      \
        int pe;                                                         \
        double t0 = now_ns();                                           \
        for (long i = 0; i < calls; i++) {                              \
            size_t k = (size_t)i & (IDX_N - 1);                         \
            fn(t->idx_rank[k], (const void *)t->idx_raw[k], &sym, &pe); \
            acc += (uintptr_t)sym + (uintptr_t)pe;                      \
        }                                                               \
        double dt = now_ns() - t0;                                      \
        sink = acc;                                                     \
        return dt / (double)calls;                                      \
    }
DEFINE_TIME_TO(time_lib_to, upcxx_extra_nvshmem_to_global_ptr)
DEFINE_TIME_TO(time_floor_to, uxn_bench_floor_to_global_ptr)
DEFINE_TIME_FROM(time_lib_from, upcxx_extra_nvshmem_from_global_ptr)
DEFINE_TIME_FROM(time_floor_from, uxn_bench_floor_from_global_ptr)

static double time_inline_to(const table *t, long calls) {
    uintptr_t acc = 0, my_base = (uintptr_t)heap;
    double t0 = now_ns();
    for (long i = 0; i < calls; i++) {
        size_t k = (size_t)i & (IDX_N - 1);
        uintptr_t sym = (uintptr_t)(heap + t->idx_off[k]);
        uint32_t pe = t->idx_pe[k];
        uintptr_t raw = t->bases[pe] + (sym - my_base);
        int rank = t->rank_of_pe[pe];
        acc += raw + (uintptr_t)rank;
    }
    double dt = now_ns() - t0;
    sink = acc;
    return dt / (double)calls;
}

static double time_inline_from(const table *t, long calls) {
    uintptr_t acc = 0, my_base = (uintptr_t)heap;
    double t0 = now_ns();
    for (long i = 0; i < calls; i++) {
        size_t k = (size_t)i & (IDX_N - 1);
        int pe = t->pe_of_rank[t->idx_rank[k]];
        uintptr_t sym = my_base + (t->idx_raw[k] - t->bases[pe]);
        acc += sym + (uintptr_t)pe;
    }
    double dt = now_ns() - t0;
    sink = acc;
    return dt / (double)calls;
}

static const char *const mode_name[3] = {"uniform+identity", "random+identity", "random+shuffled"};

static void build(table *t, int n, int mode) {
    int shuffled = mode == 2, random_bases = mode >= 1;
    t->n = n;
    t->mode = mode;
    t->bases = (uintptr_t *)malloc(sizeof(uintptr_t) * (size_t)n);
    t->rank_of_pe = (int *)malloc(sizeof(int) * (size_t)n);
    t->pe_of_rank = (int *)malloc(sizeof(int) * (size_t)n);
    t->idx_pe = (uint32_t *)malloc(sizeof(uint32_t) * IDX_N);
    t->idx_off = (uint32_t *)malloc(sizeof(uint32_t) * IDX_N);
    t->idx_raw = (uintptr_t *)malloc(sizeof(uintptr_t) * IDX_N);
    t->idx_rank = (int *)malloc(sizeof(int) * IDX_N);
    if (!t->bases || !t->rank_of_pe || !t->pe_of_rank || !t->idx_pe || !t->idx_off || !t->idx_raw || !t->idx_rank) {
        fprintf(stderr, "bench_translate: out of memory for %d PEs\n", n);
        exit(1);
    }
    for (int p = 0; p < n; p++) {
        t->rank_of_pe[p] = p;
        /* Random 1 MiB-aligned bases in [2^40, 2^46): never NULL, never overflowing. */
        t->bases[p] = random_bases ? ((uintptr_t)1 << 40) + ((uintptr_t)(next_rand() % ((uint64_t)1 << 26)) << 20)
                                   : (uintptr_t)heap;
    }
    t->bases[my_pe] = (uintptr_t)heap;
    if (shuffled)
        for (int p = n - 1; p > 0; p--) { /* Fisher-Yates */
            int q = (int)(next_rand() % (uint64_t)(p + 1));
            int tmp = t->rank_of_pe[p];
            t->rank_of_pe[p] = t->rank_of_pe[q];
            t->rank_of_pe[q] = tmp;
        }
    if (shuffled) { /* a shuffle can come out as the identity (one time in two at 2 PEs): rotate then */
        int identity = 1;
        for (int p = 0; p < n && identity; p++) identity = t->rank_of_pe[p] == p;
        if (identity)
            for (int p = 0; p < n; p++) t->rank_of_pe[p] = (p + 1) % n;
    }
    for (int p = 0; p < n; p++) t->pe_of_rank[t->rank_of_pe[p]] = p;
    for (size_t k = 0; k < IDX_N; k++) {
        uint32_t pe = (uint32_t)(next_rand() % (uint64_t)n);
        uint32_t off = (uint32_t)(next_rand() % HEAP_SIZE);
        t->idx_pe[k] = pe;
        t->idx_off[k] = off;
        t->idx_raw[k] = t->bases[pe] + off;
        t->idx_rank[k] = t->rank_of_pe[pe];
    }
}

static void release(table *t) {
    free(t->bases);
    free(t->rank_of_pe);
    free(t->pe_of_rank);
    free(t->idx_pe);
    free(t->idx_off);
    free(t->idx_raw);
    free(t->idx_rank);
}

/* Installs the table in the library and checks a sample of its answers against the inlined ones. */
static size_t install(const table *t) {
    upcxx_extra_nvshmem_heap_info_t info;
    memset(&info, 0, sizeof info);
    info.base = heap;
    info.size = HEAP_SIZE;
    info.mapped_size = HEAP_SIZE;
    info.my_pe = my_pe;
    info.n_pes = t->n; /* the attached heap's PE count equals the table size */
    info.device = -1;
    info.version_major = info.version_minor = info.version_patch = -1;
    int st = upcxx_extra_nvshmem_attach(&info);
    if (st) die("attach", st);
    upcxx_extra_nvshmem_peer_t *peers = (upcxx_extra_nvshmem_peer_t *)malloc(sizeof *peers * (size_t)t->n);
    if (!peers) die("malloc peers", 0);
    for (int p = 0; p < t->n; p++) {
        peers[p].rank = t->rank_of_pe[p];
        peers[p].base = (void *)t->bases[p];
    }
    st = upcxx_extra_nvshmem_set_peers(t->n, peers);
    free(peers);
    if (st) die("set_peers", st);
    for (size_t k = 0; k < 4096; k++) {
        upcxx_extra_nvshmem_gptr_t g;
        void *sym;
        int pe;
        st = upcxx_extra_nvshmem_to_global_ptr(heap + t->idx_off[k], (int)t->idx_pe[k], &g);
        if (st || (uintptr_t)g.raw != t->idx_raw[k] || g.rank != t->idx_rank[k]) die("to_global_ptr check", st);
        st = upcxx_extra_nvshmem_from_global_ptr(t->idx_rank[k], (const void *)t->idx_raw[k], &sym, &pe);
        if (st || sym != heap + t->idx_off[k] || pe != (int)t->idx_pe[k]) die("from_global_ptr check", st);
    }
    size_t bytes = 0;
    st = upcxx_extra_nvshmem_table_bytes(&bytes);
    if (st) die("table_bytes", st);
    return bytes;
}

int main(int argc, char **argv) {
    long calls = 10 * 1000 * 1000;
    int reps = 5, max_pes = 1 << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--calls") && i + 1 < argc)
            calls = atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-pes") && i + 1 < argc)
            max_pes = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--calls N] [--reps R] [--max-pes P]\n", argv[0]);
            return 2;
        }
    }
    if (calls < 1) calls = 1;
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;
    if (max_pes < 2) max_pes = 2;
    heap = (unsigned char *)malloc(HEAP_SIZE);
    if (!heap) return 1;

    printf("upcxx-extra-nvshmem %s: %ld calls per timing, median of %d; random PEs and offsets in a %zu-byte heap\n\n",
           upcxx_extra_nvshmem_version(), calls, reps, HEAP_SIZE);
    printf(
        "| n_pes | case | to_global_ptr ns | floor ns | inline ns | to / inline | from_global_ptr ns | floor ns | "
        "inline ns | from / inline | table_bytes |\n");
    printf("|------:|------|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    /* Every table is built first; then each repetition installs each table in turn and times all
     * six loops on it, so slow drift of the host (clock, neighbours) spreads over every row
     * instead of favouring the rows measured first. The figures are medians over repetitions. */
    enum { LIB_TO, FLOOR_TO, INLINE_TO, LIB_FROM, FLOOR_FROM, INLINE_FROM, NF };
    double (*const fns[NF])(const table *, long) = {time_lib_to,   time_floor_to,   time_inline_to,
                                                    time_lib_from, time_floor_from, time_inline_from};
    const int sizes[] = {2, 16, 256, 4096, 65536, 1 << 20};
    enum { MAX_TABLES = 3 * (int)(sizeof sizes / sizeof sizes[0]) };
    static table tabs[MAX_TABLES];
    static double v[MAX_TABLES][NF][MAX_REPS];
    size_t bytes[MAX_TABLES];
    int ntab = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0] && sizes[s] <= max_pes; s++)
        for (int mode = 0; mode < 3; mode++) build(&tabs[ntab++], sizes[s], mode);
    for (int r = 0; r < reps; r++)
        for (int t = 0; t < ntab; t++) {
            bytes[t] = install(&tabs[t]);
            for (int f = 0; f < NF; f++) {
                fns[f](&tabs[t], calls / 10 + 1); /* warm up */
                v[t][f][r] = fns[f](&tabs[t], calls);
            }
        }
    for (int t = 0; t < ntab; t++) {
        double m[NF];
        for (int f = 0; f < NF; f++) m[f] = median(v[t][f], reps);
        printf("| %d | %s | %.2f | %.2f | %.2f | %.1fx | %.2f | %.2f | %.2f | %.1fx | %zu |\n", tabs[t].n,
               mode_name[tabs[t].mode], m[LIB_TO], m[FLOOR_TO], m[INLINE_TO], m[LIB_TO] / m[INLINE_TO], m[LIB_FROM],
               m[FLOOR_FROM], m[INLINE_FROM], m[LIB_FROM] / m[INLINE_FROM], bytes[t]);
        release(&tabs[t]);
    }
    upcxx_extra_nvshmem_detach();

    free(heap);
    return 0;
}
