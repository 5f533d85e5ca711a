/* Translation from several threads while the main thread swaps the table: every result must be
 * consistent with one of the two tables (never a mix), and last_error is per thread.
 * The heap is host memory (see uxn_test.h). */
#include "uxn_test.h"

#include <pthread.h>
#include <stdatomic.h>

#define HEAP_SIZE ((size_t)1 << 20)
#define N_THREADS 4
#define ITERS 200000

static uxn_heap heap;
static uintptr_t *bases;
static upcxx_extra_nvshmem_peer_t *table_a, *table_b; /* both: rotated ranks; B: uniform bases */
static atomic_int stop;

typedef struct {
    int id;
    long failures, from_a, from_b;
} worker;

static void *work(void *arg) {
    worker *w = (worker *)arg;
    const int n = uxn_size;
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(w->id + 1);
    for (long i = 0; i < ITERS || !atomic_load(&stop); i++) {
        if (i >= 20 * ITERS) break;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int pe = (int)(x % (uint64_t)n);
        size_t off = (size_t)(x >> 20) % HEAP_SIZE;
        upcxx_extra_nvshmem_gptr_t g;
        if (upcxx_extra_nvshmem_to_global_ptr(heap.base + off, pe, &g) != UPCXX_EXTRA_NVSHMEM_STATUS_OK) {
            w->failures++;
            continue;
        }
        int r = table_a[pe].rank;
        int is_a = g.rank == r && (uintptr_t)g.raw == (uintptr_t)table_a[pe].base + off;
        int is_b = g.rank == r && (uintptr_t)g.raw == (uintptr_t)table_b[pe].base + off;
        if (is_a) w->from_a++;
        if (is_b) w->from_b++;
        if (!is_a && !is_b) w->failures++;
        void *sym = NULL;
        int back = -1;
        if (upcxx_extra_nvshmem_from_global_ptr(g.rank, g.raw, &sym, &back) == UPCXX_EXTRA_NVSHMEM_STATUS_OK) {
            if (back != pe || sym != heap.base + off) {
                /* Legal only if the table changed in between and the raw reads differently under the
                 * other table: recheck the pair against both. */
                if (!(n > 1 && (uintptr_t)table_a[pe].base != (uintptr_t)table_b[pe].base)) w->failures++;
            }
        }
        /* A per-thread error message. */
        if ((i & 1023) == 0) {
            int bad_pe = n + w->id;
            if (upcxx_extra_nvshmem_to_global_ptr(heap.base, bad_pe, &g) != UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE)
                w->failures++;
            char want[64];
            snprintf(want, sizeof want, "PE %d is not in", bad_pe);
            if (!strstr(upcxx_extra_nvshmem_last_error(), want)) {
                fprintf(stderr, "[rank %d] thread %d: last_error \"%s\" lacks \"%s\"\n", uxn_rank, w->id,
                        upcxx_extra_nvshmem_last_error(), want);
                w->failures++;
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    uxn_init(&argc, &argv);
    const int n = uxn_size;
    heap = uxn_heap_alloc(HEAP_SIZE);
    bases = uxn_gather_bases(&heap);
    const int my_pe = uxn_pe_of_rank(uxn_rank, n, uxn_rotate);
    upcxx_extra_nvshmem_heap_info_t info = uxn_info(&heap, my_pe, n, -1);
    EXPECT_OK(upcxx_extra_nvshmem_attach(&info));
    table_a = uxn_peers(n, uxn_rotate, bases);
    table_b = uxn_peers(n, uxn_rotate, bases);
    for (int p = 0; p < n; p++) table_b[p].base = heap.base;
    EXPECT_OK(upcxx_extra_nvshmem_set_peers(n, table_a));

    for (int round = 0; round < 2; round++) { /* the second round: new threads, fresh caches */
        pthread_t th[N_THREADS];
        worker w[N_THREADS];
        atomic_store(&stop, 0);
        for (int t = 0; t < N_THREADS; t++) {
            w[t] = (worker){.id = t};
            if (pthread_create(&th[t], NULL, work, &w[t]) != 0) UXN_FAIL("pthread_create");
        }
        int swaps = 0;
        for (; swaps < 2000; swaps++) EXPECT_OK(upcxx_extra_nvshmem_set_peers(n, (swaps & 1) ? table_a : table_b));
        atomic_store(&stop, 1);
        long fa = 0, fb = 0;
        for (int t = 0; t < N_THREADS; t++) {
            pthread_join(th[t], NULL);
            CHECK(w[t].failures == 0, "round %d thread %d: %ld inconsistent results", round, t, w[t].failures);
            fa += w[t].from_a;
            fb += w[t].from_b;
        }
        if (uxn_rank == 0)
            printf("round %d: %d swaps; results matching table A %ld, table B %ld\n", round, swaps, fa, fb);
    }
    /* The main thread's own last_error is untouched by the workers'. */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK,
                  upcxx_extra_nvshmem_from_global_ptr(-5, heap.base, &(void *){0}, &(int){0}));
    EXPECT_LAST_ERROR("rank -5 is not in");
    EXPECT_OK(upcxx_extra_nvshmem_detach());
    free(table_a);
    free(table_b);
    free(bases);
    uxn_heap_free(&heap);
    return uxn_finish("test_threads");
}
