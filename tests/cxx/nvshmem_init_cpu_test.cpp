// CPU tests of upcxx::extra::nvshmem_init() / nvshmem_finalize() (no GPU): every failure throws
// upcxx::extra::nvshmem_error on EVERY rank together, with the same status, errc and failing rank,
// each rank's message naming the same cause; then the program finishes upcxx::finalize() cleanly.
// A rank left waiting hangs the run (ctest's timeout fails it); an abort fails it by its exit status.
//
//   upcxx-run -n 3 ./nvshmem_init_cpu_test      (any rank count >= 1)
//
// Cases, in order (NVSHMEM, once loaded, stays loaded):
//   before upcxx::init(): both throw upcxx_not_initialized, locally;
//   nvshmem_finalize() without nvshmem_init(): nothing to do, no error;
//   nvshmem_finalize() while an nvshmem_heap is active on the last rank only (the count the heap
//     keeps, raised by hand: a real heap needs a GPU, tests/cxx/nvshmem_init_gpu_test.cpp): refused
//     on every rank, naming the last rank;
//   no NVSHMEM in any process: NVSHMEM_HOME unset, the host library not linked;
//   NVSHMEM on every rank but the last (dlopen of UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB);
//   a bad device option on the last rank only; heap sizes that differ on the last rank;
//   no GPU (skipped, visibly, where there is one);
//   and NVSHMEM is not initialised at the end.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <upcxx/upcxx.hpp>
#include "upcxx_extra/nvshmem.hpp"
#include "check.hpp"

using nvshmem_error = upcxx::extra::nvshmem_error;
using upcxx::extra::nvshmem_errc;

static int me = -1;

// f() must throw on every rank: status `status`, errc `errc`, failed_rank() `rank`, a message that
// contains `cause`; and every rank must see the same status, errc and failing rank.
template <class F>
static void expect_together(const char *what, upcxx_extra_nvshmem_status_t status, nvshmem_errc errc, int rank,
                            const std::string &cause, F f) {
    int got_status = -1, got_errc = -1, got_rank = -2;
    std::string msg = "(no exception)";
    try {
        f();
    } catch (const nvshmem_error &e) {
        got_status = e.status();
        got_errc = static_cast<int>(e.errc());
        got_rank = e.failed_rank();
        msg = e.what();
    }
    CHECK(got_status == status && got_errc == static_cast<int>(errc) && got_rank == rank &&
              msg.find(cause) != std::string::npos,
          "%s: status %d errc %d failed_rank %d (want %d %d %d, cause '%s'): %s", what, got_status, got_errc, got_rank,
          (int)status, (int)errc, rank, cause.c_str(), msg.c_str());
    const int key = (got_status + 1) * 1000000 + (got_errc + 1) * 1000 + (got_rank + 2);
    const int lo = upcxx::reduce_all(key, upcxx::op_fast_min).wait();
    const int hi = upcxx::reduce_all(key, upcxx::op_fast_max).wait();
    CHECK(lo == hi, "%s: the same status, errc and failing rank on every rank", what);
}

