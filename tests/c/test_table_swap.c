/* Replacing the table: set_peers twice (and many times), attach again, detach; after detach
 * every translation gives TABLE_NOT_SET. The heaps are host memory (see uxn_test.h). */
#include "uxn_test.h"

#define HEAP_SIZE ((size_t)8192)

static int rank_identity(int pe, int n) {
    (void)n;
    return pe;
}

/* Checks every PE at a few offsets against (rank_of_pe, bases by rank). */
static void check_table(const uxn_heap *h, const uintptr_t *base_of_rank, int (*rank_of_pe)(int, int), int uniform,
                        const char *what) {
    const int n = uxn_size;
    const size_t offs[] = {0, 1, HEAP_SIZE - 1};
    for (int pe = 0; pe < n; pe++) {
        for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k++) {
            upcxx_extra_nvshmem_gptr_t g;
            EXPECT_OK(upcxx_extra_nvshmem_to_global_ptr(h->base + offs[k], pe, &g));
            int r = rank_of_pe(pe, n);
            uintptr_t raw = (uniform ? (uintptr_t)h->base : base_of_rank[r]) + offs[k];
            CHECK(g.rank == r && (uintptr_t)g.raw == raw,
                  "%s: PE %d offset %zu -> {rank %d, raw %p}, expected {%d, 0x%" PRIxPTR "}", what, pe, offs[k], g.rank,
                  g.raw, r, raw);
            void *sym = NULL;
            int back = -1;
            EXPECT_OK(upcxx_extra_nvshmem_from_global_ptr(r, (void *)raw, &sym, &back));
            CHECK(sym == h->base + offs[k] && back == pe, "%s: back from rank %d: {%p, PE %d}", what, r, sym, back);
        }
    }
}

int main(int argc, char **argv) {
    uxn_init(&argc, &argv);
    const int n = uxn_size, me = uxn_rank;
    upcxx_extra_nvshmem_gptr_t g;
    size_t bytes = 0, off = 0;
    void *sym = NULL;
    int pe = -1;

    uxn_heap h = uxn_heap_alloc(HEAP_SIZE);
    uintptr_t *bases = uxn_gather_bases(&h);
    /* The PE numbering is fixed by the attach (my_pe); the maps below keep my rank at that PE. To
     * swap between maps with different my_pe, attach again. */
    int my_pe_rot = uxn_pe_of_rank(me, n, uxn_rotate);
    upcxx_extra_nvshmem_heap_info_t info = uxn_info(&h, my_pe_rot, n, -1);
    EXPECT_OK(upcxx_extra_nvshmem_attach(&info));
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_table_bytes(&bytes));

    /* First table: rotated ranks, real bases. */
    upcxx_extra_nvshmem_peer_t *rot = uxn_peers(n, uxn_rotate, bases);
    EXPECT_OK(upcxx_extra_nvshmem_set_peers(n, rot));
    check_table(&h, bases, uxn_rotate, 0, "rotate");
    EXPECT_OK(upcxx_extra_nvshmem_table_bytes(&bytes));
    CHECK(bytes == (n > 1 ? 16 * (size_t)n : 0), "table_bytes %zu (rotate)", bytes);

    /* Second table on the same heap: the same ranks but every base equal to mine (as with CUDA
     * VMM): the bases array goes, the rank map stays. */
    upcxx_extra_nvshmem_peer_t *rot_uniform = uxn_peers(n, uxn_rotate, bases);
    for (int p = 0; p < n; p++) rot_uniform[p].base = h.base;
    EXPECT_OK(upcxx_extra_nvshmem_set_peers(n, rot_uniform));
    check_table(&h, bases, uxn_rotate, 1, "rotate, uniform bases");
    EXPECT_OK(upcxx_extra_nvshmem_table_bytes(&bytes));
    CHECK(bytes == (n > 1 ? 8 * (size_t)n : 0), "table_bytes %zu (rotate, uniform)", bytes);

    /* Back and forth many times: every swap takes effect at once. */
    for (int i = 0; i < 500; i++) {
        int uni = i & 1;
        EXPECT_OK(upcxx_extra_nvshmem_set_peers(n, uni ? rot_uniform : rot));
        EXPECT_OK(upcxx_extra_nvshmem_to_global_ptr(h.base + 7, (i + 1) % n, &g));
        uintptr_t want = (uni ? (uintptr_t)h.base : bases[uxn_rotate((i + 1) % n, n)]) + 7;
        CHECK((uintptr_t)g.raw == want, "swap %d: raw %p, expected 0x%" PRIxPTR, i, g.raw, want);
    }

    /* A new attach (another PE numbering) drops the table. */
    int my_pe_rev = uxn_pe_of_rank(me, n, uxn_reverse);
    info = uxn_info(&h, my_pe_rev, n, -1);
    EXPECT_OK(upcxx_extra_nvshmem_attach(&info));
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_to_global_ptr(h.base, 0, &g));
    EXPECT_LAST_ERROR("the peer table is not set");
    upcxx_extra_nvshmem_peer_t *rev = uxn_peers(n, uxn_reverse, bases);
    EXPECT_OK(upcxx_extra_nvshmem_set_peers(n, rev));
    check_table(&h, bases, uxn_reverse, 0, "reverse");

    /* Uniform bases and PE == rank: an O(1) table. */
    info = uxn_info(&h, me, n, -1);
    EXPECT_OK(upcxx_extra_nvshmem_attach(&info));
    upcxx_extra_nvshmem_peer_t *ident = uxn_peers(n, rank_identity, bases);
    for (int p = 0; p < n; p++) ident[p].base = h.base;
    EXPECT_OK(upcxx_extra_nvshmem_set_peers(n, ident));
    EXPECT_OK(upcxx_extra_nvshmem_table_bytes(&bytes));
    CHECK(bytes == 0, "table_bytes %zu for uniform bases and identity", bytes);
    check_table(&h, bases, rank_identity, 1, "identity, uniform");

    /* Another heap: the old one's addresses are out of it. */
    uxn_heap h2 = uxn_heap_alloc(HEAP_SIZE * 2);
    info = uxn_info(&h2, me, n, -1);
    EXPECT_OK(upcxx_extra_nvshmem_attach(&info));
    for (int p = 0; p < n; p++) ident[p].base = h2.base;
    EXPECT_OK(upcxx_extra_nvshmem_set_peers(n, ident));
    EXPECT_OK(upcxx_extra_nvshmem_to_global_ptr(h2.base + HEAP_SIZE * 2 - 1, 0, &g));
    if (h.base < h2.base || h.base >= h2.base + 2 * HEAP_SIZE) {
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP, upcxx_extra_nvshmem_to_global_ptr(h.base, 0, &g));
    }

    /* detach: every translation call is TABLE_NOT_SET; set_peers runs discovery (no NVSHMEM: NOT_LOADED). */
    EXPECT_OK(upcxx_extra_nvshmem_detach());
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_to_global_ptr(h2.base, 0, &g));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_to_global_ptr", "no heap is known");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_from_global_ptr(0, h2.base, &sym, &pe));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_from_global_ptr", "no heap is known");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_table_bytes(&bytes));
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_offset(h2.base, &off));
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NOT_LOADED, upcxx_extra_nvshmem_set_peers(n, ident));
    EXPECT_OK(upcxx_extra_nvshmem_detach()); /* twice is fine */

    free(ident);
    free(rev);
    free(rot_uniform);
    free(rot);
    free(bases);
    uxn_heap_free(&h2);
    uxn_heap_free(&h);
    return uxn_finish("test_table_swap");
}
