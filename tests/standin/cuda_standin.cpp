// upcxx-extra-nvshmem test stand-in for the CUDA driver AND runtime (built as libcuda.so.1), over
// host memory. Never installed; see README.md for what it models and what it cannot show.
//
// Model: "device memory" is host memory registered with a device (cudaMalloc / cuMemAlloc, and the
// ranges the NVSHMEM stand-in registers). Streams are FIFO queues, each run by its own worker
// thread; an operation waits for its dependencies (the legacy default stream's implicit
// synchronisation, cudaStreamWaitEvent) before it runs. Copies land after a delay. Events record
// a position in a stream. Everything is guarded by one mutex; completions notify one condition
// variable.
// SPDX-License-Identifier: BSD-3-Clause
#include <algorithm>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "standin_control.h"

#define UXN_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxDevices = 16;

struct Stream;
struct Dep {
    Stream *s;
    uint64_t upto;  // satisfied when s->completed >= upto
};
// One copy of a batch kernel's parameter (the library's uxn_copy_batch, src/cuda/batch_copy.cu).
struct BatchDesc {
    const void *src;
    void *dst;
    size_t n;
};
constexpr unsigned kBatchMax = 128;  // the kernel's parameter: this many descriptors

struct Op {
    enum Kind { Copy, Batch, Memset, HostFn, Marker, WaitValue, WriteValue } kind = Marker;
    std::vector<BatchDesc> batch;  // Batch: its copies
    void *dst = nullptr;
    const void *src = nullptr;
    size_t n = 0;
    int value = 0;
    cudaHostFn_t fn = nullptr;
    void *arg = nullptr;
    bool fail = false;
    const uint32_t *word = nullptr;  // WaitValue: runs once *word >= wait_value in wrapping order;
                                     // WriteValue: stores wait_value there when the stream reaches it
    uint32_t wait_value = 0;
    unsigned delay_us = 0;
    uint64_t index = 0;
    std::vector<Dep> deps;
};
struct Stream {
    int device = 0;
    bool legacy = false;
    bool blocking = true;  // synchronises with the legacy stream
    bool destroyed = false;
    bool worker = false;
    std::deque<Op> q;
    uint64_t enqueued = 0, completed = 0;
    std::vector<uint64_t> failed;  // indices of failed copies not yet reported (by an event or a synchronize)
    uint64_t last_record = 0;      // the index of the newest event record
    // Stream capture (cudaStreamBeginCapture): ops enqueued meanwhile go into the graph, not run.
    bool capturing = false;
    cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
    std::vector<Op> captured;
};
// A captured graph (cudaStreamEndCapture): its ops; instantiating or launching it is not modelled.
struct Graph {
    std::vector<Op> ops;
};
struct Event {
    int device = 0;  // recorded only on a stream of this device (cudaErrorInvalidResourceHandle otherwise)
    Stream *s = nullptr;
    uint64_t from = 0;  // it reports the failures in (from, upto]: those since the record before it
    uint64_t upto = 0;
    bool error = false;
    bool reported = false;  // its failures were taken from the stream's (a synchronize does not report them again)
    bool destroyed = false;
};
struct Ctx {
    int device;
};
struct Range {
    size_t size;
    int device;
    bool owned;  // cudaMalloc'd (freed by cudaFree)
};

// Leaked on purpose: worker threads may outlive static destruction.
struct Global {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Stream *> streams[kMaxDevices];  // every live non-legacy stream, per device
    Stream *legacy[kMaxDevices] = {};
    std::mutex mem_mu;
    std::map<uintptr_t, Range> ranges;
    Ctx ctx[kMaxDevices];
};
Global &G() {
    static Global *g = [] {
        auto *g = new Global;
        for (int i = 0; i < kMaxDevices; ++i) g->ctx[i].device = i;
        return g;
    }();
    return *g;
}

std::atomic<bool> g_touched{false}, g_forked{false};
std::atomic<unsigned> g_delay_us{200};
std::atomic<int> g_fail_next{0};
std::atomic<int> g_fail_launches{
    0};  // the next n cuLaunchKernel calls fail at the call (uxn_standin_fail_next_launches)
std::atomic<long> g_failed_copies{0}, g_async_copies{0}, g_batch_launches{0}, g_batched_copies{0};
std::atomic<long> g_stream_writes{0}, g_event_records{0};
// Copy failures a stream write reached before any event or synchronize reported them: the next
// cuStreamQuery (of any stream) reports one, as a GPU's context reports a fault to any call.
std::atomic<int> g_faults{0};
// uxn_standin_sticky_faults(1): such a fault stays (every cuStreamQuery, cuEventQuery and
// cuEventSynchronize reports it) and no stream write or signalling kernel's word stores from then
// on, as a faulted GPU context runs no more work; uxn_standin_sticky_faults(0) clears it (a new
// context).
std::atomic<bool> g_sticky{false}, g_sticky_fault{false};
std::atomic<long> g_busy_destroys{0};  // streams destroyed with work queued (uxn_standin_busy_stream_destroys)
int g_devices = 1;

void on_fork_child() {
    if (g_touched.load()) g_forked.store(true);
}

__attribute__((constructor)) void standin_init() {
    if (const char *e = getenv("UXN_STANDIN_GPUS")) {
        int n = atoi(e);
        g_devices = n < 0 ? 0 : (n > kMaxDevices ? kMaxDevices : n);
    }
    if (const char *e = getenv("UXN_STANDIN_COPY_DELAY_US")) g_delay_us = (unsigned)strtoul(e, nullptr, 10);
    pthread_atfork(nullptr, nullptr, on_fork_child);
}

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local std::vector<Ctx *> t_ctx;  // the context stack; back() is current

Ctx *current_ctx() { return t_ctx.empty() ? nullptr : t_ctx.back(); }
void set_current(Ctx *c) {
    if (t_ctx.empty())
        t_ctx.push_back(c);
    else
        t_ctx.back() = c;
}
// The runtime's implicit initialisation: a current context on the calling thread.
int runtime_device() {
    Ctx *c = current_ctx();
    if (!c) {
        set_current(&G().ctx[0]);
        c = current_ctx();
    }
    return c ? c->device : 0;
}

cudaError_t rt(cudaError_t e) {
    if (e != cudaSuccess && e != cudaErrorNotReady) t_last_error = e;
    return e;
}
// Entry of every runtime call that initialises: the fork rule and the implicit context.
#define RT_ENTER()                                                    \
    do {                                                              \
        if (g_forked.load()) return rt(cudaErrorInitializationError); \
        g_touched.store(true);                                        \
        if (g_devices == 0) return rt(cudaErrorNoDevice);             \
    } while (0)
