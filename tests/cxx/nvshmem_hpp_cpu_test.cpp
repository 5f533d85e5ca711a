// CPU tests of upcxx_extra/nvshmem.hpp (no GPU, no NVSHMEM init): every failure of the
// collective constructor throws upcxx::extra::nvshmem_error with the C status on EVERY rank, and
// the program then finishes upcxx::finalize() cleanly. A rank that is left waiting would hang the
// run (ctest's timeout fails it); an abort fails it by its exit status.
//
//   upcxx-run -n 2 ./nvshmem_hpp_cpu_test      (or GASNET_PSHM_NODES=2; any rank count >= 1)
//
// Cases: UPC++ not initialised; no NVSHMEM in the process; only some ranks have a heap (rank 0
// attaches one, the others have none); every rank claims PE 0 (a bad PE map); NVSHMEM's n_pes
// differs from rank_n; NVSHMEM loaded but not initialised (the library named by
// UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB; visibly skipped without it). The "heap" attached in the
// partial cases is host memory: those cases fail before any UPC++ device object is made, which is
// what they test. Construction that succeeds needs a GPU: tests/cxx/nvshmem_hpp_test.cpp.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "check.hpp"

// NVSHMEM 3.8 declares a global variable ::nvshmem_error: name the exception type qualified.
using heap_error = upcxx::extra::nvshmem_error;
using upcxx::extra::nvshmem_heap;

static_assert(!std::is_copy_constructible<nvshmem_heap>::value, "nvshmem_heap must not be copyable");
static_assert(!std::is_copy_assignable<nvshmem_heap>::value, "nvshmem_heap must not be copy-assignable");
static_assert(std::is_nothrow_move_constructible<nvshmem_heap>::value, "nvshmem_heap must be movable");
static_assert(std::is_move_assignable<nvshmem_heap>::value, "nvshmem_heap must be move-assignable");

static int me = 0;

// Constructs a heap on every rank; every rank must throw `want` (its message containing
// `needle`), and every rank must see the same status.
static void expect_collective_failure(const char *what, upcxx_extra_nvshmem_status_t want, const char *needle,
                                      upcxx::extra::nvshmem_errc want_errc = upcxx::extra::nvshmem_errc::c_status) {
    int got = -1, errc = -1, failed_rank = -2;
    std::string msg = "(no exception)";
    try {
        std::optional<nvshmem_heap> h;
        h.emplace();
    } catch (const heap_error &e) {
        got = e.status();
        errc = static_cast<int>(e.errc());
        failed_rank = e.failed_rank();
        msg = e.what();
    }
    CHECK(got == want && msg.find(needle) != std::string::npos, "%s: status %d (want %d): %s", what, got, (int)want,
          msg.c_str());
    // Every rank threw the same status, condition and failing rank (a rank that did not throw, or
    // threw another, shows here), and the rank named is a rank of the world.
    for (int v : {got, errc, failed_rank}) {
        int lo = upcxx::reduce_all(v, upcxx::op_fast_min).wait();
        int hi = upcxx::reduce_all(v, upcxx::op_fast_max).wait();
        CHECK(lo == hi, "%s: the same value on every rank (min %d, max %d)", what, lo, hi);
    }
    CHECK(errc == static_cast<int>(want_errc), "%s: errc %d (want %d)", what, errc, static_cast<int>(want_errc));
    CHECK(failed_rank >= 0 && failed_rank < upcxx::rank_n(), "%s: failed_rank %d names a rank", what, failed_rank);
}

static std::vector<char> host_heap(1 << 20);

static void attach_host_heap(int my_pe, int n_pes) {
    upcxx_extra_nvshmem_heap_info_t h;
    std::memset(&h, 0, sizeof h);
    h.base = host_heap.data();
    h.size = host_heap.size();
    h.mapped_size = host_heap.size();
    h.my_pe = my_pe;
    h.n_pes = n_pes;
    h.device = 0;
    if (upcxx_extra_nvshmem_attach(&h) != UPCXX_EXTRA_NVSHMEM_STATUS_OK) {
        std::fprintf(stderr, "attach failed: %s\n", upcxx_extra_nvshmem_last_error());
        std::exit(2);
    }
}

int main() {
    // Before upcxx::init(): a clear error, no UPC++ call.
    try {
        nvshmem_heap h;
        CHECK(false, "constructed before upcxx::init()");
    } catch (const heap_error &e) {
        CHECK(e.status() == UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT && std::strstr(e.what(), "upcxx::init") &&
                  e.errc() == upcxx::extra::nvshmem_errc::upcxx_not_initialized && e.failed_rank() == -1,
              "before upcxx::init(): %s", e.what());
    }

    upcxx::init();
    me = upcxx::rank_me();
    const int n = upcxx::rank_n();

    // 1. No NVSHMEM in the process, on any rank.
    expect_collective_failure("no NVSHMEM", UPCXX_EXTRA_NVSHMEM_STATUS_NOT_LOADED, "");

    // 2. Only rank 0 has a heap: the others fail, rank 0 must fail with them (naming the rank).
    if (n > 1) {
        if (me == 0) attach_host_heap(0, n);
        expect_collective_failure("only rank 0 has a heap", UPCXX_EXTRA_NVSHMEM_STATUS_NOT_LOADED,
                                  me == 0 ? "failed on rank 1" : "");
        upcxx_extra_nvshmem_detach();
        upcxx::barrier();
    }

    // 3. A bad PE map: every rank claims PE 0.
    if (n > 1) {
        attach_host_heap(0, n);
        expect_collective_failure("every rank claims PE 0", UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE, "taken by another rank",
                                  upcxx::extra::nvshmem_errc::peers_mismatch);
        upcxx_extra_nvshmem_detach();
        upcxx::barrier();
    }

    // 4. NVSHMEM's PE count differs from upcxx::rank_n() (here on rank 0 only).
    attach_host_heap(me, me == 0 ? n + 1 : n);
    expect_collective_failure("n_pes != rank_n on rank 0", UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                              "must be the same processes", upcxx::extra::nvshmem_errc::peers_mismatch);
    upcxx_extra_nvshmem_detach();
    upcxx::barrier();

    // 5. NVSHMEM loaded but not initialised (last: the library stays loaded).
    const char *lib = std::getenv("UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB");
    if (lib && *lib) {
        void *dl = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
        CHECK(dl != nullptr, "dlopen %s: %s", lib, dl ? "ok" : dlerror());
        if (dl)
            expect_collective_failure("NVSHMEM loaded, not initialised", UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED,
                                      "");
    } else if (me == 0) {
        std::printf(
            "SKIPPED case: NVSHMEM loaded but not initialised (UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB not set)\n");
    }

    // Nothing is left behind: no heap, no table.
    upcxx_extra_nvshmem_gptr_t g;
    CHECK(upcxx_extra_nvshmem_to_global_ptr(host_heap.data(), 0, &g) != UPCXX_EXTRA_NVSHMEM_STATUS_OK,
          "no translation table after the failures");

    int total = upcxx::reduce_all(uxn_check::failures(), upcxx::op_fast_add).wait();
    if (me == 0)
        std::printf("RESULT nvshmem_hpp_cpu_test %s: %d failures on %d ranks\n", total ? "FAIL" : "PASS", total, n);
    upcxx::finalize();
    return total ? 1 : 0;
}
