/* Translation both ways across ranks, exhaustively over every PE and several offsets, with heap
 * bases that differ per rank and PE -> rank maps that are not the identity.
 *
 * The heap is host memory (see uxn_test.h): no GPU is involved. */
#include "uxn_test.h"

#define HEAP_SIZE ((size_t)1 << 16)

static int run_map(const uxn_heap *h, const uintptr_t *base_of_rank, int (*rank_of_pe)(int, int),
                   const char *map_name) {
    const int n = uxn_size, me = uxn_rank;
    const int my_pe = uxn_pe_of_rank(me, n, rank_of_pe);
    const size_t offs[] = {0, 1, 8, HEAP_SIZE / 2 + 3, HEAP_SIZE - 1};
    const int n_offs = (int)(sizeof offs / sizeof offs[0]);
    const int device = 3; /* a made-up ordinal: only echoed back for the local PE */
    int failures_before = uxn_failures;

    upcxx_extra_nvshmem_heap_info_t info = uxn_info(h, my_pe, n, device);
    EXPECT_OK(upcxx_extra_nvshmem_attach(&info));

    /* heap_query reports the attached heap. */
    upcxx_extra_nvshmem_heap_info_t q;
    memset(&q, 0xff, sizeof q);
    EXPECT_OK(upcxx_extra_nvshmem_heap_query(&q));
    CHECK(q.base == (void *)h->base && q.size == h->size && q.my_pe == my_pe && q.n_pes == n && q.device == device,
          "heap_query: base %p size %zu my_pe %d n_pes %d device %d", q.base, q.size, q.my_pe, q.n_pes, q.device);
    CHECK(q.source == UPCXX_EXTRA_NVSHMEM_SOURCE_MANUAL, "heap_query source %d, expected MANUAL", (int)q.source);

    upcxx_extra_nvshmem_peer_t *peers = uxn_peers(n, rank_of_pe, base_of_rank);
    EXPECT_OK(upcxx_extra_nvshmem_set_peers(n, peers));

    /* table_bytes: 8 per PE for the bases unless all equal mine, 8 more unless PE == rank. */
    int uniform = 1, identity = 1;
    for (int pe = 0; pe < n; pe++) {
        uniform &= peers[pe].base == (void *)h->base;
        identity &= peers[pe].rank == pe;
    }
    size_t bytes = (size_t)-1, want_bytes = (uniform ? 0 : 8 * (size_t)n) + (identity ? 0 : 8 * (size_t)n);
    EXPECT_OK(upcxx_extra_nvshmem_table_bytes(&bytes));
    CHECK(bytes == want_bytes, "table_bytes %zu, expected %zu", bytes, want_bytes);

    /* The owner's bytes: rank r's heap holds pattern(r, off) at every offset. */
    for (size_t off = 0; off < h->size; off++) h->base[off] = (unsigned char)(me * 37 + off * 11 + 1);

    /* Every (PE, offset): to_global_ptr, checked against the gathered bases; from_global_ptr back. */
    uint64_t *raws = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)n * (size_t)n_offs);
    for (int pe = 0; pe < n; pe++) {
        for (int k = 0; k < n_offs; k++) {
            size_t off = offs[k];
            void *sym = h->base + off;
            size_t got_off = (size_t)-1;
            EXPECT_OK(upcxx_extra_nvshmem_offset(sym, &got_off));
            CHECK(got_off == off, "offset(base + %zu) = %zu", off, got_off);

            upcxx_extra_nvshmem_gptr_t g;
            memset(&g, 0xee, sizeof g);
            EXPECT_OK(upcxx_extra_nvshmem_to_global_ptr(sym, pe, &g));
            int want_rank = rank_of_pe(pe, n);
            uintptr_t want_raw = base_of_rank[want_rank] + off;
            CHECK(g.rank == want_rank && g.pe == pe && (uintptr_t)g.raw == want_raw,
                  "%s: to_global_ptr(base + %zu, PE %d) = {rank %d, pe %d, raw %p}, expected {rank %d, raw 0x%" PRIxPTR
                  "}",
                  map_name, off, pe, g.rank, g.pe, g.raw, want_rank, want_raw);
            CHECK(g.device == (pe == my_pe ? device : -1), "to_global_ptr(PE %d).device = %d", pe, g.device);
            raws[(size_t)pe * (size_t)n_offs + (size_t)k] = (uint64_t)(uintptr_t)g.raw;

            void *back = NULL;
            int back_pe = -7;
            EXPECT_OK(upcxx_extra_nvshmem_from_global_ptr(g.rank, g.raw, &back, &back_pe));
            CHECK(back == sym && back_pe == pe, "%s: from_global_ptr(rank %d, %p) = {%p, PE %d}, expected {%p, PE %d}",
                  map_name, g.rank, g.raw, back, back_pe, sym, pe);
        }
    }

    /* Just outside every rank's heap, in both directions. */
    for (int r = 0; r < n; r++) {
        void *back = NULL;
        int back_pe = -1;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP,
                      upcxx_extra_nvshmem_from_global_ptr(r, (void *)(base_of_rank[r] + h->size), &back, &back_pe));
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP,
                      upcxx_extra_nvshmem_from_global_ptr(r, (void *)(base_of_rank[r] - 1), &back, &back_pe));
    }

    /* The owners confirm: every rank's translations are gathered; each rank checks the ones that
     * name it lie in its own heap at the right offset, reads its bytes there, and translates them
     * back itself; the bytes go back to the asker, who checks them against the pattern. */
    size_t per = (size_t)n * (size_t)n_offs;
    uint64_t *all = (uint64_t *)malloc(sizeof(uint64_t) * per * (size_t)n);
    MPI_Allgather(raws, (int)per, MPI_UINT64_T, all, (int)per, MPI_UINT64_T, MPI_COMM_WORLD);
    int *seen = (int *)malloc(sizeof(int) * per * (size_t)n);
    for (int asker = 0; asker < n; asker++) {
        for (int pe = 0; pe < n; pe++) {
            for (int k = 0; k < n_offs; k++) {
                size_t i = (size_t)asker * per + (size_t)pe * (size_t)n_offs + (size_t)k;
                seen[i] = -1;
                if (rank_of_pe(pe, n) != me) continue;
                uintptr_t raw = (uintptr_t)all[i];
                CHECK(raw == (uintptr_t)h->base + offs[k],
                      "%s: rank %d translated (PE %d, offset %zu) to 0x%" PRIxPTR ", but my heap has it at %p",
                      map_name, asker, pe, offs[k], raw, (void *)(h->base + offs[k]));
                if (raw >= (uintptr_t)h->base && raw < (uintptr_t)h->base + h->size) {
                    seen[i] = *(const unsigned char *)raw;
                    void *sym = NULL;
                    int back_pe = -1;
                    EXPECT_OK(upcxx_extra_nvshmem_from_global_ptr(me, (void *)raw, &sym, &back_pe));
                    CHECK(sym == h->base + offs[k] && back_pe == my_pe,
                          "owner's from_global_ptr(%d, 0x%" PRIxPTR ") = {%p, %d}", me, raw, sym, back_pe);
                }
            }
        }
    }
    int *seen_all = (int *)malloc(sizeof(int) * per * (size_t)n);
    MPI_Allreduce(seen, seen_all, (int)(per * (size_t)n), MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    for (int pe = 0; pe < n; pe++) {
        for (int k = 0; k < n_offs; k++) {
            int owner = rank_of_pe(pe, n);
            int want = (unsigned char)(owner * 37 + offs[k] * 11 + 1);
            int got = seen_all[(size_t)me * per + (size_t)pe * (size_t)n_offs + (size_t)k];
            CHECK(got == want, "%s: the byte at my translation of (PE %d, offset %zu) on rank %d is %d, expected %d",
                  map_name, pe, offs[k], owner, got, want);
        }
    }

    free(seen_all);
    free(seen);
    free(all);
    free(raws);
    free(peers);
    EXPECT_OK(upcxx_extra_nvshmem_detach());
    return uxn_failures - failures_before;
}

int main(int argc, char **argv) {
    uxn_init(&argc, &argv);
    uxn_heap h = uxn_heap_alloc(HEAP_SIZE);
    uintptr_t *bases = uxn_gather_bases(&h);
    for (int a = 0; a < uxn_size; a++)
        for (int b = a + 1; b < uxn_size; b++)
            CHECK(bases[a] != bases[b], "ranks %d and %d have the same heap base 0x%" PRIxPTR, a, b, bases[a]);

    run_map(&h, bases, uxn_rotate, "PE p = rank (p+1)%n");
    run_map(&h, bases, uxn_reverse, "PE p = rank n-1-p");

    free(bases);
    uxn_heap_free(&h);
    return uxn_finish("test_roundtrip");
}