#define DRV_ENTER()                                             \
    do {                                                        \
        if (g_forked.load()) return CUDA_ERROR_NOT_INITIALIZED; \
    } while (0)

// ---------------------------------------------------------------- streams
// Stream `s` reached a word (cuStreamWriteValue32, or a signalling kernel's after its copies):
// its copy failures with an index below `upto` become the context's fault, and the word stores
// `value` unless `faulting` (a kernel that faulted) or the context is faulted for good (sticky
// faults: a faulted context runs no more work).
static void reach_word(Stream *s, uint64_t upto, const uint32_t *word, uint32_t value, bool faulting) {
    {
        Global &g = G();
        std::lock_guard<std::mutex> fl(g.mu);
        for (auto it = s->failed.begin(); it != s->failed.end();) {
            if (*it >= upto) {
                ++it;
                continue;
            }
            if (g_sticky.load())
                g_sticky_fault.store(true);
            else
                g_faults.fetch_add(1);
            it = s->failed.erase(it);
        }
    }
    if (!faulting && !g_sticky_fault.load()) __atomic_store_n(const_cast<uint32_t *>(word), value, __ATOMIC_RELEASE);
}

void worker_main(Stream *s) {
    Global &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    for (;;) {
        g.cv.wait(lk, [&] { return !s->q.empty() || s->destroyed; });
        if (s->q.empty()) break;  // destroyed and drained
        {
            Op &head = s->q.front();
            g.cv.wait(lk, [&] {
                for (const Dep &d : head.deps)
                    if (d.s->completed < d.upto) return false;
                return true;
            });
        }
        Op op = std::move(s->q.front());
        s->q.pop_front();
        lk.unlock();
        switch (op.kind) {
            case Op::Copy:
                if (op.delay_us) std::this_thread::sleep_for(std::chrono::microseconds(op.delay_us));
                if (op.fail)
                    g_failed_copies.fetch_add(1);
                else if (op.n)
                    std::memmove(op.dst, op.src, op.n);
                break;
            case Op::Batch:  // one launch: one delay, then every copy (then the signalling kernel's word)
                if (op.delay_us) std::this_thread::sleep_for(std::chrono::microseconds(op.delay_us));
                if (op.fail)
                    g_failed_copies.fetch_add(1);
                else
                    for (const BatchDesc &d : op.batch)
                        if (d.n) std::memmove(d.dst, d.src, d.n);
                // As a stream write after the copies: the failures up to it (its own included).
                if (op.word) reach_word(s, op.index + 1, op.word, op.wait_value, op.fail);
                break;
            case Op::Memset:
                if (op.n) std::memset(op.dst, op.value, op.n);
                break;
            case Op::HostFn:
                op.fn(op.arg);
                break;
            case Op::Marker:
                break;
            case Op::WaitValue:  // cuStreamWaitValue32(GEQ): the host (or another stream) writes the word
                while (static_cast<int32_t>(__atomic_load_n(op.word, __ATOMIC_ACQUIRE) - op.wait_value) < 0)
                    std::this_thread::sleep_for(std::chrono::microseconds(20));
                break;
            case Op::WriteValue:  // cuStreamWriteValue32: the failures before it
                reach_word(s, op.index, op.word, op.wait_value, false);
                break;
        }
        lk.lock();
        s->completed = op.index;
        g.cv.notify_all();
    }
    s->worker = false;
    g.cv.notify_all();
}

Stream *legacy_stream(int dev) {  // g.mu held
    Global &g = G();
    if (!g.legacy[dev]) {
        auto *s = new Stream;
        s->device = dev;
        s->legacy = true;
        g.legacy[dev] = s;
    }
    return g.legacy[dev];
}

struct PerThreadStreams {
    Stream *s[kMaxDevices] = {};
    ~PerThreadStreams() {
        Global &g = G();
        std::lock_guard<std::mutex> lk(g.mu);
        for (Stream *x : s)
            if (x) x->destroyed = true;
        g.cv.notify_all();
    }
};
thread_local PerThreadStreams t_pts;

Stream *new_stream(int dev, bool blocking) {  // g.mu held
    // Forget the per-thread streams of exited threads once drained (their Stream stays allocated:
    // events may still name it).
    auto &v = G().streams[dev];
    for (auto it = v.begin(); it != v.end();)
        it = (*it)->destroyed && !(*it)->worker && (*it)->q.empty() ? v.erase(it) : it + 1;
    auto *s = new Stream;
    s->device = dev;
    s->blocking = blocking;
    G().streams[dev].push_back(s);
    return s;
}

// The stream a handle means for device `dev` (0, legacy and per-thread are special). g.mu held.
Stream *resolve(const void *h, int dev) {
    uintptr_t v = reinterpret_cast<uintptr_t>(h);
    if (v == 0 || v == reinterpret_cast<uintptr_t>(cudaStreamLegacy)) return legacy_stream(dev);
    if (v == reinterpret_cast<uintptr_t>(cudaStreamPerThread)) {
        Stream *&s = t_pts.s[dev];
        if (!s) s = new_stream(dev, true);
        return s;
    }
    return reinterpret_cast<Stream *>(const_cast<void *>(h));
}

// Enqueues op on s with the legacy stream's implicit ordering. g.mu held. Returns the op's index.
uint64_t enqueue(Stream *s, Op op) {
    Global &g = G();
    if (s->capturing) {  // recorded into the graph being captured, not run
        s->captured.push_back(std::move(op));
        return s->enqueued;
    }
    if (s->legacy) {
        for (Stream *b : g.streams[s->device])
            if (b->blocking && b->completed < b->enqueued) op.deps.push_back({b, b->enqueued});
    } else if (s->blocking) {
        Stream *l = legacy_stream(s->device);
        if (l->completed < l->enqueued) op.deps.push_back({l, l->enqueued});
    }
    op.index = ++s->enqueued;
    if ((op.kind == Op::Copy || op.kind == Op::Batch) && op.fail) {
        s->failed.push_back(op.index);
    }
    s->q.push_back(std::move(op));
    if (!s->worker) {
        s->worker = true;
        std::thread(worker_main, s).detach();
    }
    g.cv.notify_all();
    return s->enqueued;
}

