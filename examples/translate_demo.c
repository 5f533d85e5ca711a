/* A CPU-only demonstration of the C API (no GPU, no NVSHMEM needed): a host buffer stands in for
 * this PE's symmetric heap (upcxx_extra_nvshmem_attach), the table describes 4 PEs with different
 * heap bases and a PE -> rank map that is not the identity, and addresses are translated both
 * ways. In a real job, upcxx_extra_nvshmem_heap_query() finds NVSHMEM's heap instead of attach.
 *   cc translate_demo.c $(pkg-config --cflags --libs upcxx-extra-nvshmem) */
#include <stdio.h>
#include <stdlib.h>

#include "upcxx_extra_nvshmem.h"

static int check(upcxx_extra_nvshmem_status_t s, const char *what) {
    if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK)
        printf("  %s -> %s: %s\n", what, upcxx_extra_nvshmem_strerror(s), upcxx_extra_nvshmem_last_error());
    return s == UPCXX_EXTRA_NVSHMEM_STATUS_OK;
}

int main(void) {
    enum { N_PES = 4, MY_PE = 1 };
    static char heap[1 << 16]; /* stands in for NVSHMEM's heap on this PE */
    upcxx_extra_nvshmem_heap_info_t info = {0};
    info.base = heap;
    info.size = sizeof heap;
    info.mapped_size = sizeof heap;
    info.my_pe = MY_PE;
    info.n_pes = N_PES;
    info.device = -1;
    if (!check(upcxx_extra_nvshmem_attach(&info), "attach")) return 1;

    /* Every PE's heap base (in its own address space) and UPC++ rank, as a job would exchange them. */
    upcxx_extra_nvshmem_peer_t peers[N_PES];
    for (int pe = 0; pe < N_PES; pe++) {
        peers[pe].rank = (pe + 1) % N_PES;
        peers[pe].base =
            pe == MY_PE ? (void *)heap : (void *)(0x7f0000000000ull + (unsigned long long)pe * 0x100000000ull);
    }
    if (!check(upcxx_extra_nvshmem_set_peers(N_PES, peers), "set_peers")) return 1;

    void *sym = heap + 4096; /* a symmetric object at offset 4096 */
    printf("symmetric object %p (offset 4096 in my heap [%p, +%zu), PE %d)\n", sym, (void *)heap, sizeof heap, MY_PE);
    for (int pe = 0; pe < N_PES; pe++) {
        upcxx_extra_nvshmem_gptr_t g;
        if (!check(upcxx_extra_nvshmem_to_global_ptr(sym, pe, &g), "to_global_ptr")) return 1;
        void *back;
        int back_pe;
        if (!check(upcxx_extra_nvshmem_from_global_ptr(g.rank, g.raw, &back, &back_pe), "from_global_ptr")) return 1;
        printf("  PE %d's copy -> UPC++ rank %d, raw %p -> back to %p on PE %d %s\n", pe, g.rank, g.raw, back, back_pe,
               back == sym && back_pe == pe ? "(round trip ok)" : "(MISMATCH)");
        if (back != sym || back_pe != pe) return 1;
    }
    printf("bad input gets a status and a message, never a crash:\n");
    upcxx_extra_nvshmem_gptr_t g;
    check(upcxx_extra_nvshmem_to_global_ptr(heap + sizeof heap, 0, &g), "to_global_ptr(one past the heap, PE 0)");
    check(upcxx_extra_nvshmem_to_global_ptr(sym, N_PES, &g), "to_global_ptr(sym, PE 4)");
    check(upcxx_extra_nvshmem_to_global_ptr(NULL, 0, &g), "to_global_ptr(NULL, PE 0)");
    size_t bytes = 0;
    upcxx_extra_nvshmem_table_bytes(&bytes);
    printf("table: %zu bytes for %d PEs\n", bytes, N_PES);
    upcxx_extra_nvshmem_detach();
    return 0;
}
