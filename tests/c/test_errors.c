/* Every status of upcxx_extra_nvshmem_status_t that can be produced without NVSHMEM, through the
 * public header, with last_error() checked to name what was wrong (the function, the address,
 * the PE, the rank...). The heap is host memory (see uxn_test.h).
 *
 * Not here:
 *   NOT_INITIALIZED, STEP_UNAVAILABLE, UNSUPPORTED_LAYOUT: test_nvshmem_loaded.c (needs the
 *     NVSHMEM host library);
 *   VALIDATION_FAILED, CUDA_ERROR: need an initialised NVSHMEM / a CUDA driver (a GPU): left to
 *     the Rust tests and GPU runs;
 *   PANIC: a correct library never panics; it is the boundary's net for bugs. */
#include "uxn_test.h"

#define HEAP_SIZE ((size_t)4096)

int main(int argc, char **argv) {
    uxn_init(&argc, &argv);
    const int n = uxn_size, me = uxn_rank, my_pe = uxn_pe_of_rank(me, n, uxn_reverse);
    char hx[32], hx2[32], want[512];
    upcxx_extra_nvshmem_heap_info_t q;
    upcxx_extra_nvshmem_gptr_t g;
    void *sym = NULL;
    int pe = -1;
    size_t off = 0;

    /* Nothing has failed yet. */
    CHECK(strcmp(upcxx_extra_nvshmem_last_error(), "") == 0, "last_error before any failure: \"%s\"",
          upcxx_extra_nvshmem_last_error());
    CHECK(strcmp(upcxx_extra_nvshmem_version(), "@never@") != 0 && upcxx_extra_nvshmem_version()[0] != '\0',
          "version is empty");

    /* The header's version macros name the library they belong to. */
    CHECK(strcmp(UPCXX_EXTRA_NVSHMEM_VERSION_STRING, upcxx_extra_nvshmem_version()) == 0, "header %s, library %s",
          UPCXX_EXTRA_NVSHMEM_VERSION_STRING, upcxx_extra_nvshmem_version());
    CHECK(UPCXX_EXTRA_NVSHMEM_VERSION_MAJOR >= 0 && UPCXX_EXTRA_NVSHMEM_VERSION_MINOR >= 0 &&
              UPCXX_EXTRA_NVSHMEM_VERSION_PATCH >= 0,
          "version macros");

    /* strerror: every status has its own description; unknown values do not crash. */
    for (int s = 0; s <= UPCXX_EXTRA_NVSHMEM_STATUS_PANIC; s++) {
        const char *d = upcxx_extra_nvshmem_strerror(s);
        CHECK(d && d[0], "strerror(%d) is empty", s);
        for (int t = 0; t < s; t++)
            CHECK(strcmp(d, upcxx_extra_nvshmem_strerror(t)) != 0, "strerror(%d) == strerror(%d)", s, t);
    }
    CHECK(strstr(upcxx_extra_nvshmem_strerror(12345), "unknown") != NULL, "strerror(12345) = %s",
          upcxx_extra_nvshmem_strerror(12345));
    CHECK(strstr(upcxx_extra_nvshmem_strerror(-1), "unknown") != NULL, "strerror(-1) = %s",
          upcxx_extra_nvshmem_strerror(-1));

    /* NOT_LOADED: no NVSHMEM in this process and nothing attached. */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NOT_LOADED, upcxx_extra_nvshmem_heap_query(&q));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_heap_query", "no libnvshmem_host.so is loaded");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NOT_LOADED,
                  upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB, &(upcxx_extra_nvshmem_location_t){0}));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_locate", "libnvshmem_host.so");
    /* TABLE_NOT_SET with no heap at all: the translation calls never run discovery. */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_offset(&q, &off));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_offset", "no heap is known");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_to_global_ptr(&q, 0, &g));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_to_global_ptr", "no heap is known");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_from_global_ptr(0, &q, &sym, &pe));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_from_global_ptr", "no heap is known");
    size_t tb = 0;
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_table_bytes(&tb));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_table_bytes");

    /* NULL_ARGUMENT, naming the argument. */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_heap_query(NULL));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_heap_query", "out is NULL");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_attach(NULL));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_attach", "info is NULL");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_to_global_ptr(NULL, 0, &g));
    EXPECT_LAST_ERROR("sym_addr is NULL");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_to_global_ptr(&q, 0, NULL));
    EXPECT_LAST_ERROR("out is NULL");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_from_global_ptr(0, NULL, &sym, &pe));
    EXPECT_LAST_ERROR("raw is NULL");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_from_global_ptr(0, &q, NULL, &pe));
    EXPECT_LAST_ERROR("sym_addr is NULL");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_from_global_ptr(0, &q, &sym, NULL));
    EXPECT_LAST_ERROR("pe is NULL");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_offset(NULL, &off));
    EXPECT_LAST_ERROR("addr is NULL");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_set_peers(1, NULL));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_set_peers", "peers is NULL");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_table_bytes(NULL));
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_locate(0, NULL));
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_report(NULL));
    EXPECT_LAST_ERROR("file is NULL");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT, upcxx_extra_nvshmem_report_buffer(NULL, 10, NULL));
    EXPECT_LAST_ERROR("buf is NULL but len is 10");

    /* BUFFER_TOO_SMALL: the needed size is written; with it the report fits. */
    {
        char one[1] = {'x'};
        size_t needed = 0;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BUFFER_TOO_SMALL, upcxx_extra_nvshmem_report_buffer(one, 0, &needed));
        snprintf(want, sizeof want, "needs %zu bytes, the buffer has 0", needed);
        EXPECT_LAST_ERROR("upcxx_extra_nvshmem_report_buffer", want);
        CHECK(needed >= 1, "needed = %zu", needed);
        if (needed > 1) { /* a 1-byte buffer is too small for any non-empty report */
            EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BUFFER_TOO_SMALL,
                          upcxx_extra_nvshmem_report_buffer(one, 1, &needed));
            snprintf(want, sizeof want, "needs %zu bytes, the buffer has 1", needed);
            EXPECT_LAST_ERROR(want);
        }
        char *buf = (char *)malloc(needed);
        size_t needed2 = 0;
        EXPECT_OK(upcxx_extra_nvshmem_report_buffer(buf, needed, &needed2));
        CHECK(needed2 == needed && strlen(buf) + 1 == needed, "report: needed %zu then %zu, strlen %zu", needed,
              needed2, strlen(buf));
        free(buf);
    }

    /* INVALID_ARGUMENT: source selection. */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_select_source(99));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_select_source", "99 is not a source");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_select_source(-1));
    EXPECT_LAST_ERROR("-1 is not a source");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                  upcxx_extra_nvshmem_select_source(UPCXX_EXTRA_NVSHMEM_SOURCE_MANUAL));
    EXPECT_LAST_ERROR("MANUAL is not a resolution step");
    EXPECT_OK(upcxx_extra_nvshmem_select_source(UPCXX_EXTRA_NVSHMEM_SOURCE_NONE));
    {
        upcxx_extra_nvshmem_location_t loc;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                      upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_MANUAL, &loc));
        EXPECT_LAST_ERROR("upcxx_extra_nvshmem_locate", "MANUAL is not a resolution step");
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_locate(42, &loc));
        EXPECT_LAST_ERROR("42 is not a source");
    }

    /* INVALID_ARGUMENT / BAD_PE: bad heap descriptions are refused. */
    uxn_heap h = uxn_heap_alloc(HEAP_SIZE);
    upcxx_extra_nvshmem_heap_info_t info = uxn_info(&h, my_pe, n, -1);
    {
        upcxx_extra_nvshmem_heap_info_t bad = info;
        bad.size = 0;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_attach(&bad));
        EXPECT_LAST_ERROR("upcxx_extra_nvshmem_attach", "heap size is 0");
        bad = info;
        bad.base = NULL;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_attach(&bad));
        EXPECT_LAST_ERROR("heap base is NULL");
        bad = info;
        bad.size = SIZE_MAX;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_attach(&bad));
        EXPECT_LAST_ERROR(uxn_hex(hx, (uintptr_t)h.base), "overflows the address space");
        bad = info;
        bad.mapped_size = HEAP_SIZE + 1;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_attach(&bad));
        EXPECT_LAST_ERROR("mapped_size 0x1001 exceeds the heap size 0x1000");
        bad = info;
        bad.n_pes = 0;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_attach(&bad));
        EXPECT_LAST_ERROR("n_pes is 0");
        bad = info;
        bad.my_pe = n + 6;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE, upcxx_extra_nvshmem_attach(&bad));
        snprintf(want, sizeof want, "my_pe %d is not in [0, %d)", n + 6, n);
        EXPECT_LAST_ERROR("upcxx_extra_nvshmem_attach", want);
        bad = info;
        bad.my_pe = -1;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE, upcxx_extra_nvshmem_attach(&bad));
        EXPECT_LAST_ERROR("my_pe -1 is not in");
        /* A failed attach leaves nothing attached. */
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_to_global_ptr(h.base, 0, &g));
    }

    EXPECT_OK(upcxx_extra_nvshmem_attach(&info));

    /* TABLE_NOT_SET with a heap but no peers: names the heap range and my PE. */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_to_global_ptr(h.base, 0, &g));
    snprintf(want, sizeof want, "heap [%s, %s) of PE %d", uxn_hex(hx, (uintptr_t)h.base),
             uxn_hex(hx2, (uintptr_t)h.base + HEAP_SIZE), my_pe);
    EXPECT_LAST_ERROR("the peer table is not set", want);
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_from_global_ptr(0, h.base, &sym, &pe));
    EXPECT_LAST_ERROR("the peer table is not set");

    /* OUT_OF_HEAP from offset() with a heap attached (no table needed). */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP, upcxx_extra_nvshmem_offset(h.base + HEAP_SIZE, &off));
    snprintf(want, sizeof want, "address %s is outside the symmetric heap", uxn_hex(hx, (uintptr_t)h.base + HEAP_SIZE));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_offset", want);
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP, upcxx_extra_nvshmem_offset(h.base - 1, &off));
    EXPECT_LAST_ERROR(uxn_hex(hx, (uintptr_t)h.base - 1));

    /* set_peers refusals. */
    uintptr_t *bases = uxn_gather_bases(&h);
    upcxx_extra_nvshmem_peer_t *peers = uxn_peers(n, uxn_reverse, bases);
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_set_peers(0, peers));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_set_peers", "n_pes is 0");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_set_peers(n + 1, peers));
    snprintf(want, sizeof want, "n_pes is %d but the heap has %d PE%s", n + 1, n, n == 1 ? "" : "s");
    EXPECT_LAST_ERROR(want);
    {
        upcxx_extra_nvshmem_peer_t *bad = (upcxx_extra_nvshmem_peer_t *)malloc(sizeof *bad * (size_t)n);
        memcpy(bad, peers, sizeof *bad * (size_t)n);
        bad[my_pe].base = h.base + 16; /* my entry must carry my heap base */
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_set_peers(n, bad));
        snprintf(want, sizeof want, "the entry for my PE %d has base %s, but the heap base is %s", my_pe,
                 uxn_hex(hx, (uintptr_t)h.base + 16), uxn_hex(hx2, (uintptr_t)h.base));
        EXPECT_LAST_ERROR(want);
        memcpy(bad, peers, sizeof *bad * (size_t)n);
        bad[0].rank = n + 7; /* rank out of range (BAD_RANK) */
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK, upcxx_extra_nvshmem_set_peers(n, bad));
        snprintf(want, sizeof want, "PE 0 maps to rank %d, not in [0, %d)", n + 7, n);
        EXPECT_LAST_ERROR("upcxx_extra_nvshmem_set_peers", want);
        memcpy(bad, peers, sizeof *bad * (size_t)n);
        bad[0].rank = -3;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK, upcxx_extra_nvshmem_set_peers(n, bad));
        EXPECT_LAST_ERROR("PE 0 maps to rank -3");
        if (n >= 2) {
            memcpy(bad, peers, sizeof *bad * (size_t)n);
            int other = my_pe == 0 ? 1 : 0;
            bad[other].rank = bad[my_pe].rank; /* two PEs, one rank */
            EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK, upcxx_extra_nvshmem_set_peers(n, bad));
            snprintf(want, sizeof want, "rank %d is given to both PE %d and PE %d", bad[my_pe].rank,
                     my_pe < other ? my_pe : other, my_pe < other ? other : my_pe);
            EXPECT_LAST_ERROR(want);
            memcpy(bad, peers, sizeof *bad * (size_t)n);
            bad[other].base = NULL; /* a peer's base of NULL */
            EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, upcxx_extra_nvshmem_set_peers(n, bad));
            snprintf(want, sizeof want, "PE %d has heap base 0x0", other);
            EXPECT_LAST_ERROR(want);
        }
        free(bad);
    }
    /* Refusals leave no table. */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_to_global_ptr(h.base, 0, &g));

    EXPECT_OK(upcxx_extra_nvshmem_set_peers(n, peers));

    /* BAD_PE / OUT_OF_HEAP from to_global_ptr; the message names the PE / the address. */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE, upcxx_extra_nvshmem_to_global_ptr(h.base + 5, n, &g));
    snprintf(want, sizeof want, "PE %d is not in [0, %d) (address %s)", n, n, uxn_hex(hx, (uintptr_t)h.base + 5));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_to_global_ptr", want);
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE, upcxx_extra_nvshmem_to_global_ptr(h.base, -1, &g));
    EXPECT_LAST_ERROR("PE -1 is not in");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE, upcxx_extra_nvshmem_to_global_ptr(h.base, 7 + n, &g));
    snprintf(want, sizeof want, "PE %d is not in", 7 + n);
    EXPECT_LAST_ERROR(want);
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP, upcxx_extra_nvshmem_to_global_ptr(h.base + HEAP_SIZE, 0, &g));
    snprintf(want, sizeof want, "address %s is outside the symmetric heap [%s, %s) of PE %d",
             uxn_hex(hx, (uintptr_t)h.base + HEAP_SIZE), uxn_hex(hx2, (uintptr_t)h.base),
             uxn_hex((char[32]){0}, (uintptr_t)h.base + HEAP_SIZE), my_pe);
    EXPECT_LAST_ERROR(want);

    /* BAD_RANK / OUT_OF_HEAP from from_global_ptr. */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK, upcxx_extra_nvshmem_from_global_ptr(n, h.base, &sym, &pe));
    snprintf(want, sizeof want, "rank %d is not in [0, %d) (address %s)", n, n, uxn_hex(hx, (uintptr_t)h.base));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_from_global_ptr", want);
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK, upcxx_extra_nvshmem_from_global_ptr(-2, h.base, &sym, &pe));
    EXPECT_LAST_ERROR("rank -2 is not in");
    {
        int r = (me + 1) % n, r_pe = uxn_pe_of_rank(r, n, uxn_reverse);
        uintptr_t raw = bases[r] + HEAP_SIZE;
        EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP,
                      upcxx_extra_nvshmem_from_global_ptr(r, (void *)raw, &sym, &pe));
        snprintf(want, sizeof want, "address %s on rank %d (PE %d) is outside that PE's heap [%s, ", uxn_hex(hx, raw),
                 r, r_pe, uxn_hex(hx2, bases[r]));
        EXPECT_LAST_ERROR(want);
    }

    /* A failure leaves the table in place; successes do not clear last_error. */
    EXPECT_OK(upcxx_extra_nvshmem_to_global_ptr(h.base, 0, &g));
    CHECK(g.rank == uxn_reverse(0, n) && (uintptr_t)g.raw == bases[g.rank], "to_global_ptr(base, 0) = {%d, %p}", g.rank,
          g.raw);
    EXPECT_LAST_ERROR("is outside that PE's heap");

    /* After detach: TABLE_NOT_SET again. */
    EXPECT_OK(upcxx_extra_nvshmem_detach());
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, upcxx_extra_nvshmem_to_global_ptr(h.base, 0, &g));
    EXPECT_LAST_ERROR("no heap is known");

    free(peers);
    free(bases);
    uxn_heap_free(&h);
    return uxn_finish("test_errors");
}