// Waits until s has completed `upto`; reports (and forgets) the failed copies up to there. g.mu held.
bool wait_stream(std::unique_lock<std::mutex> &lk, Stream *s, uint64_t upto) {
    G().cv.wait(lk, [&] { return s->completed >= upto; });
    bool err = false;
    for (auto it = s->failed.begin(); it != s->failed.end();) {
        if (*it <= upto) {
            err = true;
            it = s->failed.erase(it);
        } else {
            ++it;
        }
    }
    return err;
}

bool valid_device(int d) { return d >= 0 && d < g_devices; }

// Takes one of the injected failures, if any is pending.
bool take_injected_failure() {
    int f = g_fail_next.load();
    while (f > 0 && !g_fail_next.compare_exchange_weak(f, f - 1)) {
    }
    return f > 0;
}

cudaError_t async_copy(void *dst, const void *src, size_t n, const void *stream, int dev, bool count_as_async) {
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, dev);
    if (s->destroyed) return cudaErrorInvalidResourceHandle;
    Op op;
    op.kind = Op::Copy;
    op.dst = dst;
    op.src = src;
    op.n = n;
    op.delay_us = g_delay_us.load();
    if (count_as_async) {
        g_async_copies.fetch_add(1);
        op.fail = take_injected_failure();
    }
    enqueue(s, std::move(op));
    return cudaSuccess;
}

// A synchronous operation: on the legacy stream, then waited for.
cudaError_t sync_op(Op op, int dev) {
    Global &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    Stream *s = legacy_stream(dev);
    uint64_t i = enqueue(s, std::move(op));
    wait_stream(lk, s, i);
    return cudaSuccess;
}

// ---------------------------------------------------------------- memory registry
bool lookup(const void *p, uintptr_t *base, Range *r) {
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mem_mu);
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = g.ranges.upper_bound(a);
    if (it == g.ranges.begin()) return false;
    --it;
    if (a >= it->first + (it->second.size ? it->second.size : 1)) return false;
    if (base) *base = it->first;
    if (r) *r = it->second;
    return true;
}

void *device_alloc(size_t n, int dev) {
    size_t sz = (n + 255) & ~size_t(255);
    void *p = nullptr;
    if (posix_memalign(&p, 4096, sz ? sz : 256) != 0) return nullptr;
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mem_mu);
    g.ranges[reinterpret_cast<uintptr_t>(p)] = Range{n, dev, true};
    return p;
}
bool device_free(void *p) {
    Global &g = G();
    {
        std::lock_guard<std::mutex> lk(g.mem_mu);
        auto it = g.ranges.find(reinterpret_cast<uintptr_t>(p));
        if (it == g.ranges.end() || !it->second.owned) return false;
        g.ranges.erase(it);
    }
    free(p);
    return true;
}

// The names and messages of the errors the stand-in returns (one row each).
template <class E>
struct error_text {
    E code;
    const char *name, *text;
};
const error_text<cudaError_t> rt_errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error (stand-in: injected copy failure)"},
};
const error_text<CUresult> drv_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available (stand-in: no PTX)"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error (stand-in: injected copy failure)"},
};
template <class E, std::size_t N>
const error_text<E> *find_error(const error_text<E> (&table)[N], E e) {
    for (const error_text<E> &t : table)
        if (t.code == e) return &t;
    return nullptr;
}
const char *rt_name(cudaError_t e) {
    const auto *t = find_error(rt_errors, e);
    return t ? t->name : "cudaErrorStandinOther";
}
const char *rt_string(cudaError_t e) {
    const auto *t = find_error(rt_errors, e);
    return t ? t->text : "error (stand-in)";
}
const char *drv_name(CUresult r) {
    const auto *t = find_error(drv_errors, r);
    return t ? t->name : nullptr;
}
const char *drv_string(CUresult r) {
    const auto *t = find_error(drv_errors, r);
    return t ? t->text : nullptr;
}
CUresult to_drv(cudaError_t e) {
    switch (e) {
        case cudaSuccess:
            return CUDA_SUCCESS;
        case cudaErrorNotReady:
            return CUDA_ERROR_NOT_READY;
        case cudaErrorUnknown:
            return CUDA_ERROR_UNKNOWN;
        case cudaErrorInvalidResourceHandle:
            return CUDA_ERROR_INVALID_HANDLE;
        case cudaErrorInvalidValue:
            return CUDA_ERROR_INVALID_VALUE;
        case cudaErrorInitializationError:
            return CUDA_ERROR_NOT_INITIALIZED;
        case cudaErrorMemoryAllocation:
            return CUDA_ERROR_OUT_OF_MEMORY;
        default:
            return CUDA_ERROR_UNKNOWN;
    }
}

