// upcxx-extra-nvshmem test stand-in for NVSHMEM's host library (built as libnvshmem_host.so.3,
// unstripped), over POSIX shared memory and the CUDA stand-in (libcuda.so.1 in this folder).
// Never installed; README.md says what it models and what it cannot show.
//
// Bootstrap: the unique id carries a random job token; every PE of the job opens the control
// segment /uxn-standin-<token>-ctl (a barrier and the PEs' heap bases) and creates its heap
// segment /uxn-standin-<token>-pe<k> (sparse; with CUDA VMM on, NVSHMEM_MAX_MEMORY_PER_GPU, default
// 128 GiB, reserved and mapped in chunks as nvshmem_malloc grows the heap, UXN_STANDIN_HEAP_CHUNK,
// default 512 MiB, the first at init; with NVSHMEM_DISABLE_CUDA_VMM=1 a static heap of
// NVSHMEM_SYMMETRIC_SIZE, default 1 GiB, all mapped at init, as cudaMalloc would), and every peer's heap
// whole, so nvshmem_ptr(sym, pe) answers as for a P2P peer. With CUDA VMM on (NVSHMEM's default)
// every PE's heap is at the same virtual address (derived from the token, MAP_FIXED_NOREPLACE);
// with it off the bases differ. The segments are unlinked as soon as every PE has mapped them
// (end of init), so nothing is left in /dev/shm, even after a crash.
//
// Nodes: UXN_STANDIN_NODE_SIZE=k (unset or 0: one node) puts PEs i and j on one node when
// i / k == j / k. A PE maps only the heaps of its own node's PEs; for a PE of another node
// nvshmem_ptr is NULL and peer_heap_base_p2p holds NULL, while peer_heap_base_remote lists every
// PE's base, as a multi-node NVSHMEM's state does. RMA to another node is not modelled (abort).
// UXN_STANDIN_FAIL_INIT_PE=p: PE p's initialisation fails after the bootstrap's collective steps
// (every PE passes them; the others' initialisation succeeds), as a PE's transport failing does.
// UXN_STANDIN_KILL_INIT_PE=p: PE p dies (SIGKILL) inside its initialisation, after creating its
// heap segment, before the bootstrap's first barrier: the others wait there for it (their
// segments' names stay in /dev/shm if they are killed there; the message names them).
// SPDX-License-Identifier: BSD-3-Clause
#include <nvshmem.h>
#include <nvshmemx.h>

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "standin_control.h"

#define UXN_EXPORT extern "C" __attribute__((visibility("default")))

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

// NVSHMEM's device state, found by the library's .symtab step (a LOCAL symbol, as in NVSHMEM).
// (An asm label: a C++ `static` would be mangled as _ZL21nvshmemi_device_state.)
__attribute__((used,
               aligned(8))) static nvshmemi_device_host_state_t nvshmemi_device_state __asm__("nvshmemi_device_state");

