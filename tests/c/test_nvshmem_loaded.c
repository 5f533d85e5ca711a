/* With NVSHMEM's host library loaded but not initialised (no GPU needed): discovery's steps and
 * the statuses that need NVSHMEM in the process: NOT_INITIALIZED, STEP_UNAVAILABLE and, by
 * corrupting the located state's version field on purpose, UNSUPPORTED_LAYOUT.
 *
 * The library to load is named by UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB (a libnvshmem_host.so.3,
 * e.g. from the nvidia-nvshmem-cu12 wheel); without it the test is skipped (exit 77).
 * The heap attached at the end is host memory (see uxn_test.h). */
#include "uxn_test.h"

#include <dlfcn.h>

int main(int argc, char **argv) {
    uxn_init(&argc, &argv);
    const char *path = getenv("UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB");
    if (!path || !*path) {
        if (uxn_rank == 0)
            printf("SKIP: UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB is not set (the path of a libnvshmem_host.so.3)\n");
        MPI_Finalize();
        return UXN_SKIP;
    }
    char hx[32], want[256];
    upcxx_extra_nvshmem_heap_info_t q;
    upcxx_extra_nvshmem_location_t loc;

    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NOT_LOADED, upcxx_extra_nvshmem_heap_query(&q));
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NOT_LOADED,
                  upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB, &loc));

    void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        UXN_FAIL("dlopen(%s): %s", path, dlerror());
        return uxn_finish("test_nvshmem_loaded");
    }
    if (uxn_rank == 0) printf("loaded %s\n", path);

    /* NOT_INITIALIZED: loaded, never initialised. */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED, upcxx_extra_nvshmem_heap_query(&q));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_heap_query", "libnvshmem_host.so", "nvshmemx_init_status()",
                      "not initialised");
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED, upcxx_extra_nvshmem_set_peers_from_nvshmem(NULL));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_set_peers_from_nvshmem", "not initialised");
    size_t off = 0;
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET,
                  upcxx_extra_nvshmem_offset(&off, &off)); /* translation never discovers */

    /* SYMTAB works before initialisation: a host address with version field 0x10000 + size.
     * (NVSHMEM's state is in .bss, all zero until nvshmem_init: the library must not read the
     * zeroed version field as an unknown layout.) */
    memset(&loc, 0, sizeof loc);
    int symtab_ok =
        upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB, &loc) == UPCXX_EXTRA_NVSHMEM_STATUS_OK;
    CHECK(symtab_ok, "locate(SYMTAB) before nvshmem_init must be OK; last_error: %s", upcxx_extra_nvshmem_last_error());
    CHECK(loc.source == UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB, "source %d", (int)loc.source);
    CHECK(loc.symbol_size >= 64 && loc.symbol_size < 0x10000, "symbol_size %zu", loc.symbol_size);
    /* Zero until nvshmem_init fills the state (it lives in .bss); then exactly 0x10000 + size. */
    CHECK(loc.version_field == 0 || loc.version_field == 0x10000u + (uint32_t)loc.symbol_size,
          "version_field 0x%x, symbol_size %zu", loc.version_field, loc.symbol_size);
    CHECK(!loc.is_device_address && loc.address != NULL, "address %p, device %d", loc.address,
          (int)loc.is_device_address);
    CHECK(loc.library && strstr(loc.library, "libnvshmem_host.so"), "library %s", loc.library ? loc.library : "(null)");
    if (uxn_rank == 0)
        printf("SYMTAB: %s: state at %p, %zu bytes, version field 0x%x\n", loc.library, loc.address, loc.symbol_size,
               loc.version_field);

    /* DLSYM: the wheels' builds do not export nvshmemi_device_state. */
    upcxx_extra_nvshmem_location_t l2;
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_STEP_UNAVAILABLE,
                  upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_DLSYM, &l2));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_locate", "nvshmemi_device_state is not exported");

    /* CUMODULE: needs the CUDA driver (none here) and an initialised NVSHMEM. */
    int st = upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_CUMODULE, &l2);
    CHECK(st == UPCXX_EXTRA_NVSHMEM_STATUS_STEP_UNAVAILABLE || st == UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED,
          "locate(CUMODULE) = %s: %s", uxn_status_name(st), upcxx_extra_nvshmem_last_error());
    if (st == UPCXX_EXTRA_NVSHMEM_STATUS_STEP_UNAVAILABLE) {
        const char *m = upcxx_extra_nvshmem_last_error();
        CHECK(strstr(m, "CUDA driver") || strstr(m, "nvshmemx_cumodule_init is not exported"), "locate(CUMODULE): %s",
              m);
    } else {
        EXPECT_LAST_ERROR("needs an initialised NVSHMEM");
    }

    if (!symtab_ok) { /* the rest needs the located state */
        UXN_FAIL("locate(SYMTAB) failed: skipping the checks that need the state's address");
        return uxn_finish("test_nvshmem_loaded");
    }

    /* NONE: the first step that works (SYMTAB here); the same state. */
    memset(&l2, 0, sizeof l2);
    EXPECT_OK(upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_NONE, &l2));
    CHECK(l2.source == UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB && l2.address == loc.address &&
              l2.version_field == loc.version_field,
          "locate(NONE): source %d address %p", (int)l2.source, l2.address);

    /* UNSUPPORTED_LAYOUT: a state whose version field this library does not know. The field is
     * the first 4 bytes of the state (host .data of the library); changed here, restored after. */
    uint32_t *version = (uint32_t *)loc.address;
    uint32_t saved = *version;
    *version = 0xdeadbeefu;
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_UNSUPPORTED_LAYOUT,
                  upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB, &l2));
    snprintf(want, sizeof want, ".symtab nvshmemi_device_state at %s", uxn_hex(hx, (uintptr_t)loc.address));
    EXPECT_LAST_ERROR("upcxx_extra_nvshmem_locate", want,
                      "version field 0xdeadbeef does not have the major tag 0x10000");
    /* All steps: the layout problem is the most telling status. */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_UNSUPPORTED_LAYOUT,
                  upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_NONE, &l2));
    EXPECT_LAST_ERROR("no resolution step found the NVSHMEM state", "[symtab]");
    *version = 0x10000u + (uint32_t)loc.symbol_size + 8; /* right tag, wrong size */
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_UNSUPPORTED_LAYOUT,
                  upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB, &l2));
    snprintf(want, sizeof want, "claims a %zu-byte state but the symbol is %zu bytes", loc.symbol_size + 8,
             loc.symbol_size);
    EXPECT_LAST_ERROR(want);
    /* The value nvshmem_init writes passes the check. */
    *version = 0x10000u + (uint32_t)loc.symbol_size;
    EXPECT_OK(upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB, &l2));
    CHECK(l2.version_field == 0x10000u + (uint32_t)loc.symbol_size, "version_field 0x%x", l2.version_field);
    *version = saved;
    EXPECT_OK(upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB, &l2));

    /* Selecting a step; discovery still reports NOT_INITIALIZED. */
    EXPECT_OK(upcxx_extra_nvshmem_select_source(UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB));
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED, upcxx_extra_nvshmem_heap_query(&q));
    EXPECT_OK(upcxx_extra_nvshmem_select_source(UPCXX_EXTRA_NVSHMEM_SOURCE_NONE));

    /* A heap attached by hand wins over NVSHMEM's; detached, discovery answers again. */
    uxn_heap h = uxn_heap_alloc(4096);
    upcxx_extra_nvshmem_heap_info_t info = uxn_info(&h, 0, 1, -1);
    EXPECT_OK(upcxx_extra_nvshmem_attach(&info));
    memset(&q, 0, sizeof q);
    EXPECT_OK(upcxx_extra_nvshmem_heap_query(&q));
    CHECK(q.source == UPCXX_EXTRA_NVSHMEM_SOURCE_MANUAL && q.base == (void *)h.base,
          "heap_query after attach: source %d base %p", (int)q.source, q.base);
    EXPECT_OK(upcxx_extra_nvshmem_detach());
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED, upcxx_extra_nvshmem_heap_query(&q));
    uxn_heap_free(&h);

    /* The report works with NVSHMEM loaded. */
    size_t needed = 0;
    EXPECT_STATUS(UPCXX_EXTRA_NVSHMEM_STATUS_BUFFER_TOO_SMALL, upcxx_extra_nvshmem_report_buffer(want, 0, &needed));
    char *text = (char *)malloc(needed);
    EXPECT_OK(upcxx_extra_nvshmem_report_buffer(text, needed, NULL));
    free(text);

    /* The library stays loaded: NVSHMEM's destructors are not meant to run before exit. */
    return uxn_finish("test_nvshmem_loaded");
}