// Shared by both APIs ---------------------------------------------------------
cudaError_t event_record(Event *e, const void *stream, int dev) {
    g_event_records.fetch_add(1);
    if (!e) return cudaErrorInvalidResourceHandle;
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    if (e->destroyed) return cudaErrorInvalidResourceHandle;
    Stream *s = resolve(stream, dev);
    if (s->device != e->device) return cudaErrorInvalidResourceHandle;  // as CUDA: the event's device only
    if (s->capturing) return cudaErrorStreamCaptureUnsupported;         // an event node is not modelled
    Op op;
    op.kind = Op::Marker;
    uint64_t i = enqueue(s, std::move(op));
    e->s = s;
    e->from = s->last_record;
    e->upto = i;
    e->error = false;
    e->reported = false;
    s->last_record = i;
    return cudaSuccess;
}
// A completed event's outcome, fixed the first time it is asked: an error when a failure in
// (from, upto] is not reported yet (it is reported now: a synchronize does not report it
// again); a failure a synchronize reported first is not the event's. g.mu held.
cudaError_t event_outcome(Event *e) {
    if (!e->reported) {
        e->reported = true;
        auto &f = e->s->failed;
        const auto covered = [&](uint64_t i) { return i > e->from && i <= e->upto; };
        e->error = std::any_of(f.begin(), f.end(), covered);
        f.erase(std::remove_if(f.begin(), f.end(), covered), f.end());
    }
    return e->error ? cudaErrorUnknown : cudaSuccess;
}
cudaError_t event_query(Event *e) {
    if (!e) return cudaErrorInvalidResourceHandle;
    if (g_sticky_fault.load()) return cudaErrorUnknown;  // a faulted context: every call reports it
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    if (!e->s) return cudaSuccess;
    if (e->s->completed < e->upto) return cudaErrorNotReady;
    return event_outcome(e);
}
cudaError_t event_sync(Event *e) {
    if (!e) return cudaErrorInvalidResourceHandle;
    Global &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    if (!e->s) return cudaSuccess;
    Stream *s = e->s;
    uint64_t upto = e->upto;
    g.cv.wait(lk, [&] { return s->completed >= upto; });
    if (g_sticky_fault.load()) return cudaErrorUnknown;
    return event_outcome(e);
}
cudaError_t stream_sync(const void *stream, int dev) {
    Global &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, dev);
    uint64_t upto = s->enqueued;
    if (s->legacy) {  // waits for the blocking streams too (the legacy stream's rule)
        Op op;
        upto = enqueue(s, std::move(op));
    }
    return wait_stream(lk, s, upto) ? cudaErrorUnknown : cudaSuccess;
}
cudaError_t device_sync(int dev) {
    Global &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    std::vector<std::pair<Stream *, uint64_t>> all;
    Stream *l = legacy_stream(dev);
    all.push_back({l, l->enqueued});
    for (Stream *s : g.streams[dev]) all.push_back({s, s->enqueued});
    bool err = false;
    for (auto &p : all) err |= wait_stream(lk, p.first, p.second);
    return err ? cudaErrorUnknown : cudaSuccess;
}
cudaError_t stream_destroy(const void *h, bool by_library = false) {
    uintptr_t v = reinterpret_cast<uintptr_t>(h);
    if (v <= 2) return cudaErrorInvalidResourceHandle;
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = reinterpret_cast<Stream *>(const_cast<void *>(h));
    if (s->destroyed) return cudaErrorInvalidResourceHandle;
    // Pending work still runs, and the legacy stream and cudaDeviceSynchronize still wait for it;
    // the stream leaves the device's list once drained (new_stream), and the Stream is never freed
    // (events may name it). Counted when the library destroys one so: its copy engine's drain
    // returned before its copies landed.
    if (by_library && s->completed < s->enqueued) g_busy_destroys.fetch_add(1);
    s->destroyed = true;
    g.cv.notify_all();
    return cudaSuccess;
}
cudaError_t stream_wait_event(const void *stream, Event *e, int dev) {
    if (!e) return cudaErrorInvalidResourceHandle;
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, dev);
    if (!e->s) return cudaSuccess;
    Op op;
    op.deps.push_back({e->s, e->upto});
    enqueue(s, std::move(op));
    return cudaSuccess;
}

}  // namespace

// =============================================================== control API
UXN_EXPORT int uxn_standin_present(void) { return 1; }
UXN_EXPORT unsigned uxn_standin_set_copy_delay_us(unsigned us) { return g_delay_us.exchange(us); }
UXN_EXPORT unsigned uxn_standin_copy_delay_us(void) { return g_delay_us.load(); }
UXN_EXPORT int uxn_standin_fail_next_copies(int n) { return g_fail_next.exchange(n < 0 ? 0 : n); }
UXN_EXPORT int uxn_standin_sticky_faults(int on) {
    g_sticky_fault.store(false);
    return g_sticky.exchange(on != 0) ? 1 : 0;
}
UXN_EXPORT int uxn_standin_fail_next_launches(int n) { return g_fail_launches.exchange(n < 0 ? 0 : n); }
UXN_EXPORT long uxn_standin_failed_copies(void) { return g_failed_copies.load(); }
UXN_EXPORT long uxn_standin_async_copies(void) { return g_async_copies.load(); }
UXN_EXPORT long uxn_standin_busy_stream_destroys(void) { return g_busy_destroys.load(); }
UXN_EXPORT long uxn_standin_batch_launches(void) { return g_batch_launches.load(); }
UXN_EXPORT long uxn_standin_stream_writes(void) { return g_stream_writes.load(); }
UXN_EXPORT long uxn_standin_event_records(void) { return g_event_records.load(); }
UXN_EXPORT long uxn_standin_batched_copies(void) { return g_batched_copies.load(); }
UXN_EXPORT int uxn_standin_register_device_range(void *base, size_t size, int device) {
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mem_mu);
    g.ranges[reinterpret_cast<uintptr_t>(base)] = Range{size, device, false};
    return 0;
}
UXN_EXPORT int uxn_standin_unregister_device_range(void *base) {
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mem_mu);
    return g.ranges.erase(reinterpret_cast<uintptr_t>(base)) ? 0 : -1;
}
UXN_EXPORT int uxn_standin_device_of(const void *p) {
    Range r;
    return lookup(p, nullptr, &r) ? r.device : -1;
}
UXN_EXPORT void uxn_standin_drain(void) {
    if (g_forked.load()) return;
    for (int d = 0; d < g_devices; ++d) device_sync(d);
}

