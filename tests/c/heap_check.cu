// GPU suite for upcxx-extra-nvshmem (built and run by tests/c/ with UXN_GPU_TESTS=ON: scripts/gpu-tests.sh).
//
// Usage: mpirun -np 2 ./heap_check <mpi|uid> [--expect-validation-failure]
// Checks with the C tests' CHECK (uxn_test.h: a failing check prints "[rank R] file:line:
// CHECK(cond) failed: <name>: <detail>"); rank 0 ends with "heap_check ...: N ranks, C checks,
// F failures: passed|FAILED", and the exit status is 0 or 1. Nothing here is faked: it runs real
// NVSHMEM on real GPUs.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <vector>

#include "uxn_test.h"    /* the C tests' CHECK, failure count and summary (with upcxx_extra_nvshmem.h) */
#include "bench_floor.h" /* tests/c/bench_floor.h: the call floor */

#define CUDA_OK(x)                                                                          \
    do {                                                                                    \
        cudaError_t e_ = (x);                                                               \
        if (e_ != cudaSuccess) {                                                            \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
            MPI_Abort(MPI_COMM_WORLD, 99);                                                  \
        }                                                                                   \
    } while (0)

static const char *st(upcxx_extra_nvshmem_status_t s) { return upcxx_extra_nvshmem_strerror(s); }

__global__ void put_int(int *dst, int value, int pe) { nvshmem_int_p(dst, value, pe); }

static double now_ns() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

// The timing loops of the translation calls and of the call floor's (same signatures): F is a
// template argument, so each instantiation calls it directly, through the PLT, as user code does.
// Random PEs and offsets cycle through 4096 precomputed pairs; the sum keeps the results live.
template <auto F>
static uintptr_t time_to(const void *buf, const std::vector<size_t> &offs, const std::vector<int> &pes, int m) {
    uintptr_t sink = 0;
    for (int i = 0; i < m; i++) {
        upcxx_extra_nvshmem_gptr_t x;
        F((const char *)buf + offs[i & 4095], pes[i & 4095], &x);
        sink += (uintptr_t)x.raw;
    }
    return sink;
}

template <auto F>
static uintptr_t time_from(const std::vector<void *> &bufs, const std::vector<size_t> &offs,
                           const std::vector<int> &pes, int m) {
    uintptr_t sink = 0;
    for (int i = 0; i < m; i++) {
        void *y;
        int q;
        F(pes[i & 4095], (const char *)bufs[pes[i & 4095]] + offs[i & 4095], &y, &q);
        sink += (uintptr_t)y;
    }
    return sink;
}

static void print_heap(const char *what, const upcxx_extra_nvshmem_heap_info_t &h) {
    printf(
        "INFO %d %s: base=%p size=%zu (%.1f GiB) mapped=%zu (%.1f MiB) pe=%d/%d device=%d nvshmem=%d.%d.%d source=%d\n",
        uxn_rank, what, h.base, h.size, h.size / 1073741824.0, h.mapped_size, h.mapped_size / 1048576.0, h.my_pe,
        h.n_pes, h.device, h.version_major, h.version_minor, h.version_patch, (int)h.source);
}

