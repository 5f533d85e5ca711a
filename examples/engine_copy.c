/* The copy engine of upcxx-extra-nvshmem from plain C, with MPI (no C++, no UPC++):
 *
 *   mpiexec -n 2 ./build-examples/engine_copy
 *
 * Each PE pushes a symmetric buffer (src) into the next PE's copy of another (dst) through the
 * engine, straight through NVSHMEM's peer mapping: 256 small copies, which the engine batches into kernel
 * launches (DEVICE_ENDS, batch_bytes 4096), then one large copy. It polls every ticket until the
 * copy ended and settles it. Each PE then reads its own buffer back with cudaMemcpy and checks
 * that the previous PE's bytes are there. Rank 0 prints "RESULT engine_copy PASS" (or FAIL); the
 * exit status is 0 on PASS only.
 *
 * NVSHMEM is initialised through the library, which finds (or loads) libnvshmem_host.so.3 at run
 * time, with NVSHMEM's unique-id bootstrap and the id broadcast over MPI: nothing of NVSHMEM is
 * needed to build this. NVSHMEM's headers are not C, so its allocator (nvshmem_malloc, _free) is
 * looked up in the library that the C library loaded.
 * SPDX-License-Identifier: BSD-3-Clause */
#include <dlfcn.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "upcxx_extra_nvshmem.h"

enum { N_SMALL = 256, SMALL = 1024, BYTES = 4 << 20, BATCH_BYTES = 4096 };

static int me; /* this process's MPI rank, and its NVSHMEM PE */

/* Prints "rank R: <what>" on stderr; returns 0 (not good). */
static int fail(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: %s\n", me, line);
    return 0;
}
/* Whether `s` is OK; otherwise prints which call failed and the library's reason. */
static int ok(upcxx_extra_nvshmem_status_t s, const char *call) {
    if (s == UPCXX_EXTRA_NVSHMEM_STATUS_OK) return 1;
    return fail("%s: %s (status %d): %s", call, upcxx_extra_nvshmem_strerror((int)s), (int)s,
                upcxx_extra_nvshmem_last_error());
}
static int cuda_ok(cudaError_t e, const char *call) {
    return e == cudaSuccess || fail("%s: %s", call, cudaGetErrorString(e));
}
/* Collective: whether `mine` holds on every rank, so that every rank takes the same path. */
static int all(int mine) {
    int every = 0;
    MPI_Allreduce(&mine, &every, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return every;
}
/* The byte at offset i of PE pe's source buffer. */
static unsigned char pattern(int pe, size_t i) { return (unsigned char)((size_t)pe * 71 + i * 7 + (i >> 10)); }
/* The bytes of the second round (step 6). */
static unsigned char pattern2(int pe, size_t i) { return (unsigned char)(pattern(pe, i) ^ 0x5a); }

/* Whether the device bytes at `at` are rank `prev`'s of `round` (1 or 2); says where not. */
static int check_dst(const char *at, unsigned char *host, int prev, int round, int bytes) {
    if (!cuda_ok(cudaMemcpy(host, at, (size_t)bytes, cudaMemcpyDefault), "cudaMemcpy from dst")) return 0;
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < (size_t)bytes; i++) {
        const unsigned char want = round == 1 ? pattern(prev, i) : pattern2(prev, i);
        if (host[i] == want) continue;
        if (wrong++ == 0) first = i;
    }
    if (wrong)
        return fail("round %d: %zu of %d bytes wrong, the first at offset %zu: %d, expected %d (rank %d's)", round,
                    wrong, bytes, first, host[first], round == 1 ? pattern(prev, first) : pattern2(prev, first), prev);
    return 1;
}

/* One copy through the engine, its ticket and the ticket's poll slot. */
struct flight {
    upcxx_extra_nvshmem_engine_copy_t copy;
    uint64_t ticket, asked;
    int ended;
};

static int issue(const upcxx_extra_nvshmem_engine_t *e, struct flight *f, char *dst, const char *src, size_t bytes,
                 int to) {
    memset(f, 0, sizeof *f);
    f->copy.dst = dst;
    f->copy.src = src;
    f->copy.bytes = bytes;
    f->copy.src_rank = me; /* named in error messages only */
    f->copy.dst_rank = to;
    f->copy.flags = UPCXX_EXTRA_NVSHMEM_ENGINE_FLAG_DEVICE_ENDS; /* both ends are heap memory */
    return ok(upcxx_extra_nvshmem_engine_copy(e, &f->copy, &f->ticket), "upcxx_extra_nvshmem_engine_copy");
}

/* Polls the tickets (never blocking) until every copy has ended, settling each once; a failed copy
 * that the engine says to redo is copied again with cudaMemcpy. Returns how many failed or had not
 * ended after `seconds`. */