// =============================================================== runtime API
UXN_EXPORT const char *cudaGetErrorName(cudaError_t e) { return rt_name(e); }
UXN_EXPORT const char *cudaGetErrorString(cudaError_t e) { return rt_string(e); }
UXN_EXPORT cudaError_t cudaGetLastError(void) {
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}
UXN_EXPORT cudaError_t cudaPeekAtLastError(void) { return t_last_error; }
UXN_EXPORT cudaError_t cudaGetDeviceCount(int *n) {
    if (g_forked.load()) return rt(cudaErrorInitializationError);
    if (!n) return rt(cudaErrorInvalidValue);
    *n = g_devices;
    return g_devices ? cudaSuccess : rt(cudaErrorNoDevice);
}
UXN_EXPORT cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return rt(cudaErrorInvalidValue);
    *v = CUDA_VERSION;
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v) return rt(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaSetDevice(int d) {
    RT_ENTER();
    if (!valid_device(d)) return rt(cudaErrorInvalidDevice);
    set_current(&G().ctx[d]);
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaGetDevice(int *d) {
    RT_ENTER();
    if (!d) return rt(cudaErrorInvalidValue);
    *d = runtime_device();
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaSetDeviceFlags(unsigned) {
    RT_ENTER();
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can, int a, int b) {
    RT_ENTER();
    if (!can || !valid_device(a) || !valid_device(b)) return rt(cudaErrorInvalidDevice);
    *can = a != b;
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned) {
    RT_ENTER();
    return valid_device(peer) ? cudaSuccess : rt(cudaErrorInvalidDevice);
}
UXN_EXPORT cudaError_t cudaMalloc(void **p, size_t n) {
    RT_ENTER();
    if (!p) return rt(cudaErrorInvalidValue);
    int dev = runtime_device();
    if (n == 0) {
        *p = nullptr;
        return cudaSuccess;
    }
    *p = device_alloc(n, dev);
    return *p ? cudaSuccess : rt(cudaErrorMemoryAllocation);
}
UXN_EXPORT cudaError_t cudaFree(void *p) {
    RT_ENTER();
    runtime_device();
    if (!p) return cudaSuccess;
    // cudaFree synchronises the device, as the real one does.
    device_sync(uxn_standin_device_of(p) >= 0 ? uxn_standin_device_of(p) : runtime_device());
    return device_free(p) ? cudaSuccess : rt(cudaErrorInvalidValue);
}
UXN_EXPORT cudaError_t cudaMallocHost(void **p, size_t n) {
    RT_ENTER();
    if (!p) return rt(cudaErrorInvalidValue);
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : rt(cudaErrorMemoryAllocation);
}
UXN_EXPORT cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) { return cudaMallocHost(p, n); }
UXN_EXPORT cudaError_t cudaFreeHost(void *p) {
    RT_ENTER();
    free(p);
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaHostRegister(void *, size_t, unsigned) {
    RT_ENTER();
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaHostUnregister(void *) {
    RT_ENTER();
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaMemGetInfo(size_t *free_, size_t *total) {
    RT_ENTER();
    if (free_) *free_ = size_t(64) << 30;
    if (total) *total = size_t(80) << 30;
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    RT_ENTER();
    if (!a) return rt(cudaErrorInvalidValue);
    std::memset(a, 0, sizeof *a);
    Range r;
    if (lookup(p, nullptr, &r)) {
        a->type = cudaMemoryTypeDevice;
        a->device = r.device;
        a->devicePointer = const_cast<void *>(p);
        a->hostPointer = nullptr;
    } else {
        a->type = cudaMemoryTypeUnregistered;
        a->device = -2;
        a->devicePointer = nullptr;
        a->hostPointer = const_cast<void *>(p);
    }
    return cudaSuccess;
}
static bool valid_kind(cudaMemcpyKind k) { return k >= cudaMemcpyHostToHost && k <= cudaMemcpyDefault; }
UXN_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
    RT_ENTER();
    if (!valid_kind(k)) return rt(cudaErrorInvalidMemcpyDirection);
    if (n && (!dst || !src)) return rt(cudaErrorInvalidValue);
    Op op;
    op.kind = Op::Copy;
    op.dst = dst;
    op.src = src;
    op.n = n;
    op.delay_us = g_delay_us.load();
    return sync_op(std::move(op), runtime_device());
}
UXN_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s) {
    RT_ENTER();
    if (!valid_kind(k)) return rt(cudaErrorInvalidMemcpyDirection);
    if (n && (!dst || !src)) return rt(cudaErrorInvalidValue);
    return rt(async_copy(dst, src, n, s, runtime_device(), true));
}
UXN_EXPORT cudaError_t cudaMemcpyPeer(void *dst, int, const void *src, int, size_t n) {
    return cudaMemcpy(dst, src, n, cudaMemcpyDefault);
}
UXN_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int, const void *src, int, size_t n, cudaStream_t s) {
    return cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s);
}
UXN_EXPORT cudaError_t cudaMemset(void *p, int v, size_t n) {
    RT_ENTER();
    if (n && !p) return rt(cudaErrorInvalidValue);
    Op op;
    op.kind = Op::Memset;
    op.dst = p;
    op.value = v;
    op.n = n;
    return sync_op(std::move(op), runtime_device());
}
UXN_EXPORT cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t stream) {
    RT_ENTER();
    if (n && !p) return rt(cudaErrorInvalidValue);
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, runtime_device());
    Op op;
    op.kind = Op::Memset;
    op.dst = p;
    op.value = v;
    op.n = n;
    enqueue(s, std::move(op));
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaDeviceSynchronize(void) {
    RT_ENTER();
    return rt(device_sync(runtime_device()));
}
UXN_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    RT_ENTER();
    if (!s) return rt(cudaErrorInvalidValue);
    int dev = runtime_device();
    std::lock_guard<std::mutex> lk(G().mu);
    *s = reinterpret_cast<cudaStream_t>(new_stream(dev, !(flags & cudaStreamNonBlocking)));
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
UXN_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int) {
    return cudaStreamCreateWithFlags(s, flags);
}
UXN_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) {
    RT_ENTER();
    return rt(stream_destroy(s));
}
UXN_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    RT_ENTER();
    return rt(stream_sync(s, runtime_device()));
}
UXN_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
    RT_ENTER();
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, runtime_device());
    return s->completed >= s->enqueued ? cudaSuccess : cudaErrorNotReady;
}
UXN_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned *flags) {
    RT_ENTER();
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, runtime_device());
    if (flags) *flags = s->blocking ? cudaStreamDefault : cudaStreamNonBlocking;
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaStreamGetDevice(cudaStream_t stream, int *device) {
    RT_ENTER();
    if (!device) return rt(cudaErrorInvalidValue);
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    *device = resolve(stream, runtime_device())->device;
    return cudaSuccess;
}
// Stream capture: the ops enqueued on a capturing stream go into its graph and do not run. A
// query of the legacy stream while a stream of its device captures in global mode is
// cudaErrorStreamCaptureImplicit, as in CUDA; instantiating and launching a graph is not modelled.
UXN_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    RT_ENTER();
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, runtime_device());
    if (s->legacy) return rt(cudaErrorStreamCaptureUnsupported);
    if (s->capturing) return rt(cudaErrorIllegalState);
    s->capturing = true;
    s->capture_mode = mode;
    s->captured.clear();
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    RT_ENTER();
    if (!graph) return rt(cudaErrorInvalidValue);
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, runtime_device());
    if (!s->capturing) return rt(cudaErrorIllegalState);
    s->capturing = false;
    auto *gr = new Graph;
    gr->ops = std::move(s->captured);
    s->captured.clear();
    *graph = reinterpret_cast<cudaGraph_t>(gr);
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status) {
    RT_ENTER();
    if (!status) return rt(cudaErrorInvalidValue);
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    const int dev = runtime_device();
    Stream *s = resolve(stream, dev);
    if (s->legacy)
        for (Stream *o : g.streams[dev])
            if (o->capturing && o->blocking && o->capture_mode == cudaStreamCaptureModeGlobal)
                return rt(cudaErrorStreamCaptureImplicit);
    *status = s->capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    RT_ENTER();
    if (!graph) return rt(cudaErrorInvalidValue);
    delete reinterpret_cast<Graph *>(graph);
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned) {
    RT_ENTER();
    if (!dev || !host) return rt(cudaErrorInvalidValue);
    *dev = host;  // the stand-in's device is the host: one address space
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    RT_ENTER();
    return rt(stream_wait_event(s, reinterpret_cast<Event *>(e), runtime_device()));
}
UXN_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *arg) {
    RT_ENTER();
    if (!fn) return rt(cudaErrorInvalidValue);
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, runtime_device());
    Op op;
    op.kind = Op::HostFn;
    op.fn = fn;
    op.arg = arg;
    enqueue(s, std::move(op));
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    RT_ENTER();
    if (!e) return rt(cudaErrorInvalidValue);
    Event *ev = new Event;
    ev->device = runtime_device();
    *e = reinterpret_cast<cudaEvent_t>(ev);
    return cudaSuccess;
}
UXN_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
UXN_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    RT_ENTER();
    return rt(event_record(reinterpret_cast<Event *>(e), s, runtime_device()));
}
UXN_EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) {
    RT_ENTER();
    return rt(event_query(reinterpret_cast<Event *>(e)));
}
UXN_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    RT_ENTER();
    return rt(event_sync(reinterpret_cast<Event *>(e)));
}
UXN_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
    RT_ENTER();
    if (!e) return rt(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> lk(G().mu);
    reinterpret_cast<Event *>(e)->destroyed = true;  // never freed: a stale handle stays harmless
    return cudaSuccess;
}