namespace {

constexpr char kMagic[8] = {'U', 'X', 'N', 'S', 'T', 'A', 'N', 'D'};
constexpr size_t kPad = size_t(2) << 20;  // VMM off: PE k's heap is k * 2 MiB into the reservation
constexpr size_t kAlign = 512;

struct Ctl {
    std::atomic<uint32_t> bar_count;
    std::atomic<uint32_t> bar_gen;
    std::atomic<int> created;
    std::atomic<int> pad_;
    uint64_t base[1];  // npes entries: each PE's heap base (its symmetric address), 0 until set
};

struct Fields {
    int status = NVSHMEM_STATUS_NOT_INITIALIZED;
    int me = -1, npes = 0, device = 0;
    int node_size = 0;  // UXN_STANDIN_NODE_SIZE: PEs per node (0: every PE on one node)
    uint64_t token = 0;
    bool vmm = true;
    size_t size = 0, chunk = 0, mapped = 0;
    char *reserve = nullptr;
    size_t reserve_len = 0;
    char *base = nullptr;
    int fd = -1;
    Ctl *ctl = nullptr;
    size_t ctl_len = 0;
    std::vector<char *> local;                             // peer_heap_base_p2p: each PE's heap mapped here
    std::vector<char *> remote;                            // peer_heap_base_remote: each PE's heap base there
    char **p2p_array = nullptr, **remote_array = nullptr;  // "device" arrays
    std::map<size_t, size_t> free_blocks, used;            // offset -> length
};
struct State : Fields {
    std::mutex mu;
};
void reset(State &s) { static_cast<Fields &>(s) = Fields{}; }
State &S() {
    static State *s = new State;
    return *s;
}

void warn(const char *fmt, const char *a = "", long b = 0) {
    fprintf(stderr, "[uxn nvshmem stand-in] ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
}

size_t env_size(const char *name, size_t dflt) {
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end = nullptr;
    double v = strtod(e, &end);
    size_t mul = 1;
    if (end && *end) {
        switch (*end) {
            case 'k':
            case 'K':
                mul = size_t(1) << 10;
                break;
            case 'm':
            case 'M':
                mul = size_t(1) << 20;
                break;
            case 'g':
            case 'G':
                mul = size_t(1) << 30;
                break;
            case 't':
            case 'T':
                mul = size_t(1) << 40;
                break;
            default:
                break;
        }
    }
    return size_t(v * double(mul));
}
size_t page_round(size_t n) {
    size_t pg = size_t(sysconf(_SC_PAGESIZE));
    return (n + pg - 1) / pg * pg;
}
std::string seg_name(uint64_t token, const char *what, int pe = -1) {
    char b[96];
    if (pe >= 0)
        snprintf(b, sizeof b, "/uxn-standin-%016llx-%s%d", (unsigned long long)token, what, pe);
    else
        snprintf(b, sizeof b, "/uxn-standin-%016llx-%s", (unsigned long long)token, what);
    return b;
}
double now_s() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}
void pause_briefly(unsigned &spins) {
    if (++spins < 64) {
        sched_yield();
    } else {
        timespec t{0, 100000};
        nanosleep(&t, nullptr);
    }
}
// UXN_STANDIN_NODE_SIZE (0 when unset, empty or not a positive number: one node).
int env_node_size() {
    const char *e = getenv("UXN_STANDIN_NODE_SIZE");
    long k = e && *e ? strtol(e, nullptr, 10) : 0;
    return k > 0 && k < (1L << 30) ? int(k) : 0;
}
bool same_node(const State &s, int a, int b) { return s.node_size <= 0 || a / s.node_size == b / s.node_size; }
// UXN_STANDIN_FAIL_INIT_PE: the PE whose initialisation fails (-1: none).
int env_fail_init_pe() {
    const char *e = getenv("UXN_STANDIN_FAIL_INIT_PE");
    return e && *e ? atoi(e) : -1;
}
double timeout_s() {
    const char *e = getenv("UXN_STANDIN_TIMEOUT_S");
    return e && *e ? atof(e) : 120.0;
}

// The shared-memory barrier of every PE of the job (bounded: aborts after UXN_STANDIN_TIMEOUT_S).
void barrier(State &s) {
    if (s.npes <= 1) return;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    uint32_t gen = s.ctl->bar_gen.load();
    if (s.ctl->bar_count.fetch_add(1) + 1 == uint32_t(s.npes)) {
        s.ctl->bar_count.store(0);
        s.ctl->bar_gen.fetch_add(1);
        return;
    }
    double t0 = now_s(), limit = timeout_s();
    unsigned spins = 0;
    while (s.ctl->bar_gen.load() == gen) {
        pause_briefly(spins);
        if (now_s() - t0 > limit) {
            warn("PE %s%ld: nvshmem_barrier_all timed out (a PE did not arrive)", "", s.me);
            abort();
        }
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

// Maps own heap chunks until `need` bytes are mapped (VMM on); registers each with the CUDA stand-in.
bool grow_to(State &s, size_t need) {
    while (s.mapped < need && s.mapped < s.size) {
        size_t len = s.chunk;
        if (len > s.size - s.mapped) len = s.size - s.mapped;
        void *p = mmap(s.base + s.mapped, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, s.fd, off_t(s.mapped));
        if (p == MAP_FAILED) {
            warn("mapping a heap chunk failed: %s", strerror(errno));
            return false;
        }
        uxn_standin_register_device_range(s.base + s.mapped, len, s.device);
        s.mapped += len;
    }
    return true;
}

// The shared-memory names this process must unlink should it end inside init by exit() or by an
// abort() that reaches this library's handler (the barrier's timeout): an atexit handler and,
// during init, a SIGABRT handler that then passes the signal on (async-signal-safe: fixed buffers,
// shm_unlink). A process that GASNet ends while it waits here, through GASNet's own handlers,
// keeps them.
char g_pending[2][96];
volatile sig_atomic_t g_pending_n = 0;
struct sigaction g_old_abrt;
bool g_abrt_guarded = false;
void unlink_pending() {
    for (int i = 0; i < g_pending_n; i++) shm_unlink(g_pending[i]);
    g_pending_n = 0;
}
void on_abort_in_init(int sig) {
    unlink_pending();
    sigaction(SIGABRT, &g_old_abrt, nullptr);
    raise(sig);  // blocked until this handler returns; then the previous disposition
}
void guard_name(const std::string &name) {
    static const bool registered = (atexit(unlink_pending), true);
    (void)registered;
    if (g_pending_n >= 2) return;
    snprintf(g_pending[g_pending_n], sizeof g_pending[0], "%s", name.c_str());
    g_pending_n = g_pending_n + 1;
    if (!g_abrt_guarded) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_abort_in_init;
        sigemptyset(&sa.sa_mask);
        g_abrt_guarded = sigaction(SIGABRT, &sa, &g_old_abrt) == 0;
    }
}
void unguard_names() {
    g_pending_n = 0;
    if (g_abrt_guarded) sigaction(SIGABRT, &g_old_abrt, nullptr);
    g_abrt_guarded = false;
}

int fail_init(State &s, const char *why) {
    warn("nvshmem init failed: %s", why);
    if (s.reserve) munmap(s.reserve, s.reserve_len);
    if (s.ctl) munmap(s.ctl, s.ctl_len);
    if (s.fd >= 0) close(s.fd);
    if (s.token) {
        shm_unlink(seg_name(s.token, "pe", s.me).c_str());
        shm_unlink(seg_name(s.token, "ctl").c_str());
    }
    unguard_names();
    s.reserve = nullptr;
    s.ctl = nullptr;
    s.fd = -1;
    return 7;
}

int do_init(nvshmemx_init_attr_t *attr) {
    State &s = S();
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.status == NVSHMEM_STATUS_IS_INITIALIZED) return 0;
    if (!attr || !attr->args.uid_args.id) {
        warn("only the unique-id bootstrap (NVSHMEMX_INIT_WITH_UNIQUEID) is modelled");
        return 7;
    }
    const nvshmemx_uniqueid_t *id = attr->args.uid_args.id;
    if (memcmp(id->internal, kMagic, sizeof kMagic) != 0) {
        warn("the unique id was not made by nvshmemx_get_uniqueid of this stand-in");
        return 7;
    }
    int me = attr->args.uid_args.myrank, npes = attr->args.uid_args.nranks;
    if (npes < 1 || me < 0 || me >= npes) {
        warn("invalid rank/nranks in the init attributes");
        return 7;
    }
    reset(s);
    memcpy(&s.token, id->internal + 8, 8);
    s.me = me;
    s.npes = npes;
    s.node_size = env_node_size();
    const char *v = getenv("NVSHMEM_DISABLE_CUDA_VMM");
    s.vmm = !(v && *v && strcmp(v, "0") != 0);
    // VMM on: NVSHMEM reserves NVSHMEM_MAX_MEMORY_PER_GPU of address space and maps physical memory
    // in granules as the heap grows (a 3 GiB nvshmem_malloc works with the default 1 GiB
    // NVSHMEM_SYMMETRIC_SIZE); VMM off: a static heap of NVSHMEM_SYMMETRIC_SIZE.
    s.size = s.vmm ? page_round(env_size("NVSHMEM_MAX_MEMORY_PER_GPU", size_t(128) << 30))
                   : page_round(env_size("NVSHMEM_SYMMETRIC_SIZE", size_t(1) << 30));
    s.chunk = page_round(env_size("UXN_STANDIN_HEAP_CHUNK", size_t(512) << 20));
    if (s.size == 0 || s.chunk == 0) return fail_init(s, "NVSHMEM_SYMMETRIC_SIZE / UXN_STANDIN_HEAP_CHUNK is 0");
    if (cudaGetDevice(&s.device) != cudaSuccess)
        return fail_init(s, "cudaGetDevice failed (no CUDA device, or a fork child)");

    // The control segment (created by whichever PE comes first; zero-filled).
    s.ctl_len = page_round(sizeof(Ctl) + sizeof(uint64_t) * size_t(npes));
    int cfd = shm_open(seg_name(s.token, "ctl").c_str(), O_RDWR | O_CREAT, 0600);
    if (cfd >= 0) guard_name(seg_name(s.token, "ctl"));
    if (cfd < 0 || ftruncate(cfd, off_t(s.ctl_len)) != 0) return fail_init(s, "cannot create the control segment");
    void *c = mmap(nullptr, s.ctl_len, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
    close(cfd);
    if (c == MAP_FAILED) return fail_init(s, "cannot map the control segment");
    s.ctl = static_cast<Ctl *>(c);

    // The reservation: own heap and a slot for every peer.
    if (s.vmm) {
        s.reserve_len = s.size * size_t(npes);
        // One of 64 1 TiB windows in [16 TiB, 80 TiB), chosen by the token (two jobs at once
        // rarely collide; a collision fails init, as a taken range would).
        uintptr_t want = uintptr_t(0x100000000000ULL) + uintptr_t((s.token % 64) << 40);
        void *r = mmap(reinterpret_cast<void *>(want), s.reserve_len, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        if (r == MAP_FAILED || r != reinterpret_cast<void *>(want)) {
            if (r != MAP_FAILED) munmap(r, s.reserve_len);
            return fail_init(s, "the symmetric virtual range derived from the job token is taken");
        }
        s.reserve = static_cast<char *>(r);
        s.base = s.reserve;
    } else {
        s.reserve_len = kPad * size_t(npes) + s.size * size_t(npes);
        void *r = mmap(nullptr, s.reserve_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED) return fail_init(s, "cannot reserve address space");
        s.reserve = static_cast<char *>(r);
        s.base = s.reserve + kPad * size_t(me);
    }
    auto slot = [&](int pe) -> char * {
        int k = (pe - me + npes) % npes;
        return s.vmm ? s.reserve + s.size * size_t(k) : s.reserve + kPad * size_t(npes) + s.size * size_t(k);
    };

    // Own heap segment, sparse.
    std::string own = seg_name(s.token, "pe", me);
    s.fd = shm_open(own.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (s.fd >= 0) guard_name(own);
    if (s.fd < 0 || ftruncate(s.fd, off_t(s.size)) != 0) return fail_init(s, "cannot create the heap segment");
    if (s.vmm) {
        if (!grow_to(s, 1)) return fail_init(s, "cannot map the first heap chunk");
    } else {
        void *p = mmap(s.base, s.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, s.fd, 0);
        if (p == MAP_FAILED) return fail_init(s, "cannot map the heap");
        uxn_standin_register_device_range(s.base, s.size, s.device);
        s.mapped = s.size;
    }
    s.ctl->base[me] = reinterpret_cast<uint64_t>(s.base);
    s.free_blocks[0] = s.size;
    if (const char *k = getenv("UXN_STANDIN_KILL_INIT_PE"))
        if (*k && atoi(k) == me) {
            fprintf(stderr,
                    "[uxn nvshmem stand-in] PE %d: SIGKILL inside nvshmem init (UXN_STANDIN_KILL_INIT_PE); the "
                    "others' segments stay: /dev/shm/uxn-standin-%016llx-*\n",
                    me, (unsigned long long)s.token);
            unlink_pending();
            raise(SIGKILL);
        }
    barrier(s);  // every segment exists and every base is published

    s.local.assign(size_t(npes), nullptr);
    s.remote.assign(size_t(npes), nullptr);
    for (int pe = 0; pe < npes; ++pe) {
        s.remote[size_t(pe)] = reinterpret_cast<char *>(s.ctl->base[pe]);
        if (pe == me) {
            s.local[size_t(pe)] = s.base;
            continue;
        }
        if (!same_node(s, pe, me)) continue;  // another node: nothing mapped, nvshmem_ptr NULL
        // The peer's segment (bounded wait: it exists once the peer passed the barrier above).
        std::string name = seg_name(s.token, "pe", pe);
        int fd = -1;
        double t0 = now_s();
        unsigned spins = 0;
        while ((fd = shm_open(name.c_str(), O_RDWR, 0600)) < 0) {
            if (now_s() - t0 > timeout_s()) return fail_init(s, "a peer's heap segment never appeared");
            pause_briefly(spins);
        }
        char *at = slot(pe);
        void *p = mmap(at, s.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) return fail_init(s, "cannot map a peer's heap");
        uxn_standin_register_device_range(at, s.size, s.device);
        s.local[size_t(pe)] = at;
    }
    barrier(s);  // every PE has mapped every segment: the names can go
    shm_unlink(own.c_str());
    if (me == 0) shm_unlink(seg_name(s.token, "ctl").c_str());
    unguard_names();

    // The "device" arrays of the state.
    s.p2p_array = static_cast<char **>(calloc(size_t(npes), sizeof(char *)));
    s.remote_array = static_cast<char **>(calloc(size_t(npes), sizeof(char *)));
    for (int pe = 0; pe < npes; ++pe) {
        s.p2p_array[pe] = s.local[size_t(pe)];
        s.remote_array[pe] = s.remote[size_t(pe)];
    }
    uxn_standin_register_device_range(s.p2p_array, sizeof(char *) * size_t(npes), s.device);
    uxn_standin_register_device_range(s.remote_array, sizeof(char *) * size_t(npes), s.device);
    if (env_fail_init_pe() == me) {  // injected: after every collective step of the bootstrap
        for (int pe = 0; pe < npes; ++pe)
            if (s.local[size_t(pe)]) uxn_standin_unregister_device_range(s.local[size_t(pe)]);
        for (size_t off = 0; off < s.mapped; off += s.chunk) uxn_standin_unregister_device_range(s.base + off);
        uxn_standin_unregister_device_range(s.p2p_array);
        uxn_standin_unregister_device_range(s.remote_array);
        free(s.p2p_array);
        free(s.remote_array);
        s.token = 0;  // the names are unlinked already
        return fail_init(s, "injected by UXN_STANDIN_FAIL_INIT_PE (this PE's transport could not be set up)");
    }

    memset(&nvshmemi_device_state, 0, sizeof nvshmemi_device_state);
    nvshmemi_device_state.version = int((1 << 16) + sizeof(nvshmemi_device_host_state_t));
    nvshmemi_device_state.mype = me;
    nvshmemi_device_state.npes = npes;
    nvshmemi_device_state.heap_base = s.base;
    nvshmemi_device_state.heap_size = s.size;
    nvshmemi_device_state.peer_heap_base_p2p = reinterpret_cast<void **>(s.p2p_array);
    nvshmemi_device_state.peer_heap_base_remote = reinterpret_cast<void **>(s.remote_array);
    s.status = NVSHMEM_STATUS_IS_INITIALIZED;
    return 0;
}

void do_finalize() {
    State &s = S();
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.status != NVSHMEM_STATUS_IS_INITIALIZED) return;
    barrier(s);  // as NVSHMEM's finalize: collective
    for (int pe = 0; pe < s.npes; ++pe)
        if (s.local[size_t(pe)]) uxn_standin_unregister_device_range(s.local[size_t(pe)]);
    for (size_t off = 0; off < s.mapped; off += s.chunk) uxn_standin_unregister_device_range(s.base + off);
    uxn_standin_unregister_device_range(s.p2p_array);
    uxn_standin_unregister_device_range(s.remote_array);
    munmap(s.reserve, s.reserve_len);
    if (s.fd >= 0) close(s.fd);
    munmap(s.ctl, s.ctl_len);
    free(s.p2p_array);
    free(s.remote_array);
    memset(&nvshmemi_device_state, 0, sizeof nvshmemi_device_state);
    reset(s);
}

bool in_heap(const State &s, const void *p, size_t *off) {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(s.base);
    if (s.status != NVSHMEM_STATUS_IS_INITIALIZED || a < b || a >= b + s.size) return false;
    if (off) *off = a - b;
    return true;
}

void *sym_alloc(size_t align, size_t n) {
    State &s = S();
    if (s.status != NVSHMEM_STATUS_IS_INITIALIZED) return nullptr;
    void *ret = nullptr;
    {
        std::lock_guard<std::mutex> lk(s.mu);
        if (n) {
            if (align < kAlign) align = kAlign;
            size_t len = (n + kAlign - 1) / kAlign * kAlign;
            for (auto it = s.free_blocks.begin(); it != s.free_blocks.end(); ++it) {
                size_t start = (it->first + align - 1) / align * align;
                if (start + len > it->first + it->second) continue;
                size_t bo = it->first, bl = it->second;
                s.free_blocks.erase(it);
                if (start > bo) s.free_blocks[bo] = start - bo;
                if (start + len < bo + bl) s.free_blocks[start + len] = bo + bl - (start + len);
                s.used[start] = len;
                if (s.vmm && !grow_to(s, start + len)) {
                    // keep it allocated but report failure as NVSHMEM would (NULL)
                    s.used.erase(start);
                    s.free_blocks[start] = len;
                    break;
                }
                ret = s.base + start;
                break;
            }
        }
    }
    barrier(s);  // nvshmem_malloc is collective and ends with a barrier
    return ret;
}

}  // namespace

// ================================================================== bootstrap and init
UXN_EXPORT int nvshmemx_get_uniqueid(nvshmemx_uniqueid_t *id) {
    if (!id) return 7;
    int version = id->version;
    memset(id, 0, sizeof *id);
    id->version = version ? version : int((1 << 16) + sizeof(nvshmemx_uniqueid_t));
    memcpy(id->internal, kMagic, sizeof kMagic);
    uint64_t token = 0;
    while (token == 0)
        if (getrandom(&token, sizeof token, 0) != sizeof token) token = uint64_t(now_s() * 1e9) ^ uint64_t(getpid());
    memcpy(id->internal + 8, &token, 8);
    return 0;
}
UXN_EXPORT int nvshmemx_set_attr_uniqueid_args(const int myrank, const int nranks, const nvshmemx_uniqueid_t *id,
                                               nvshmemx_init_attr_t *attr) {
    if (!attr || !id) return 7;
    attr->args.uid_args.id = const_cast<nvshmemx_uniqueid_t *>(id);
    attr->args.uid_args.myrank = myrank;
    attr->args.uid_args.nranks = nranks;
    return 0;
}
UXN_EXPORT int nvshmemx_hostlib_init_attr(unsigned int flags, nvshmemx_init_attr_t *attr) {
    if (!(flags & NVSHMEMX_INIT_WITH_UNIQUEID)) {
        warn("only NVSHMEMX_INIT_WITH_UNIQUEID is modelled (flags %s0x%lx)", "", long(flags));
        return 7;
    }
    return do_init(attr);
}
UXN_EXPORT void nvshmemx_hostlib_finalize() { do_finalize(); }
UXN_EXPORT int nvshmemx_init_status() { return S().status; }
// What libnvshmem_device.a provides in a real installation (device_library.hpp calls them).
__attribute__((visibility("default"))) int nvshmemi_init_thread(int requested, int *provided, unsigned int flags,
                                                                nvshmemx_init_attr_t *attr, nvshmemi_version_t) {
    if (provided) *provided = requested;
    return nvshmemx_hostlib_init_attr(flags, attr);
}
UXN_EXPORT void nvshmemi_finalize() { do_finalize(); }
UXN_EXPORT void nvshmem_query_thread(int *provided) {
    if (provided) *provided = NVSHMEM_THREAD_MULTIPLE;
}

// ================================================================== queries
UXN_EXPORT int nvshmem_my_pe() { return S().status == NVSHMEM_STATUS_IS_INITIALIZED ? S().me : -1; }
UXN_EXPORT int nvshmem_n_pes() { return S().status == NVSHMEM_STATUS_IS_INITIALIZED ? S().npes : -1; }
UXN_EXPORT void nvshmem_info_get_version(int *major, int *minor) {
    if (major) *major = NVSHMEM_MAJOR_VERSION;
    if (minor) *minor = NVSHMEM_MINOR_VERSION;
}
UXN_EXPORT void nvshmem_info_get_name(char *name) {
    if (name) snprintf(name, NVSHMEM_MAX_NAME_LEN, "%s", NVSHMEM_VENDOR_STRING);
}
UXN_EXPORT void nvshmemx_vendor_get_version_info(int *major, int *minor, int *patch) {
    if (major) *major = NVSHMEM_VENDOR_MAJOR_VERSION;
    if (minor) *minor = NVSHMEM_VENDOR_MINOR_VERSION;
    if (patch) *patch = NVSHMEM_VENDOR_PATCH_VERSION;
}
UXN_EXPORT void *nvshmem_ptr(const void *p, int pe) {
    State &s = S();
    size_t off;
    if (!in_heap(s, p, &off) || pe < 0 || pe >= s.npes || !s.local[size_t(pe)]) return nullptr;  // another node
    return s.local[size_t(pe)] + off;
}

// ================================================================== heap
UXN_EXPORT void *nvshmem_malloc(size_t n) { return sym_alloc(kAlign, n); }
UXN_EXPORT void *nvshmem_align(size_t a, size_t n) { return sym_alloc(a, n); }
UXN_EXPORT void *nvshmem_calloc(size_t count, size_t each) {
    void *p = sym_alloc(kAlign, count * each);
    if (p) memset(p, 0, count * each);
    barrier(S());
    return p;
}
UXN_EXPORT void nvshmem_free(void *p) {
    State &s = S();
    if (s.status != NVSHMEM_STATUS_IS_INITIALIZED) return;
    barrier(s);  // collective; every PE's outstanding use is over
    if (!p) return;
    std::lock_guard<std::mutex> lk(s.mu);
    size_t off;
    if (!in_heap(s, p, &off)) return;
    auto it = s.used.find(off);
    if (it == s.used.end()) return;
    size_t len = it->second;
    s.used.erase(it);
    auto nx = s.free_blocks.lower_bound(off);
    if (nx != s.free_blocks.end() && nx->first == off + len) {
        len += nx->second;
        nx = s.free_blocks.erase(nx);
    }
    if (nx != s.free_blocks.begin()) {
        auto pv = std::prev(nx);
        if (pv->first + pv->second == off) {
            pv->second += len;
            return;
        }
    }
    s.free_blocks[off] = len;
}

// ================================================================== RMA and synchronisation
static void *peer_addr(const void *sym, int pe) {
    void *p = nvshmem_ptr(sym, pe);
    if (!p) {
        warn(
            "RMA on an address outside the symmetric heap, a bad PE, or a PE of another node (remote transports "
            "are not modelled): PE %s%ld",
            "", pe);
        abort();
    }
    return p;
}
UXN_EXPORT void nvshmem_putmem(void *dest, const void *src, size_t n, int pe) {
    if (n) memmove(peer_addr(dest, pe), src, n);
}
UXN_EXPORT void nvshmem_getmem(void *dest, const void *src, size_t n, int pe) {
    if (n) memmove(dest, peer_addr(src, pe), n);
}
UXN_EXPORT void nvshmem_putmem_nbi(void *dest, const void *src, size_t n, int pe) { nvshmem_putmem(dest, src, n, pe); }
UXN_EXPORT void nvshmem_getmem_nbi(void *dest, const void *src, size_t n, int pe) { nvshmem_getmem(dest, src, n, pe); }
UXN_EXPORT void nvshmem_quiet() { std::atomic_thread_fence(std::memory_order_seq_cst); }
UXN_EXPORT void nvshmem_fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
UXN_EXPORT void nvshmem_barrier_all() { barrier(S()); }
UXN_EXPORT void nvshmem_sync_all() { barrier(S()); }
UXN_EXPORT void nvshmemx_barrier_all_on_stream(cudaStream_t s) {
    cudaStreamSynchronize(s);
    barrier(S());
}
UXN_EXPORT void nvshmemx_quiet_on_stream(cudaStream_t s) { cudaStreamSynchronize(s); }
UXN_EXPORT void nvshmem_int_put(int *d, const int *src, size_t n, int pe) {
    nvshmem_putmem(d, src, n * sizeof(int), pe);
}
UXN_EXPORT void nvshmem_int_get(int *d, const int *src, size_t n, int pe) {
    nvshmem_getmem(d, src, n * sizeof(int), pe);
}
UXN_EXPORT void nvshmem_global_exit(int status) { _exit(status); }