int main(int argc, char **argv) {
    uxn_init(&argc, &argv);
    const int rank = uxn_rank, nranks = uxn_size;
    int ndev;
    CUDA_OK(cudaGetDeviceCount(&ndev));
    CUDA_OK(cudaSetDevice(rank % ndev));
    const char *mode = argc > 1 ? argv[1] : "mpi";
    bool expect_validation_failure = argc > 2 && !strcmp(argv[2], "--expect-validation-failure");
    // UXN_EXPECT_STRIPPED=1: the NVSHMEM library loaded is a stripped copy (no .symtab), so only
    // the public route (step 3) can serve.
    bool stripped = getenv("UXN_EXPECT_STRIPPED") != NULL;

    // --- Before nvshmem_init: statuses, never a crash (nvshmem_ptr itself crashes here on 3.4.5).
    upcxx_extra_nvshmem_heap_info_t h;
    upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_heap_query(&h);
    CHECK(s == UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED, "before-init heap_query: -> %d (%s) %s", s, st(s),
          upcxx_extra_nvshmem_last_error());
    size_t off = 0;
    int probe = 0;
    s = upcxx_extra_nvshmem_offset(&probe, &off);
    CHECK(s == UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, "before-init offset (translation never discovers): -> %d (%s)",
          s, st(s));
    upcxx_extra_nvshmem_location_t loc;
    s = upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB, &loc);
    CHECK(stripped ? s == UPCXX_EXTRA_NVSHMEM_STATUS_STEP_UNAVAILABLE
                   : s == UPCXX_EXTRA_NVSHMEM_STATUS_OK && loc.symbol_size >= 72 &&
                         (loc.version_field == 0 || loc.version_field == 0x10000u + loc.symbol_size),
          "before-init locate symtab (version field is 0 until nvshmem_init): -> %d library=%s address=%p st_size=%zu "
          "version=0x%x",
          s, s == 0 ? loc.library : "-", s == 0 ? loc.address : NULL, s == 0 ? loc.symbol_size : 0,
          s == 0 ? loc.version_field : 0);

    // --- Init: MPI bootstrap or unique-id bootstrap.
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    MPI_Comm comm = MPI_COMM_WORLD;
    if (!strcmp(mode, "uid")) {
        nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
        if (rank == 0) nvshmemx_get_uniqueid(&id);
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        nvshmemx_set_attr_uniqueid_args(rank, nranks, &id, &attr);
        nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
    } else {
        attr.mpi_comm = &comm;
        nvshmemx_init_attr(NVSHMEMX_INIT_WITH_MPI_COMM, &attr);
    }
    int me = nvshmem_my_pe(), npes = nvshmem_n_pes();
    printf("INFO %d bootstrap=%s npes=%d VMM=%s\n", me, mode, npes, getenv("NVSHMEM_DISABLE_CUDA_VMM") ? "off" : "on");

    if (expect_validation_failure) {
        s = upcxx_extra_nvshmem_heap_query(&h);
        CHECK(s == UPCXX_EXTRA_NVSHMEM_STATUS_VALIDATION_FAILED,
              "forced wrong heap_base offset is refused: -> %d (%s) %s", s, st(s), upcxx_extra_nvshmem_last_error());
        nvshmem_finalize();
        return uxn_finish("heap_check --expect-validation-failure");
    }

    // --- After init the version field is set and must match the symbol's size.
    s = upcxx_extra_nvshmem_locate(UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB, &loc);
    if (!stripped)
        CHECK(s == UPCXX_EXTRA_NVSHMEM_STATUS_OK && loc.version_field == 0x10000u + loc.symbol_size,
              "after-init locate symtab: version == 0x10000 + st_size: -> %d st_size=%zu version=0x%x", s,
              s == 0 ? loc.symbol_size : 0, s == 0 ? loc.version_field : 0);

    // --- Between init and the first nvshmem_malloc.
    s = upcxx_extra_nvshmem_heap_query(&h);
    CHECK(s == UPCXX_EXTRA_NVSHMEM_STATUS_OK, "after-init heap_query (auto): -> %d %s source=%d", s,
          s ? upcxx_extra_nvshmem_last_error() : "", (int)h.source);

    // --- Each resolution step alone.
    s = upcxx_extra_nvshmem_select_source(UPCXX_EXTRA_NVSHMEM_SOURCE_DLSYM);
    s = upcxx_extra_nvshmem_heap_query(&h);
    CHECK(s == UPCXX_EXTRA_NVSHMEM_STATUS_STEP_UNAVAILABLE, "step 1 dlsym unavailable (LOCAL symbol): -> %d %s", s,
          upcxx_extra_nvshmem_last_error());
    upcxx_extra_nvshmem_heap_info_t by_step[2];
    const int steps[2] = {UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB, UPCXX_EXTRA_NVSHMEM_SOURCE_CUMODULE};
    const char *names[2] = {"step 2 symtab", "step 3 cumodule"};
    for (int i = 0; i < 2; i++) {
        upcxx_extra_nvshmem_select_source(steps[i]);
        if (stripped && i == 0) {
            s = upcxx_extra_nvshmem_heap_query(&by_step[0]);
            CHECK(s == UPCXX_EXTRA_NVSHMEM_STATUS_STEP_UNAVAILABLE,
                  "step 2 symtab unavailable on a stripped library: -> %d %s", s, upcxx_extra_nvshmem_last_error());
            continue;
        }
        s = upcxx_extra_nvshmem_heap_query(&by_step[i]);
        CHECK(s == UPCXX_EXTRA_NVSHMEM_STATUS_OK && (int)by_step[i].source == steps[i] && by_step[i].my_pe == me &&
                  by_step[i].n_pes == npes,
              "%s: finds the heap and passes validation -> %d %s", names[i], s,
              s ? upcxx_extra_nvshmem_last_error() : "");
        if (s == 0) print_heap(names[i], by_step[i]);
    }
    if (stripped) by_step[0] = by_step[1];
    CHECK(by_step[0].base == by_step[1].base && by_step[0].size == by_step[1].size,
          "steps 2 and 3 agree: base %p/%p size %zu/%zu", by_step[0].base, by_step[1].base, by_step[0].size,
          by_step[1].size);
    upcxx_extra_nvshmem_select_source(UPCXX_EXTRA_NVSHMEM_SOURCE_NONE);
    s = upcxx_extra_nvshmem_heap_query(&h);
    print_heap("auto", h);
    CHECK(
        s == 0 && (int)h.source == (stripped ? UPCXX_EXTRA_NVSHMEM_SOURCE_CUMODULE : UPCXX_EXTRA_NVSHMEM_SOURCE_SYMTAB),
        "auto resolution picks the expected step: source %d", (int)h.source);
    CHECK(nvshmem_ptr(h.base, me) == h.base && nvshmem_ptr((char *)h.base - 1, me) == NULL &&
              nvshmem_ptr((char *)h.base + h.size - 1, me) != NULL && nvshmem_ptr((char *)h.base + h.size, me) == NULL,
          "oracle nvshmem_ptr agrees on the heap bounds: [%p, %p)", h.base, (char *)h.base + h.size);

    // --- Translation against real symmetric allocations.
    const int N = 1 << 20;
    int *buf = (int *)nvshmem_malloc(N * sizeof(int));
    int *dst = (int *)nvshmem_malloc(N * sizeof(int));
    CUDA_OK(cudaMemset(dst, 0, N * sizeof(int)));
    nvshmem_barrier_all();
    s = upcxx_extra_nvshmem_heap_query(&h);
    // Every PE's base and its own address of `buf`, exchanged with MPI: the ground truth.
    std::vector<void *> bases(npes), bufs(npes);
    MPI_Allgather(&h.base, sizeof(void *), MPI_BYTE, bases.data(), sizeof(void *), MPI_BYTE, MPI_COMM_WORLD);
    MPI_Allgather(&buf, sizeof(void *), MPI_BYTE, bufs.data(), sizeof(void *), MPI_BYTE, MPI_COMM_WORLD);
    bool equal_bases = true;
    for (int p = 0; p < npes; p++) equal_bases &= bases[p] == bases[0];
    printf("INFO %d heap bases %s across PEs (PE0 %p, PE%d %p)\n", me, equal_bases ? "equal" : "DIFFER", bases[0],
           npes - 1, bases[npes - 1]);

    // Table from NVSHMEM itself (peer_heap_base_remote), identity PE->rank.
    s = upcxx_extra_nvshmem_set_peers_from_nvshmem(NULL);
    CHECK(s == 0, "set_peers_from_nvshmem: -> %d %s", s, s ? upcxx_extra_nvshmem_last_error() : "");
    int peer = (me + 1) % npes;
    for (int p = 0; p < npes; p++) {
        upcxx_extra_nvshmem_gptr_t g;
        s = upcxx_extra_nvshmem_to_global_ptr(buf + 12345, p, &g);
        bool ok = s == 0 && g.rank == p && g.raw == (void *)((int *)bufs[p] + 12345);
        CHECK(ok, "to_global_ptr matches the peer's own address: pe %d -> rank %d raw %p (peer's own %p)", p, g.rank,
              g.raw, (void *)((int *)bufs[p] + 12345));
        void *back = NULL;
        int back_pe = -1;
        s = upcxx_extra_nvshmem_from_global_ptr(g.rank, g.raw, &back, &back_pe);
        CHECK(s == 0 && back == buf + 12345 && back_pe == p, "from_global_ptr round trip: rank %d raw %p -> %p pe %d",
              g.rank, g.raw, back, back_pe);
        void *p2p = nvshmem_ptr(buf + 12345, p);
        printf("INFO %d nvshmem_ptr(buf+12345, %d) = %p (local mapping; NULL when not P2P)\n", me, p, p2p);
    }
    // Same with the table from the caller (MPI exchange) and a PE->rank map that is not the identity.
    std::vector<upcxx_extra_nvshmem_peer_t> peers(npes);
    for (int p = 0; p < npes; p++) {
        peers[p].rank = (p + 1) % npes;
        peers[p].base = bases[p];
    }
    s = upcxx_extra_nvshmem_set_peers(npes, peers.data());
    CHECK(s == 0, "set_peers (shuffled ranks, MPI-exchanged bases): -> %d %s", s,
          s ? upcxx_extra_nvshmem_last_error() : "");
    {
        upcxx_extra_nvshmem_gptr_t g;
        s = upcxx_extra_nvshmem_to_global_ptr(dst + 7, peer, &g);
        CHECK(s == 0 && g.rank == (peer + 1) % npes && g.raw == (void *)((int *)bufs[peer] - buf + dst + 7),
              "shuffled to_global_ptr: pe %d -> rank %d raw %p", peer, g.rank, g.raw);
    }

    // nvshmem_int_p to the peer; the peer reads it back through the raw address we translated.
    upcxx_extra_nvshmem_gptr_t g;
    s = upcxx_extra_nvshmem_to_global_ptr(dst + 4242, peer, &g);
    int value = 1000 + me;
    put_int<<<1, 1>>>(dst + 4242, value, peer);
    CUDA_OK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    // Send the translated raw address to the peer, which reads its own memory there.
    void *raw_for_me = NULL;
    int from = (me - 1 + npes) % npes;
    MPI_Sendrecv(&g.raw, sizeof(void *), MPI_BYTE, peer, 0, &raw_for_me, sizeof(void *), MPI_BYTE, from, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int got = -1;
    CUDA_OK(cudaMemcpy(&got, raw_for_me, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(got == 1000 + from && raw_for_me == dst + 4242,
          "nvshmem_int_p value read back through translated raw: raw %p from PE %d holds %d (expected %d)", raw_for_me,
          from, got, 1000 + from);

    // mapped_size grows after a 3 GiB nvshmem_malloc (VMM heaps grow on demand).
    s = upcxx_extra_nvshmem_heap_query(&h);
    size_t before = h.mapped_size;
    void *big = nvshmem_malloc((size_t)3 << 30);
    s = upcxx_extra_nvshmem_heap_query(&h);
    size_t after = h.mapped_size;
    bool vmm = !getenv("NVSHMEM_DISABLE_CUDA_VMM");
    CHECK(big != NULL && (vmm ? after >= before + ((size_t)3 << 30) : after == h.size),
          "mapped_size after 3 GiB malloc: before %zu MiB, after %zu MiB (reserved %zu MiB, VMM %s)", before >> 20,
          after >> 20, h.size >> 20, vmm ? "on" : "off");
    {
        upcxx_extra_nvshmem_gptr_t gb;
        s = upcxx_extra_nvshmem_to_global_ptr((char *)big + ((size_t)3 << 30) - 1, peer, &gb);
        CHECK(s == 0, "translate last byte of the 3 GiB block: -> %d raw %p", s, gb.raw);
    }

    // Same-run timing: host nvshmem_ptr vs to_global_ptr / from_global_ptr (real table, real heap,
    // PE == rank as NVSHMEM reports it).
    upcxx_extra_nvshmem_set_peers_from_nvshmem(NULL);
    {
        const int M = 10000000, REPS = 7;
        std::vector<int> pes(4096);
        std::vector<size_t> offs(4096);
        srand(7 + me);
        for (int i = 0; i < 4096; i++) {
            pes[i] = rand() % npes;
            offs[i] = (size_t)(rand() % N) * sizeof(int);
        }
        // Also the call floor (tests/c/bench_floor.c: same signatures, no translation, its own
        // shared library): what any out-of-line C ABI call costs in this loop.
        double t_ptr[REPS], t_to[REPS], t_from[REPS], t_fto[REPS], t_ffrom[REPS];
        uintptr_t sink = 0;
        for (int r = 0; r < REPS; r++) {
            double t0 = now_ns();
            for (int i = 0; i < M; i++) sink += (uintptr_t)nvshmem_ptr((char *)buf + offs[i & 4095], me);
            double t1 = now_ns();
            sink += time_to<upcxx_extra_nvshmem_to_global_ptr>(buf, offs, pes, M);
            double t2 = now_ns();
            sink += time_from<upcxx_extra_nvshmem_from_global_ptr>(bufs, offs, pes, M);
            double t3 = now_ns();
            sink += time_to<uxn_bench_floor_to_global_ptr>(buf, offs, pes, M);
            double t4 = now_ns();
            sink += time_from<uxn_bench_floor_from_global_ptr>(bufs, offs, pes, M);
            double t5 = now_ns();
            t_ptr[r] = (t1 - t0) / M;
            t_to[r] = (t2 - t1) / M;
            t_from[r] = (t3 - t2) / M;
            t_fto[r] = (t4 - t3) / M;
            t_ffrom[r] = (t5 - t4) / M;
        }
        std::sort(t_ptr, t_ptr + REPS);
        std::sort(t_to, t_to + REPS);
        std::sort(t_from, t_from + REPS);
        std::sort(t_fto, t_fto + REPS);
        std::sort(t_ffrom, t_ffrom + REPS);
        const int h = REPS / 2;
        printf(
            "BENCH %d nvshmem_ptr %.2f ns | to_global_ptr %.2f ns (%.2fx) | from_global_ptr %.2f ns (%.2fx) | "
            "call floor: to %.2f ns (%.2fx), from %.2f ns (%.2fx) [medians of %d x %d calls; ratios to nvshmem_ptr; "
            "sink %lu]\n",
            me, t_ptr[h], t_to[h], t_to[h] / t_ptr[h], t_from[h], t_from[h] / t_ptr[h], t_fto[h], t_fto[h] / t_ptr[h],
            t_ffrom[h], t_ffrom[h] / t_ptr[h], REPS, M, (unsigned long)(sink & 1));
    }

    nvshmem_free(big);
    nvshmem_free(dst);
    nvshmem_free(buf);
    nvshmem_finalize();

    // --- After nvshmem_finalize: statuses, never a crash.
    s = upcxx_extra_nvshmem_heap_query(&h);
    CHECK(s == UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED, "after-finalize heap_query: -> %d (%s)", s, st(s));
    s = upcxx_extra_nvshmem_to_global_ptr(buf, peer, &g);
    CHECK(s == UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET, "after-finalize to_global_ptr: -> %d (%s)", s, st(s));
    s = upcxx_extra_nvshmem_set_peers_from_nvshmem(NULL);
    CHECK(s == UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED, "after-finalize set_peers_from_nvshmem: -> %d (%s)", s,
          st(s));

    char summary[96];
    snprintf(summary, sizeof summary, "heap_check bootstrap=%s VMM=%s", mode,
             getenv("NVSHMEM_DISABLE_CUDA_VMM") ? "off" : "on");
    return uxn_finish(summary);
}