// =============================================================== driver API
UXN_EXPORT CUresult cuGetErrorName(CUresult r, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    *s = drv_name(r);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
UXN_EXPORT CUresult cuGetErrorString(CUresult r, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    *s = drv_string(r);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
UXN_EXPORT CUresult cuInit(unsigned) {
    DRV_ENTER();
    g_touched.store(true);
    return g_devices ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}
UXN_EXPORT CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = CUDA_VERSION;
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuDeviceGetCount(int *n) {
    DRV_ENTER();
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    *n = g_devices;
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    DRV_ENTER();
    if (!d || !valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    DRV_ENTER();
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, size_t(len), "upcxx-extra-nvshmem CUDA stand-in %d", d);
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) {
    DRV_ENTER();
    if (!u) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
    std::memset(u->bytes, 0, sizeof u->bytes);
    std::memcpy(u->bytes, "uxnstandin", 10);
    u->bytes[15] = char(d);
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) {
    DRV_ENTER();
    if (!b) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
    *b = size_t(80) << 30;
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    DRV_ENTER();
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
    switch (a) {
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
            *v = 9;
            break;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
            *v = 0;
            break;
        case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
            *v = 1;
            break;
        case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
            *v = d;
            break;
        default:
            *v = 0;
            break;
    }
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    DRV_ENTER();
    g_touched.store(true);
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
    *c = reinterpret_cast<CUcontext>(&G().ctx[d]);
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    DRV_ENTER();
    return valid_device(d) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
UXN_EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
    DRV_ENTER();
    if (c == nullptr) {
        if (!t_ctx.empty()) t_ctx.pop_back();
        return CUDA_SUCCESS;
    }
    set_current(reinterpret_cast<Ctx *>(c));
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuCtxGetCurrent(CUcontext *c) {
    DRV_ENTER();
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    *c = reinterpret_cast<CUcontext>(current_ctx());
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) {
    DRV_ENTER();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    t_ctx.push_back(reinterpret_cast<Ctx *>(c));
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c) {
    DRV_ENTER();
    if (t_ctx.empty()) return CUDA_ERROR_INVALID_CONTEXT;
    if (c) *c = reinterpret_cast<CUcontext>(t_ctx.back());
    t_ctx.pop_back();
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
    DRV_ENTER();
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    Ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *d = c->device;
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuCtxSynchronize(void) {
    DRV_ENTER();
    Ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    return to_drv(device_sync(c->device));
}
static int drv_device() {
    Ctx *c = current_ctx();
    return c ? c->device : -1;
}
UXN_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    DRV_ENTER();
    int dev = drv_device();
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
    void *q = device_alloc(n, dev);
    if (!q) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = reinterpret_cast<CUdeviceptr>(q);
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    DRV_ENTER();
    if (!p) return CUDA_SUCCESS;
    int dev = uxn_standin_device_of(reinterpret_cast<void *>(p));
    if (dev >= 0) device_sync(dev);
    return device_free(reinterpret_cast<void *>(p)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
UXN_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    DRV_ENTER();
    uintptr_t b;
    Range r;
    if (!lookup(reinterpret_cast<void *>(p), &b, &r)) return CUDA_ERROR_NOT_FOUND;
    if (base) *base = CUdeviceptr(b);
    if (size) *size = r.size;
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
    DRV_ENTER();
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t b;
    Range r;
    if (!lookup(reinterpret_cast<void *>(p), &b, &r)) return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
            *static_cast<int *>(data) = r.device;
            break;
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            *static_cast<unsigned *>(data) = CU_MEMORYTYPE_DEVICE;
            break;
        case CU_POINTER_ATTRIBUTE_CONTEXT:
            *static_cast<CUcontext *>(data) = reinterpret_cast<CUcontext>(&G().ctx[r.device]);
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
            *static_cast<CUdeviceptr *>(data) = p;
            break;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER:
            *static_cast<void **>(data) = nullptr;
            break;
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
            *static_cast<CUdeviceptr *>(data) = CUdeviceptr(b);
            break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
            *static_cast<size_t *>(data) = r.size;
            break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
            *static_cast<unsigned *>(data) = 0;
            break;
        default:
            return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_SUCCESS;
}
static CUresult drv_copy_sync(void *dst, const void *src, size_t n) {
    int dev = drv_device();
    if (dev < 0) dev = 0;
    Op op;
    op.kind = Op::Copy;
    op.dst = dst;
    op.src = src;
    op.n = n;
    return to_drv(sync_op(std::move(op), dev));
}
UXN_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    DRV_ENTER();
    return drv_copy_sync(dst, reinterpret_cast<const void *>(src), n);
}
UXN_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    DRV_ENTER();
    return drv_copy_sync(reinterpret_cast<void *>(dst), src, n);
}
UXN_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    DRV_ENTER();
    return drv_copy_sync(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), n);
}
static CUresult drv_copy_async(void *dst, const void *src, size_t n, CUstream s) {
    int dev = drv_device();
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (s && reinterpret_cast<uintptr_t>(s) > 2) dev = reinterpret_cast<Stream *>(s)->device;
    return to_drv(async_copy(dst, src, n, s, dev, true));
}
UXN_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    DRV_ENTER();
    return drv_copy_async(dst, reinterpret_cast<const void *>(src), n, s);
}
UXN_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    DRV_ENTER();
    return drv_copy_async(reinterpret_cast<void *>(dst), src, n, s);
}
UXN_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    DRV_ENTER();
    return drv_copy_async(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), n, s);
}
UXN_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n, CUstream s) {
    DRV_ENTER();
    return drv_copy_async(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), n, s);
}
UXN_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    DRV_ENTER();
    return drv_copy_async(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), n, s);
}
UXN_EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags) {
    DRV_ENTER();
    int dev = drv_device();
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lk(G().mu);
    *s = reinterpret_cast<CUstream>(new_stream(dev, !(flags & CU_STREAM_NON_BLOCKING)));
    return CUDA_SUCCESS;
}
// Whether the code at `ret` (a return address) is upcxx-extra-nvshmem's library.
static bool in_library(void *ret) {
    Dl_info info{};
    return dladdr(ret, &info) != 0 && info.dli_fname && std::strstr(info.dli_fname, "libupcxx_extra_nvshmem");
}
UXN_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
    DRV_ENTER();
    return to_drv(stream_destroy(s, in_library(__builtin_return_address(0))));
}
UXN_EXPORT CUresult cuStreamSynchronize(CUstream s) {
    DRV_ENTER();
    int dev = drv_device();
    return to_drv(stream_sync(s, dev < 0 ? 0 : dev));
}
UXN_EXPORT CUresult cuStreamQuery(CUstream stream) {
    DRV_ENTER();
    if (g_sticky_fault.load()) return CUDA_ERROR_UNKNOWN;
    for (int f = g_faults.load(); f > 0;)
        if (g_faults.compare_exchange_weak(f, f - 1)) return CUDA_ERROR_UNKNOWN;
    int dev = drv_device();
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, dev < 0 ? 0 : dev);
    return s->completed >= s->enqueued ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