static int settle_all(const upcxx_extra_nvshmem_engine_t *e, struct flight *f, int n, double seconds) {
    int left = n, failed = 0;
    const double until = MPI_Wtime() + seconds;
    while (left > 0 && MPI_Wtime() < until) {
        for (int i = 0; i < n; i++) {
            if (f[i].ended) continue;
            int result = UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_NOT_READY;
            if (!ok(upcxx_extra_nvshmem_engine_poll(e, f[i].ticket, &f[i].asked, &result), "engine_poll")) return n;
            if (result == UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_NOT_READY) continue;
            upcxx_extra_nvshmem_engine_settled_t how = UPCXX_EXTRA_NVSHMEM_ENGINE_SETTLED_REPORT;
            if (!ok(upcxx_extra_nvshmem_engine_complete(e, f[i].ticket, result, &f[i].copy, &how), "engine_complete"))
                failed++;
            f[i].ended = 1;
            left--;
            if (result == UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_LANDED) continue;
            failed++;
            fail("copy %d (%zu bytes to rank %d) failed with CUDA error %d", i, f[i].copy.bytes, f[i].copy.dst_rank,
                 result);
            if (how == UPCXX_EXTRA_NVSHMEM_ENGINE_SETTLED_REDO) /* the bytes did not land: copy them another way */
                cuda_ok(cudaMemcpy(f[i].copy.dst, f[i].copy.src, f[i].copy.bytes, cudaMemcpyDefault), "the redo");
        }
    }
    if (left > 0) fail("%d of %d copies had not ended after %.0f s", left, n, seconds);
    return failed + left;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int n = 1, local = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm node; /* this node's ranks: the local rank picks the GPU */
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    const int next = (me + 1) % n, prev = (me + n - 1) % n;

    /* 1. NVSHMEM's host library, found or loaded by the library; this rank's GPU, made current. */
    upcxx_extra_nvshmem_nvshmem_info_t info;
    int count = 0, device = -1;
    void *(*sym_malloc)(size_t) = NULL;
    void (*sym_free)(void *) = NULL;
    int good = ok(upcxx_extra_nvshmem_nvshmem_load(&info), "upcxx_extra_nvshmem_nvshmem_load") &&
               ok(upcxx_extra_nvshmem_cuda_devices(&count, NULL), "upcxx_extra_nvshmem_cuda_devices");
    if (good && count < 1) good = fail("no CUDA device");
    if (good) device = local % count; /* its primary context (the CUDA runtime's), current on this thread */
    if (good) good = ok(upcxx_extra_nvshmem_cuda_use_device(device), "upcxx_extra_nvshmem_cuda_use_device");
    if (good) { /* a handle to the library already loaded: its allocator (dlsym: POSIX function pointers) */
        void *lib = dlopen(info.library, RTLD_NOW | RTLD_NOLOAD);
        if (lib) sym_malloc = (void *(*)(size_t))dlsym(lib, "nvshmem_malloc");
        if (lib) sym_free = (void (*)(void *))dlsym(lib, "nvshmem_free");
        if (!sym_malloc || !sym_free) good = fail("no nvshmem_malloc/_free in %s: %s", info.library, dlerror());
    }

    /* 2. NVSHMEM initialised on that GPU as PE `me` (collective): rank 0 makes the id, MPI sends it. */
    int inited = 0;
    if (all(good)) {
        struct {
            int ok;
            upcxx_extra_nvshmem_uniqueid_t id;
        } wire = {0};
        if (me == 0) wire.ok = ok(upcxx_extra_nvshmem_nvshmem_get_uniqueid(&wire.id), "nvshmem_get_uniqueid");
        MPI_Bcast(&wire, sizeof wire, MPI_BYTE, 0, MPI_COMM_WORLD);
        good = wire.ok && ok(upcxx_extra_nvshmem_nvshmem_init(&wire.id, me, n), "upcxx_extra_nvshmem_nvshmem_init");
        inited = good;
    }

    /* 3. Two symmetric buffers; where the next PE's `dst` is mapped in this process; `src` filled. */
    char *src = NULL, *dst = NULL, *remote = NULL;
    unsigned char *host = malloc(BYTES);
    upcxx_extra_nvshmem_heap_info_t heap = {0};
    if (all(good)) {
        src = sym_malloc(BYTES); /* collective, as NVSHMEM's allocations are */
        dst = sym_malloc(BYTES);
        good = (src && dst && host) || fail("nvshmem_malloc(%d) or malloc(%d) failed", BYTES, BYTES);
        upcxx_extra_nvshmem_gptr_t g; /* dst on the next PE: its rank, and the address there */
        void *mapped = NULL;
        good = good && ok(upcxx_extra_nvshmem_heap_query(&heap), "heap_query") &&
               ok(upcxx_extra_nvshmem_set_peers_from_nvshmem(NULL), "set_peers_from_nvshmem") && /* PE = rank */
               ok(upcxx_extra_nvshmem_to_global_ptr(dst, next, &g), "to_global_ptr") &&
               ok(upcxx_extra_nvshmem_local_ptr(g.rank, g.raw, BYTES, &mapped, NULL, NULL), "local_ptr");
        if (good && !(remote = mapped))
            good = fail("rank %d's heap is not mapped in this process (no P2P between the GPUs)", next);
        if (good)
            printf("rank %d: dst %p is %p on rank %d, mapped here at %p\n", me, (void *)dst, g.raw, g.rank, mapped);
        for (size_t i = 0; good && i < BYTES; i++) host[i] = pattern(me, i);
        good = good && cuda_ok(cudaMemcpy(src, host, BYTES, cudaMemcpyHostToDevice), "cudaMemcpy to src") &&
               cuda_ok(cudaMemset(dst, 0, BYTES), "cudaMemset dst") &&
               cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }

    /* 4. src -> the next PE's dst through the engine: the small copies, the large one; polled. */
    upcxx_extra_nvshmem_engine_t *engine = NULL;
    if (all(good)) {
        static struct flight f[N_SMALL + 1];
        int issued = 0;
        good = ok(upcxx_extra_nvshmem_engine_new(heap.device >= 0 ? heap.device : device, BATCH_BYTES, &engine),
                  "engine_new");
        while (good && issued <= N_SMALL) { /* copies 0..N_SMALL-1: SMALL bytes each; copy N_SMALL: the rest */
            const size_t at = (size_t)issued * SMALL;
            good = issue(engine, &f[issued], remote + at, src + at, issued < N_SMALL ? SMALL : BYTES - at, next);
            if (good) issued++;
        }
        good = good && ok(upcxx_extra_nvshmem_engine_flush(engine), "engine_flush"); /* the last batch, now */
        good = settle_all(engine, f, issued, 60.0) == 0 && good;
        upcxx_extra_nvshmem_engine_counts_t c = {0, 0};
        ok(upcxx_extra_nvshmem_engine_counts(engine, &c), "engine_counts");
        printf("rank %d: %d copies to rank %d through the engine: %zu issued, %zu of them batched\n", me, issued, next,
               c.fast, c.batched);
        if (c.fast != (size_t)issued) good = fail("engine_counts: %zu copies issued, not %d", c.fast, issued);
        good = ok(upcxx_extra_nvshmem_engine_take_error(engine), "engine_take_error") && good; /* no failure */
    }

    /* 5. Every PE's copies have landed (all() above): this PE's dst holds the previous PE's bytes. */
    if (all(good)) good = check_dst(dst, host, prev, 1, BYTES);

    /* 6. A second round, not polled: engine_drain returns once every copy issued has landed, so
     * right after it the next PE's dst (read where it is mapped here) holds this PE's second
     * bytes. Then the engine is freed (nothing in flight, nothing failed unredone). */
    if (engine && all(good)) {
        static struct flight f[N_SMALL + 1];
        for (size_t i = 0; i < BYTES; i++) host[i] = pattern2(me, i);
        good = cuda_ok(cudaMemcpy(src, host, BYTES, cudaMemcpyHostToDevice), "cudaMemcpy to src");
        for (int k = 0; good && k <= N_SMALL; k++) {
            const size_t at = (size_t)k * SMALL;
            good = issue(engine, &f[k], remote + at, src + at, k < N_SMALL ? SMALL : BYTES - at, next);
        }
    }
    if (engine) {
        uint64_t unredone = 0;
        good = ok(upcxx_extra_nvshmem_engine_drain(engine, &unredone), "engine_drain") && good;
        if (unredone != 0) good = fail("engine_drain: %llu failed copies not redone", (unsigned long long)unredone);
        good = good && check_dst(remote, host, me, 2, BYTES);
        upcxx_extra_nvshmem_engine_free(engine);
    }
    good = all(good);
    if (dst) sym_free(dst);
    if (src) sym_free(src);
    free(host);
    upcxx_extra_nvshmem_detach(); /* the library forgets the heap before NVSHMEM goes */
    if (inited) ok(upcxx_extra_nvshmem_nvshmem_finalize(), "upcxx_extra_nvshmem_nvshmem_finalize");
    if (me == 0) printf("RESULT engine_copy %s\n", good ? "PASS" : "FAIL");
    MPI_Finalize();
    return good ? 0 : 1;
}