int main() {
    // Before upcxx::init(): a clear local error, no UPC++ call.
    for (int fin = 0; fin < 2; fin++) {
        try {
            if (fin)
                upcxx::extra::nvshmem_finalize();
            else
                upcxx::extra::nvshmem_init();
            CHECK(false, "%s before upcxx::init(): no exception", fin ? "nvshmem_finalize" : "nvshmem_init");
        } catch (const nvshmem_error &e) {
            CHECK(e.errc() == nvshmem_errc::upcxx_not_initialized && e.failed_rank() == -1 &&
                      std::strstr(e.what(), "UPC++ is not initialised"),
                  "%s before upcxx::init(): %s", fin ? "nvshmem_finalize" : "nvshmem_init", e.what());
        }
    }

    upcxx::init();
    me = upcxx::rank_me();
    const int n = upcxx::rank_n(), last = n - 1;
    unsetenv("NVSHMEM_HOME");

    // nvshmem_finalize() with nothing initialised: nothing to do.
    try {
        upcxx::extra::nvshmem_finalize();
        CHECK(true, "nvshmem_finalize without nvshmem_init: no error");
    } catch (const nvshmem_error &e) {
        CHECK(false, "nvshmem_finalize without nvshmem_init: %s", e.what());
    }

    // nvshmem_finalize() while a heap is active on the last rank only.
    if (me == last) ++upcxx::extra::detail::active_heaps();
    expect_together("nvshmem_finalize with a heap active on the last rank", UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                    nvshmem_errc::nvshmem_in_use, last,
                    "an nvshmem_heap is still active on rank " + std::to_string(last) + ": destroy() it first",
                    [] { upcxx::extra::nvshmem_finalize(); });
    if (me == last) --upcxx::extra::detail::active_heaps();

    // No NVSHMEM anywhere.
    const bool preloaded = dlsym(RTLD_DEFAULT, "nvshmemx_hostlib_init_attr") != nullptr;
    CHECK(!preloaded, "NVSHMEM's host library is not in the process at start");
    expect_together("no NVSHMEM", UPCXX_EXTRA_NVSHMEM_STATUS_NOT_LOADED, nvshmem_errc::nvshmem_init_failed, 0,
                    "rank 0: NVSHMEM's host library is not in this process and could not be loaded",
                    [] { upcxx::extra::nvshmem_init(); });

    const char *lib = std::getenv("UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB");
    if (!lib || !*lib) {
        if (me == 0) std::printf("SKIPPED cases with NVSHMEM loaded (UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB not set)\n");
    } else {
        // NVSHMEM on every rank but the last.
        if (n > 1) {
            if (me != last) CHECK(dlopen(lib, RTLD_NOW | RTLD_GLOBAL) != nullptr, "dlopen %s", lib);
            expect_together("NVSHMEM missing on the last rank", UPCXX_EXTRA_NVSHMEM_STATUS_NOT_LOADED,
                            nvshmem_errc::nvshmem_init_failed, last,
                            "rank " + std::to_string(last) + ": NVSHMEM's host library is not in this process",
                            [] { upcxx::extra::nvshmem_init(); });
        }
        if (me == last || n == 1) CHECK(dlopen(lib, RTLD_NOW | RTLD_GLOBAL) != nullptr, "dlopen %s", lib);

        // A bad option on the last rank only.
        expect_together("device -2 on the last rank", UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                        nvshmem_errc::nvshmem_init_failed, last, "rank " + std::to_string(last) + " passed device -2",
                        [&] {
                            upcxx::extra::nvshmem_init_options o;
                            if (me == last) o.device = -2;
                            upcxx::extra::nvshmem_init(o);
                        });
        if (n > 1)
            expect_together("heap size differs on the last rank", UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                            nvshmem_errc::nvshmem_init_failed, last, "the heap size must be the same on every rank",
                            [&] {
                                upcxx::extra::nvshmem_init_options o;
                                if (me == last) o.heap_size = std::size_t(1) << 30;
                                upcxx::extra::nvshmem_init(o);
                            });

        // No GPU.
        int count = 0;
        const bool gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
        if (upcxx::reduce_all(gpu ? 1 : 0, upcxx::op_fast_max).wait()) {
            if (me == 0) std::printf("SKIPPED case 'no GPU': this machine has one\n");
        } else {
            expect_together("no GPU", UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR, nvshmem_errc::cuda, 0,
                            "rank 0 has no usable CUDA device", [] { upcxx::extra::nvshmem_init(); });
            // The same with the device given.
            expect_together("no GPU, device 0 given", UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR, nvshmem_errc::cuda, 0,
                            "rank 0 has no usable CUDA device", [] {
                                upcxx::extra::nvshmem_init_options o;
                                o.device = 0;
                                upcxx::extra::nvshmem_init(o);
                            });
        }

        // Nothing was initialised; finalize has nothing to do.
        int (*status)() = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "nvshmemx_init_status"));
        CHECK(status && status() == 0, "NVSHMEM is not initialised after the failures (nvshmemx_init_status %d)",
              status ? status() : -1);
        try {
            upcxx::extra::nvshmem_finalize();
            CHECK(true, "nvshmem_finalize after the failures: no error");
        } catch (const nvshmem_error &e) {
            CHECK(false, "nvshmem_finalize after the failures: %s", e.what());
        }
    }

    const int total = upcxx::reduce_all(uxn_check::failures(), upcxx::op_fast_add).wait();
    if (me == 0)
        std::printf("RESULT nvshmem_init_cpu_test %s: %d failures on %d ranks\n", total ? "FAIL" : "PASS", total, n);
    upcxx::finalize();
    return total ? 1 : 0;
}