UXN_EXPORT CUresult cuStreamGetCtx(CUstream stream, CUcontext *ctx) {
    DRV_ENTER();
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    int dev = drv_device();
    if (stream && reinterpret_cast<uintptr_t>(stream) > 2) dev = reinterpret_cast<Stream *>(stream)->device;
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    *ctx = reinterpret_cast<CUcontext>(&G().ctx[dev]);
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status) {
    DRV_ENTER();
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    const int dev = drv_device() < 0 ? 0 : drv_device();
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, dev);
    if (s->legacy)
        for (Stream *o : g.streams[dev])
            if (o->capturing && o->blocking && o->capture_mode == cudaStreamCaptureModeGlobal)
                return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    *status = s->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuMemHostAlloc(void **p, size_t n, unsigned) {
    DRV_ENTER();
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    *p = std::calloc(1, n ? n : 1);  // never freed: the library keeps it for the process's life
    return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
UXN_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned) {
    DRV_ENTER();
    if (!d || !p) return CUDA_ERROR_INVALID_VALUE;
    *d = reinterpret_cast<CUdeviceptr>(p);  // the stand-in's device is the host: one address space
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuEventCreate(CUevent *e, unsigned) {
    DRV_ENTER();
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    if (drv_device() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    Event *ev = new Event;
    ev->device = drv_device();
    *e = reinterpret_cast<CUevent>(ev);
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
    DRV_ENTER();
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    std::lock_guard<std::mutex> lk(G().mu);
    reinterpret_cast<Event *>(e)->destroyed = true;
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
    DRV_ENTER();
    int dev = drv_device();
    if (s && reinterpret_cast<uintptr_t>(s) > 2) dev = reinterpret_cast<Stream *>(s)->device;
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    return to_drv(event_record(reinterpret_cast<Event *>(e), s, dev));
}
UXN_EXPORT CUresult cuEventQuery(CUevent e) {
    DRV_ENTER();
    return to_drv(event_query(reinterpret_cast<Event *>(e)));
}
UXN_EXPORT CUresult cuEventSynchronize(CUevent e) {
    DRV_ENTER();
    return to_drv(event_sync(reinterpret_cast<Event *>(e)));
}
UXN_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned) {
    DRV_ENTER();
    int dev = drv_device();
    return to_drv(stream_wait_event(s, reinterpret_cast<Event *>(e), dev < 0 ? 0 : dev));
}
// cuStreamWaitValue32 (GEQ only, what the library uses): the stream waits until the word, written
// by a host thread, is at least `value` in wrapping order.
static CUresult stream_wait_value32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned flags) {
    DRV_ENTER();
    const int dev = drv_device();
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (!addr || (addr & 3) || flags != CU_STREAM_WAIT_VALUE_GEQ) return CUDA_ERROR_INVALID_VALUE;
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, dev);
    if (s->destroyed) return CUDA_ERROR_INVALID_HANDLE;
    if (s->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    Op op;
    op.kind = Op::WaitValue;
    op.word = reinterpret_cast<const uint32_t *>(static_cast<uintptr_t>(addr));
    op.wait_value = value;
    enqueue(s, std::move(op));
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned flags) {
    return stream_wait_value32(s, addr, value, flags);
}
// cuStreamWriteValue32: the stream stores `value` into the word (mapped host memory) when it
// reaches the write, after the work queued before it. A copy failure on the stream before it that
// no event or synchronize reported yet becomes a fault the next cuStreamQuery reports.
static CUresult stream_write_value32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned flags) {
    DRV_ENTER();
    const int dev = drv_device();
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (!addr || (addr & 3) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, dev);
    if (s->destroyed) return CUDA_ERROR_INVALID_HANDLE;
    if (s->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!s->legacy && reinterpret_cast<uintptr_t>(stream) > 2 && s->device != dev) return CUDA_ERROR_INVALID_HANDLE;
    Op op;
    op.kind = Op::WriteValue;
    op.word = reinterpret_cast<const uint32_t *>(static_cast<uintptr_t>(addr));
    op.wait_value = value;
    enqueue(s, std::move(op));
    g_stream_writes.fetch_add(1);
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned flags) {
    return stream_write_value32(s, addr, value, flags);
}
// The library's batch kernels (uxn_copy_batch; uxn_copy_batch_signal, which then stores its
// completion word; uxn_copy_one and uxn_copy_one_signal, the same for one copy, whose first
// parameter is one descriptor): a module whose PTX
// defines them loads, any other fails as on a GPU without a binary for it. A launch is one operation on the stream that
// moves every copy of the batch after one copy delay (and then stores the word: a launch whose copies fail faults the
// context instead, and stores nothing). Loading a module waits for the work queued on the device, as a module load (a
// PTX compile, a lazily loaded function) may on a GPU.
struct Module;
struct Function {
    Module *module;
    bool signal;
    bool one;  // its first parameter is one descriptor
};
struct Module {
    int device;
    Function plain{this, false, false}, signal{this, true, false}, one_plain{this, false, true}, one{this, true, true};
    explicit Module(int d) : device(d) {}
};
// The signalling kernel's second parameter (uxn_signal of src/cuda/batch_copy.cu).
struct Signal {
    unsigned *counter;
    unsigned *word;
    unsigned value;
};
const char kBatchKernel[] = "uxn_copy_batch";
const char kSignalKernel[] = "uxn_copy_batch_signal";
const char kOnePlainKernel[] = "uxn_copy_one";
const char kOneKernel[] = "uxn_copy_one_signal";
// The modules loaded and not unloaded: a launch of a function of an unloaded module is refused
// (CUDA_ERROR_INVALID_HANDLE), as a GPU refuses it.
std::mutex g_modules_mu;
std::vector<Module *> g_modules;
// Whether `f` is a function of a module still loaded (compared by address: a function of an
// unloaded module points into freed memory, which is not read).
bool function_loaded(const void *f) {
    std::lock_guard<std::mutex> lk(g_modules_mu);
    for (const Module *m : g_modules)
        if (f == &m->plain || f == &m->signal || f == &m->one_plain || f == &m->one) return true;
    return false;
}
UXN_EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    DRV_ENTER();
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    *m = nullptr;
    Ctx *c = current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    const char *text = static_cast<const char *>(image);
    if (!text || !std::strstr(text, ".entry uxn_copy_batch(") || !std::strstr(text, ".entry uxn_copy_batch_signal(") ||
        !std::strstr(text, ".entry uxn_copy_one(") || !std::strstr(text, ".entry uxn_copy_one_signal("))
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    (void)device_sync(c->device);  // a module load may wait for the device's queued work
    auto *mod = new Module(c->device);
    {
        std::lock_guard<std::mutex> lk(g_modules_mu);
        g_modules.push_back(mod);
    }
    *m = reinterpret_cast<CUmodule>(mod);
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuFuncGetAttribute(int *v, CUfunction_attribute attr, CUfunction f) {
    DRV_ENTER();
    if (!v || !f) return CUDA_ERROR_INVALID_VALUE;
    if (attr != CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) return CUDA_ERROR_NOT_SUPPORTED;
    *v = 1024;
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    DRV_ENTER();
    if (!f || !m || !name) return CUDA_ERROR_INVALID_VALUE;
    auto *mod = reinterpret_cast<Module *>(m);
    if (std::strcmp(name, kBatchKernel) == 0)
        *f = reinterpret_cast<CUfunction>(&mod->plain);
    else if (std::strcmp(name, kSignalKernel) == 0)
        *f = reinterpret_cast<CUfunction>(&mod->signal);
    else if (std::strcmp(name, kOnePlainKernel) == 0)
        *f = reinterpret_cast<CUfunction>(&mod->one_plain);
    else if (std::strcmp(name, kOneKernel) == 0)
        *f = reinterpret_cast<CUfunction>(&mod->one);
    else
        return CUDA_ERROR_NOT_FOUND;
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shared, CUstream stream, void **params, void **extra) {
    DRV_ENTER();
    if (!f || !params || !params[0] || extra) return CUDA_ERROR_INVALID_VALUE;
    if (gx == 0 || gy == 0 || gy > kBatchMax || gz != 1 || bx == 0 || bx > 1024 || by != 1 || bz != 1 || shared)
        return CUDA_ERROR_INVALID_VALUE;
    if (!function_loaded(f)) return CUDA_ERROR_INVALID_HANDLE;  // its module was unloaded
    const Function *fn = reinterpret_cast<Function *>(f);
    const int dev = fn->module->device;
    if ((fn->signal && !params[1]) || (fn->one && gy != 1)) return CUDA_ERROR_INVALID_VALUE;
    Ctx *c = current_ctx();
    if (!c || c->device != dev) return CUDA_ERROR_INVALID_CONTEXT;
    for (int n = g_fail_launches.load(); n > 0;)
        if (g_fail_launches.compare_exchange_weak(n, n - 1)) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    const auto *descs = static_cast<const BatchDesc *>(params[0]);
    Op op;
    op.kind = Op::Batch;
    op.batch.assign(descs, descs + gy);
    for (const BatchDesc &d : op.batch)
        if (d.n && (uxn_standin_device_of(d.src) < 0 || uxn_standin_device_of(d.dst) < 0))
            return CUDA_ERROR_INVALID_VALUE;  // a kernel reaches device memory only (models the fault)
    if (fn->signal) {
        const Signal sig = *static_cast<const Signal *>(params[1]);
        // The counter is device memory, the word memory mapped for the device (the kernel faults
        // on anything else).
        if (!sig.counter || uxn_standin_device_of(sig.counter) < 0 || !sig.word ||
            (reinterpret_cast<uintptr_t>(sig.word) & 3))
            return CUDA_ERROR_INVALID_VALUE;
        op.word = sig.word;
        op.wait_value = sig.value;
    }
    op.delay_us = g_delay_us.load();
    op.fail = take_injected_failure();
    Global &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    Stream *s = resolve(stream, dev);
    if (s->destroyed) return CUDA_ERROR_INVALID_HANDLE;
    if (fn->signal) g_stream_writes.fetch_add(1);
    g_batch_launches.fetch_add(1);
    g_batched_copies.fetch_add(static_cast<long>(gy));
    enqueue(s, std::move(op));
    return CUDA_SUCCESS;
}
UXN_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *, size_t *, CUmodule, const char *) {
    DRV_ENTER();
    return CUDA_ERROR_INVALID_HANDLE;
}
UXN_EXPORT CUresult cuModuleUnload(CUmodule m) {
    DRV_ENTER();
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    auto *mod = reinterpret_cast<Module *>(m);
    {
        std::lock_guard<std::mutex> lk(g_modules_mu);
        auto it = std::find(g_modules.begin(), g_modules.end(), mod);
        if (it == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
        g_modules.erase(it);
    }
    delete mod;
    return CUDA_SUCCESS;
}
