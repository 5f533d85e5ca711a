// upcxx-extra-nvshmem: the fast copy engine of nvshmem_heap::copy. Part of
// <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
//
// A fast copy moves bytes between two addresses this process reaches (NVSHMEM's peer mapping, or
// this rank's own device memory) on a private non-blocking stream of the heap's device: a small
// copy with heap memory at both ends joins the batch, which one kernel launch moves
// (upcxx_extra_nvshmem_copy_batch) at the next progress of any persona that has a copy to
// complete, when it holds UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX copies, or before anything else is
// put on the stream; any other fast copy is one cudaMemcpyAsync. Nothing waits in the call: the
// copy gets the next sequence number of the stream (a batched copy takes its place in the batch,
// which runs in that place), and one LPC, queued on the persona that issued it, completes it at
// that persona's user-level progress once it landed. The stream runs copies in issue order, so one CUDA event (a mark)
// tells that every copy up to a sequence number landed: a copy issued while no mark is pending
// gets one of its own (a lone copy completes as soon as it lands), and a completion LPC that
// finds its copy uncovered records one after every copy issued so far, which the others share. A
// flood of copies costs one cudaMemcpyAsync (batched: one kernel launch per
// UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX copies) and one LPC each, and a few events in all.
//
// Each completion LPC owns its copy and holds nothing of any other persona: a persona (or the
// thread whose default persona it was) that goes away with copies in flight takes only their
// completions with it, as it does upcxx::copy's own. The engine it shares with them keeps no CUDA
// object once closed: close() and drain() (destroy(), or a heap that goes out of scope) wait for
// every copy issued and release the stream and the events.
//
// A copy with a remote completion (remote_cx::as_rpc) is polled at its initiator's internal-level
// progress instead, as UPC++ runs its own copy's: once the bytes landed its remote completion is
// sent there (upcxx::discharge(), which makes internal-level progress only, waits for it), and its
// operation and source completions go on to the persona's user-level progress.
//
// A copy covered by a mark that reports a CUDA error is redone through upcxx::copy
// (flight::finish), so a completion always means the bytes landed; the error is kept for
// check_copies(). Once the engine is closed a failed copy is reported, not redone, and drain()
// says how many were.
#ifndef UPCXX_EXTRA_NVSHMEM_COPY_ENGINE_HPP
#define UPCXX_EXTRA_NVSHMEM_COPY_ENGINE_HPP

#include <upcxx/upcxx.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <pthread.h>  // pthread_atfork: a forked child must not use the parent's CUDA objects

#include <cuda_runtime_api.h>  // UPC++ built with CUDA links cudart

#include "upcxx_extra/nvshmem/error.hpp"
#include "upcxx_extra/nvshmem/policy.hpp"  // copy_policy: the knobs
#include "upcxx_extra_nvshmem.h"

namespace upcxx {
namespace extra {
namespace detail {

/// Queues `fn` on persona `p`'s internal-level progress (where UPC++ runs its own copies'
/// completion work; upcxx::discharge() makes no other progress). Defined with the UPC++ internal
/// it uses, in upcxx_internals.hpp (user level where UPC++ has no such queue).
template <class Fn>
void queue_internal(upcxx::persona &p, Fn &&fn);

#if defined(UPCXX_EXTRA_NVSHMEM_TEST_HOOKS)
/// Test hooks, compiled in only with -DUPCXX_EXTRA_NVSHMEM_TEST_HOOKS: a stand-in for a real
/// asynchronous CUDA failure of a copy, which cannot be provoked on a GPU without breaking the
/// context.
struct test_hooks {
    static std::atomic<int> &failing() {
        static std::atomic<int> n{0};
        return n;
    }
    /// The next `n` fast copies are not issued, and report cudaErrorUnknown when they land.
    static void fail_fast_copies(int n) { failing().store(n); }
    static bool take_failure() {
        int n = failing().load();
        while (n > 0)
            if (failing().compare_exchange_weak(n, n - 1)) return true;
        return false;
    }
};
#endif

/// How many fork() children deep this process is (0 in the process that started; a child's
/// count is its parent's plus one), counted by a pthread_atfork handler registered by
/// watch_forks() (the heap's constructor). One relaxed load per check.
inline std::atomic<unsigned> &fork_generation_counter() noexcept {
    static std::atomic<unsigned> generation{0};
    return generation;
}
inline unsigned watch_forks() noexcept {
    static const int registered =
        ::pthread_atfork(nullptr, nullptr, [] { fork_generation_counter().fetch_add(1, std::memory_order_relaxed); });
    (void)registered;
    return fork_generation_counter().load(std::memory_order_relaxed);
}

/// Owns one CUDA handle (a stream, an event): it is destroyed with its owner, never in a fork()
/// child of the process that made it (the parent's CUDA objects are not the child's). Moves
/// transfer it; no copies.
template <class H, cudaError_t (*Destroy)(H)>
class cuda_owned {
public:
    cuda_owned() noexcept = default;
    cuda_owned(cuda_owned &&o) noexcept : h_(o.h_) { o.h_ = nullptr; }
    cuda_owned &operator=(cuda_owned &&o) noexcept {
        if (this != &o) {
            reset();
            h_ = o.h_;
            o.h_ = nullptr;
        }
        return *this;
    }
    cuda_owned(const cuda_owned &) = delete;
    cuda_owned &operator=(const cuda_owned &) = delete;
    ~cuda_owned() { reset(); }

    H get() const noexcept { return h_; }
    explicit operator bool() const noexcept { return h_ != nullptr; }
    /// Takes ownership of `h` (made in this process).
    static cuda_owned adopt(H h) noexcept {
        cuda_owned o;
        o.h_ = h;
        return o;
    }
    /// Gives the handle up without destroying it.
    H release() noexcept { return std::exchange(h_, nullptr); }
    /// Where CUDA's create call writes a new handle (the old one released first).
    H *out() noexcept {
        reset();
        return &h_;
    }
    void reset() noexcept {
        if (h_ && fork_generation_counter().load(std::memory_order_relaxed) == generation_) (void)Destroy(h_);
        h_ = nullptr;
    }

private:
    H h_ = nullptr;
    unsigned generation_ = fork_generation_counter().load(std::memory_order_relaxed);
};
using cuda_event = cuda_owned<cudaEvent_t, &cudaEventDestroy>;
using cuda_stream = cuda_owned<cudaStream_t, &cudaStreamDestroy>;

/// The error of every heap call that needs the heap's UPC++ or CUDA objects, in a fork() child of
/// the process that made the heap.
inline nvshmem_error forked_error(const char *fn) {
    return nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                         std::string(fn) +
                             ": this process is a fork() child of the one that made the heap; neither CUDA nor "
                             "UPC++ survive fork(), so nothing was done (copy in the parent, or exec() a program "
                             "that initialises UPC++ and NVSHMEM itself; destroy() here only forgets the child's "
                             "copy of the heap)",
                         nvshmem_errc::forked);
}

/// Makes `device` current on this thread while it lives, then restores the previous device.
class device_scope {
public:
    explicit device_scope(int device) noexcept {
        if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != device) changed_ = cudaSetDevice(device) == cudaSuccess;
    }
    ~device_scope() {
        if (changed_) cudaSetDevice(prev_);
    }
    device_scope(const device_scope &) = delete;
    device_scope &operator=(const device_scope &) = delete;

private:
    int prev_ = -1;
    bool changed_ = false;
};

/// The CUDA stream a copy is ordered after, or none. Every cudaStream_t value is a stream here:
/// 0 (the legacy default stream, where a plain kernel<<<g, b>>> runs), cudaStreamLegacy,
/// cudaStreamPerThread and created streams alike. The first three are the calling thread's
/// current device's.
struct stream_order {
    bool set = false;  // the copy is ordered after the work queued on `stream` before the call
    cudaStream_t stream = nullptr;
    bool on = false;  // copy_on_stream: and the work queued on `stream` after the call waits for it
    static stream_order none() noexcept { return stream_order{}; }
    static stream_order after(cudaStream_t s) noexcept { return stream_order{true, s, false}; }
    static stream_order on_stream(cudaStream_t s) noexcept { return stream_order{true, s, true}; }
};

/// The CUDA device a stream belongs to: the calling thread's current device for 0,
/// cudaStreamLegacy and cudaStreamPerThread; for a created stream its own (cudaStreamGetDevice,
/// CUDA 12.8 and later), -1 where it cannot be told.
inline int stream_device(cudaStream_t s) noexcept {
    int d = -1;
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) {
        if (cudaGetDevice(&d) != cudaSuccess) d = -1;
        return d;
    }
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12080
    if (cudaStreamGetDevice(s, &d) != cudaSuccess) {
        (void)cudaGetLastError();
        d = -1;
    }
#endif
    return d;
}

/// Throws nvshmem_error (errc stream_capture) when `s` is being captured into a CUDA graph, or
/// when CUDA cannot say (the legacy stream during another stream's global-mode capture): the
/// stream operations complete through UPC++ progress on events of work that a graph only runs
/// when it is launched.
inline void refuse_capture(cudaStream_t s, const char *fn) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    const cudaError_t e = cudaStreamIsCapturing(s, &st);
    if (e == cudaSuccess && st == cudaStreamCaptureStatusNone) return;
    if (e != cudaSuccess) (void)cudaGetLastError();
    throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                        std::string(fn) + ": the stream is being captured into a CUDA graph (" +
                            (e != cudaSuccess ? std::string(cudaGetErrorString(e))
                                              : std::string(st == cudaStreamCaptureStatusActive
                                                                ? "cudaStreamCaptureStatusActive"
                                                                : "cudaStreamCaptureStatusInvalidated")) +
                            "); its completion would follow work that runs only when the graph is launched: "
                            "call it outside the capture (on the stream the graph is launched on, after "
                            "cudaGraphLaunch)",
                        nvshmem_errc::stream_capture);
}

/// One fast copy in flight. finish() runs on the initiator persona, once, and owns the flight.
struct flight {
    virtual ~flight() = default;
    /// The copy landed (`e` cudaSuccess) or CUDA reported `e`.
    /// `redo`: the count of the heap's upcxx::copy calls, raised for this copy's redo when CUDA
    /// failed it and the engine is still open; null when a failure can only be reported.
    virtual void finish(std::unique_ptr<flight> self, cudaError_t e, std::shared_ptr<std::atomic<long>> redo) = 0;

    // What the error message names, formatted only when the copy fails.
    std::size_t bytes = 0;
    int rank_s = -1, rank_d = -1;
    // Set by the engine.
    std::uint64_t seq = 0;          // its place on the stream: 1, 2, ... (0: not issued)
    bool injected_failure = false;  // test hook: not issued, fails when it completes
    std::uint64_t asked = 0;        // the engine's query count when this copy last looked
    // Set by the copy path: the copy owes a remote completion, so it is polled at the initiator's
    // internal-level progress (upcxx::discharge() makes no other).
    bool internal = false;
    // Set by the engine: finish() runs in internal-level progress (only a landed copy's remote
    // completion may be sent there; the rest goes on to user level).
    bool in_internal = false;
    // Set by the engine for work on a caller's stream (copy_on_stream on the heap's device, and
    // after()): the event recorded after it there, polled instead of the heap stream's marks;
    // `settled` once its outcome `result` is known. `issued`: on the GPU (or settled).
    cudaEvent_t ev = nullptr;
    bool settled = false;
    cudaError_t result = cudaSuccess;
    bool issued = false;
    // after(): a wait for a stream, not a copy (an error is reported, never redone).
    bool is_wait = false;
};

class copy_engine : public std::enable_shared_from_this<copy_engine> {
public:
    struct counts_t {
        std::size_t fast = 0;      // moved by CUDA through NVSHMEM's P2P mapping (batched or not)
        std::size_t fallback = 0;  // upcxx::copy of a copy with an end that may be heap memory
        std::size_t batched = 0;   // of `fast`, those a batch's kernel launch moved
    };

    copy_engine(int device, const copy_policy &policy)
        : device_(device), force_fallback_(policy.upcxx_only), batch_bytes_(policy.batch_bytes) {}
    ~copy_engine() { (void)drain(); }
    copy_engine(const copy_engine &) = delete;
    copy_engine &operator=(const copy_engine &) = delete;

    bool force_fallback() const noexcept { return force_fallback_; }
    /// The largest copy batched from the next copy on (0: none; 0 also once a batch launch failed,
    /// which turns batching off for this engine).
    std::size_t batch_bytes() const noexcept {
        return batching_.load(std::memory_order_relaxed) ? batch_bytes_.load(std::memory_order_relaxed) : 0;
    }
    void set_batch_bytes(std::size_t n) noexcept { batch_bytes_.store(n, std::memory_order_relaxed); }
    void count_fallback() noexcept { fallback_.fetch_add(1, std::memory_order_relaxed); }
    /// How many upcxx::copy calls the heap made (fallbacks with a heap end, and redone fast
    /// copies) have not completed: raised when one is issued, lowered by an LPC on the master
    /// persona that its operation completion queues (copy.hpp). Shared with those LPCs.
    const std::shared_ptr<std::atomic<long>> &fallbacks_in_flight() const noexcept { return fallbacks_in_flight_; }
    counts_t counts() const noexcept { return counts_t{fast_.load(), fallback_.load(), batched_.load()}; }

    /// Whether this process is a fork() child of the one that made the engine.
    bool forked() const noexcept { return fork_generation_counter().load(std::memory_order_relaxed) != generation_; }

    /// Issues the copy to <- from of `f->bytes`, ordered after the work queued on `order` so far
    /// when it is set, and completes it on the calling persona at its progress (finish() runs
    /// there once the bytes landed). `device_ends`: both ends are device memory (heap memory),
    /// which a batch's kernel can move. Takes `f` on every path. Throws nvshmem_error (errc cuda,
    /// forked, or heap_inactive once closed; nothing copied, nothing will be notified) when the
    /// copy cannot be issued; once CUDA has accepted the copy nothing can fail.
    void start(std::unique_ptr<flight> f, void *to, const void *from, stream_order order, bool device_ends) {
        if (forked()) throw forked_error("nvshmem_heap::copy");
        flight *raw = f.get();
        // Queued before the copy is issued: a completion that cannot be queued copies nothing.
        // It cannot run before this returns (only this persona's progress runs it).
        poll{shared_from_this(), raw}.queue();
        (void)f.release();  // the poll owns it: a flight that is not issued is dropped there
        if (order.on)
            issue_on_stream(*raw, to, from, order.stream);
        else
            issue(*raw, to, from, order, device_ends);
        fast_.fetch_add(1, std::memory_order_relaxed);
    }

    /// after(): completes `f` (a wait, no copy) on the calling persona at its user-level progress
    /// once the work queued on `s` before the call has completed (an event recorded on `s` in
    /// the calling thread's device context, else in `s`'s own). Throws nvshmem_error (errc
    /// stream_capture, cuda, forked, heap_inactive; nothing will be notified) when it cannot.
    void start_after(std::unique_ptr<flight> f, cudaStream_t s) {
        if (forked()) throw forked_error("nvshmem_heap::after");
        if (closed_.load())
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET,
                                "nvshmem_heap::after: the heap is being destroyed", nvshmem_errc::heap_inactive);
        refuse_capture(s, "nvshmem_heap::after");
        f->is_wait = true;
        flight *raw = f.get();
        poll{shared_from_this(), raw}.queue();
        (void)f.release();
        raw->ev = record_on(s, "nvshmem_heap::after");  // throws: the poll drops the flight (not issued)
        raw->issued = true;
    }

    /// The work queued on `s` after the call waits, on the GPU, until `*this`'s ticket `t`
    /// (stream_ticket) is done; where CUDA cannot enqueue that wait, the host makes progress
    /// until it is (false: it did not come within destroy_wait_seconds).
    bool stream_waits_for(cudaStream_t s, std::uint32_t t, int device) {
        const cudaError_t e = ensure_flag();
        if (e == cudaSuccess &&
            upcxx_extra_nvshmem_stream_wait_value32(device, s, flag_dev_, t) == UPCXX_EXTRA_NVSHMEM_STATUS_OK)
            return true;
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!ticket_done_by(t) && std::chrono::steady_clock::now() < until) upcxx::progress();
        return ticket_done_by(t);
    }
    /// A ticket for one upcxx::copy that a stream will wait for (copy_on_stream off the fast
    /// path); ticket_done(t) when its operation completed.
    std::uint32_t stream_ticket() {
        std::lock_guard<std::mutex> lock(mu_);
        return ++tickets_issued_;
    }
    /// Ticket `t` is done: the flag the waiting streams read advances over every ticket done in
    /// issue order (a later ticket done first waits for the earlier ones).
    void ticket_done(std::uint32_t t) {
        std::lock_guard<std::mutex> lock(mu_);
        tickets_out_of_order_.push_back(t);
        for (bool moved = true; moved;) {
            moved = false;
            for (std::size_t i = 0; i < tickets_out_of_order_.size(); i++)
                if (tickets_out_of_order_[i] == tickets_done_ + 1) {
                    tickets_done_++;
                    tickets_out_of_order_[i] = tickets_out_of_order_.back();
                    tickets_out_of_order_.pop_back();
                    moved = true;
                }
        }
        if (flag_host_) __atomic_store_n(flag_host_, tickets_done_, __ATOMIC_RELEASE);
    }
    /// Whether a copy_on_stream's upcxx::copy has not completed yet (a stream may be waiting for it).
    bool tickets_pending() {
        std::lock_guard<std::mutex> lock(mu_);
        return tickets_done_ != tickets_issued_;
    }
    bool ticket_done_by(std::uint32_t t) {
        std::lock_guard<std::mutex> lock(mu_);
        return static_cast<std::int32_t>(tickets_done_ - t) >= 0;
    }
    int device() const noexcept { return device_; }

    /// Whether a failed copy may still be redone through upcxx::copy (false once closed).
    bool open() const noexcept { return !closed_.load(); }

    /// No copy is issued or redone from here on (destroy(), before it waits for the upcxx::copy
    /// calls); reopen() undoes it when destroy() gives up.
    void close() {
        std::lock_guard<std::mutex> lock(mu_);
        closed_.store(true);
    }
    void reopen() {
        std::lock_guard<std::mutex> lock(mu_);
        if (!released_) closed_.store(false);
    }

    /// Closes the engine, waits until every fast copy issued so far has landed and releases the
    /// stream and the events. Each copy's completion then runs at its initiator persona's next
    /// user-level progress, if it comes. Returns what went wrong ("" when nothing): the wait
    /// failed, or copies failed that will be reported, not redone.
    std::string drain() {
        // A fork() child: the parent's stream and events are not this process's, and another
        // parent thread may have held the lock when it forked.
        if (forked()) return closed_.store(true), std::string();
        std::lock_guard<std::mutex> lock(mu_);
        closed_.store(true);
        if (released_) return std::string();
        released_ = true;
        wait_on_stream_copies();
        if (!stream_) return std::string();
        device_scope on(device_);
        settle_by_marks();
        events_.clear();  // their owners destroy them, then the stream's
        stream_.reset();
        std::size_t unredone = 0;
        for (const failure &f : failures_) unredone += static_cast<std::size_t>(f.last - f.first + 1 - f.redone);
        std::string why;
        if (unredone > 0)
            why = "nvshmem_heap: " + std::to_string(unredone) +
                  " fast copy(ies) failed after they were issued and could not be redone (their initiator persona "
                  "made no progress before destroy()); their completions do not mean the bytes landed";
        return why;
    }

    /// The first fast copy that failed after it was issued since the last call ("" when none).
    std::string take_error() {
        std::lock_guard<std::mutex> lock(mu_);
        std::string e;
        e.swap(error_);
        return e;
    }

private:
    // Marks: every copy up to `through` landed once `event` completed.
    struct mark {
        cuda_event event;
        std::uint64_t through;
    };
    // Copies first..last (landed) that CUDA reported `error` for; `redone` of them were redone.
    struct failure {
        std::uint64_t first, last;
        cudaError_t error;
        std::uint64_t redone;
    };

    // The copy joins the batch (small, device memory at both ends, not ordered after a stream),
    // or is one cudaMemcpyAsync on the stream after the batch; numbered in stream order either
    // way. `order` is waited for in the calling thread's device context (0, cudaStreamLegacy and
    // cudaStreamPerThread are its current device's). Throws (nothing copied) when CUDA refuses
    // the copy.
    void issue(flight &f, void *to, const void *from, stream_order order, bool device_ends) {
        std::lock_guard<std::mutex> lock(mu_);
        if (closed_.load())
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET,
                                "nvshmem_heap::copy: the heap is being destroyed", nvshmem_errc::heap_inactive);
        cudaError_t e = cudaSuccess;
        if (!stream_) {
            device_scope on(device_);
            e = cudaStreamCreateWithFlags(stream_.out(), cudaStreamNonBlocking);
            if (e != cudaSuccess) *stream_.out() = nullptr;
        }
#if defined(UPCXX_EXTRA_NVSHMEM_TEST_HOOKS)
        f.injected_failure = test_hooks::take_failure();
#endif
        if (e == cudaSuccess && device_ends && !order.set && f.bytes <= batch_bytes()) {
            f.seq = ++issued_;
            f.issued = true;
            if (f.injected_failure)
                injected_.push_back(f.seq);
            else {
                batch_.push_back(upcxx_extra_nvshmem_copy_desc_t{from, to, f.bytes});
                batch_seq_.push_back(f.seq);
            }
            if (batch_.size() == UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX) flush();
            return;  // the mark comes with the batch, at the first completion that asks
        }
        if (e == cudaSuccess) flush();
        if (e == cudaSuccess && order.set) e = order_after(order.stream);
        if (e == cudaSuccess && !f.injected_failure) {
            device_scope on(device_);
            e = cudaMemcpyAsync(to, from, f.bytes, cudaMemcpyDefault, stream_.get());
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR,
                                "nvshmem_heap::copy: issuing the " + describe(f) + " failed: " + cudaGetErrorString(e),
                                nvshmem_errc::cuda);
        }
        f.seq = ++issued_;
        f.issued = true;
        if (f.injected_failure) injected_.push_back(f.seq);
        if (marks_.empty()) record_mark();  // the first copy since the last mark: one of its own
    }

    // copy_on_stream's fast copy: on `s` itself when `s` is a stream of the heap's device (then an
    // event after it there tells its completion); otherwise on the heap's stream after the work
    // queued on `s` (issue), and `s` waits for an event recorded after it. Either way the work
    // queued on `s` after the call runs after the copy. Throws (nothing copied) when CUDA
    // refuses the copy.
    void issue_on_stream(flight &f, void *to, const void *from, cudaStream_t s) {
        if (stream_device(s) != device_) {
            issue(f, to, from, stream_order::after(s), false);
            std::lock_guard<std::mutex> lock(mu_);
            if (follow_heap_stream(s) != cudaSuccess) {  // the host waits for the copy instead
                device_scope on(device_);
                settle_by_marks();
            }
            return;
        }
        std::lock_guard<std::mutex> lock(mu_);
        if (closed_.load())
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET,
                                "nvshmem_heap::copy_on_stream: the heap is being destroyed",
                                nvshmem_errc::heap_inactive);
        device_scope on(device_);
#if defined(UPCXX_EXTRA_NVSHMEM_TEST_HOOKS)
        f.injected_failure = test_hooks::take_failure();
#endif
        cudaError_t e = f.injected_failure ? cudaSuccess : cudaMemcpyAsync(to, from, f.bytes, cudaMemcpyDefault, s);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            throw nvshmem_error(
                UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR,
                "nvshmem_heap::copy_on_stream: issuing the " + describe(f) + " failed: " + cudaGetErrorString(e),
                nvshmem_errc::cuda);
        }
        f.issued = true;
        if (f.injected_failure) {
            f.settled = true;
            f.result = cudaErrorUnknown;
            return;
        }
        cuda_event ev = pooled_event();
        e = ev ? cudaEventRecord(ev.get(), s) : cudaErrorMemoryAllocation;
        if (e != cudaSuccess) {        // issued, but nothing can tell when it lands: the host waits
            (void)cudaGetLastError();  // `ev`'s state is unknown: destroyed here, not back to the pool
            ev.reset();
            f.settled = true;
            f.result = cudaStreamSynchronize(s);
            if (f.result != cudaSuccess) (void)cudaGetLastError();
            return;
        }
        f.ev = ev.release();
        on_stream_.push_back(f.ev);
    }

    // Under mu_: `s` waits, on the GPU, for everything issued on the heap's stream so far (an
    // event recorded there, waited for by `s` in the calling thread's device context).
    cudaError_t follow_heap_stream(cudaStream_t s) {
        cuda_event ev;
        {
            device_scope on(device_);
            flush();
            cudaError_t e = cudaEventCreateWithFlags(ev.out(), cudaEventDisableTiming);
            if (e == cudaSuccess) e = cudaEventRecord(ev.get(), stream_.get());
            if (e != cudaSuccess) return (void)cudaGetLastError(), e;
        }
        const cudaError_t e = cudaStreamWaitEvent(s, ev.get(), 0);
        if (e != cudaSuccess) (void)cudaGetLastError();
        return e;  // `ev` destroyed: CUDA releases it once the wait is satisfied
    }

    // Under mu_: an event of the heap's device, from the pool or new (empty when CUDA cannot make
    // one).
    cuda_event pooled_event() {
        cuda_event ev;
        if (!events_.empty()) {
            ev = std::move(events_.back());
            events_.pop_back();
            return ev;
        }
        if (cudaEventCreateWithFlags(ev.out(), cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            ev.reset();
        }
        return ev;
    }

    // after(): an event recorded on `s` after the work queued there: in the calling thread's
    // device context (where 0, cudaStreamLegacy and cudaStreamPerThread are its current
    // device's), else in the context of the device `s` belongs to. Throws when neither works.
    cudaEvent_t record_on(cudaStream_t s, const char *fn) {
        cuda_event ev;
        cudaError_t e = cudaEventCreateWithFlags(ev.out(), cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventRecord(ev.get(), s);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            const int d = stream_device(s);
            int n = 0;
            if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
            for (int dev = d >= 0 ? d : 0; dev < n && e != cudaSuccess; dev = d >= 0 ? n : dev + 1) {
                device_scope on(dev);
                ev.reset();
                e = cudaEventCreateWithFlags(ev.out(), cudaEventDisableTiming);
                if (e == cudaSuccess) e = cudaEventRecord(ev.get(), s);
                if (e != cudaSuccess) (void)cudaGetLastError();
            }
        }
        if (e != cudaSuccess)
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR,
                                std::string(fn) + ": recording an event on the stream failed: " + cudaGetErrorString(e),
                                nvshmem_errc::cuda);
        return ev.release();  // the flight's: destroyed when its outcome is known (event_outcome)
    }

    // How the work `f` waits for on a caller's stream ended (its event), or cudaErrorNotReady.
    cudaError_t event_outcome(flight &f) {
        if (f.settled) return f.result;
        cudaError_t e = cudaEventQuery(f.ev);
        if (e == cudaErrorNotReady) return e;
        if (e != cudaSuccess) (void)cudaGetLastError();
        std::lock_guard<std::mutex> lock(mu_);
        f.settled = true;
        f.result = e;
        forget_event(f);
        return e;
    }
    // Under mu_: `f`'s event is no longer needed: a copy's back to the pool (the heap's device),
    // an after()'s destroyed.
    void forget_event(flight &f) {
        if (!f.ev) return;
        for (std::size_t i = 0; i < on_stream_.size(); i++)
            if (on_stream_[i] == f.ev) {
                on_stream_[i] = on_stream_.back();
                on_stream_.pop_back();
                break;
            }
        cuda_event ev = cuda_event::adopt(f.ev);
        f.ev = nullptr;
        if (!f.is_wait && !released_) events_.push_back(std::move(ev));
    }
    // Under mu_: the host waits for every fast copy issued on a caller's stream (copy_on_stream
    // on the heap's device); their completions learn it from their events.
    void wait_on_stream_copies() {
        for (cudaEvent_t e : on_stream_)
            if (cudaEventSynchronize(e) != cudaSuccess) (void)cudaGetLastError();
    }
    // Under mu_ (or from stream_waits_for): the word streams wait on for tickets, in host memory
    // mapped for the GPU; made once per engine and kept for the process's life (a stream may
    // still be about to read it when the heap goes).
    cudaError_t ensure_flag_locked() {
        if (flag_host_) return cudaSuccess;
        void *p = nullptr, *d = nullptr;
        cudaError_t e = cudaHostAlloc(&p, 64, cudaHostAllocMapped | cudaHostAllocPortable);
        if (e == cudaSuccess) e = cudaHostGetDevicePointer(&d, p, 0);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return e;
        }
        flag_host_ = static_cast<std::uint32_t *>(p);
        __atomic_store_n(flag_host_, tickets_done_, __ATOMIC_RELEASE);
        flag_dev_ = d;
        return cudaSuccess;
    }
    cudaError_t ensure_flag() {
        std::lock_guard<std::mutex> lock(mu_);
        return ensure_flag_locked();
    }

    // Under mu_: how copy `seq` ended (cudaSuccess, a CUDA error), or cudaErrorNotReady. Retires
    // the marks that completed; when none covers `seq`, records one after every copy issued.
    cudaError_t outcome_of(std::uint64_t seq) {
        while (seq > landed_ && !marks_.empty()) {
            const cudaError_t e = cudaEventQuery(marks_.front().event.get());
            if (e == cudaErrorNotReady) break;
            if (e != cudaSuccess) (void)cudaGetLastError();
            settle_through(marks_.front().through, e);
            events_.push_back(std::move(marks_.front().event));
            marks_.pop_front();
        }
        if (seq <= landed_) return failed_in(seq);
        if (marks_.empty() || marks_.back().through < seq) record_mark();
        return seq <= landed_ ? failed_in(seq) : cudaErrorNotReady;
    }

    // Under mu_: puts the batch on the stream: one kernel launch, or one cudaMemcpyAsync per copy
    // when the kernel cannot be launched (batching is then off for this engine, and the reason
    // kept for check_copies()). A copy CUDA refuses even then, and those after it, are over with
    // that error (redone through upcxx::copy by their completions), after the host waited for
    // the copies before them.
    void flush() {
        if (batch_.empty()) return;
        device_scope on(device_);
        const std::size_t n = batch_.size();
        if (upcxx_extra_nvshmem_copy_batch(device_, stream_.get(), batch_.data(), n) == UPCXX_EXTRA_NVSHMEM_STATUS_OK) {
            batched_.fetch_add(n, std::memory_order_relaxed);
            batch_.clear();
            batch_seq_.clear();
            return;
        }
        batching_.store(false, std::memory_order_relaxed);
        if (error_.empty())
            error_ =
                std::string("nvshmem_heap::copy: batching is off for this heap, its kernel could not be launched (") +
                upcxx_extra_nvshmem_last_error() + "); copies are one cudaMemcpyAsync each";
        for (std::size_t i = 0; i < n; ++i) {
            const upcxx_extra_nvshmem_copy_desc_t &d = batch_[i];
            const cudaError_t e = cudaMemcpyAsync(d.dst, d.src, d.bytes, cudaMemcpyDefault, stream_.get());
            if (e == cudaSuccess) continue;
            (void)cudaGetLastError();
            // Every copy before this one is over once the stream is; this one and every later
            // one (the batch holds the newest copies) failed with `e`.
            const cudaError_t w = cudaStreamSynchronize(stream_.get());
            retire_marks();
            settle_through(batch_seq_[i] - 1, w);
            failures_.push_back(failure{batch_seq_[i], issued_, e, 0});
            settle_through(issued_, cudaSuccess);
            break;
        }
        batch_.clear();
        batch_seq_.clear();
    }

    // Under mu_: an event after every copy issued so far. When CUDA cannot make or record one,
    // the host waits for the stream instead (the copies are issued: they complete regardless).
    void record_mark() {
        device_scope on(device_);
        flush();
        cuda_event ev = pooled_event();
        const cudaError_t e = ev ? cudaEventRecord(ev.get(), stream_.get()) : cudaErrorMemoryAllocation;
        if (e == cudaSuccess) {
            marks_.push_back(mark{std::move(ev), issued_});
            return;
        }
        (void)cudaGetLastError();  // `ev`'s state is unknown: destroyed here, not back to the pool
        ev.reset();
        settle_all(cudaStreamSynchronize(stream_.get()));
    }

    // Under mu_: every copy up to `through` is over, with `e` for those not over before (and
    // cudaErrorUnknown for the test hook's failures among them).
    void settle_through(std::uint64_t through, cudaError_t e) {
        if (through <= landed_) return;
        if (e != cudaSuccess) failures_.push_back(failure{landed_ + 1, through, e, 0});
        for (std::size_t i = 0; i < injected_.size();)
            if (injected_[i] <= through) {
                if (e == cudaSuccess) failures_.push_back(failure{injected_[i], injected_[i], cudaErrorUnknown, 0});
                injected_[i] = injected_.back();
                injected_.pop_back();
            } else {
                i++;
            }
        landed_ = through;
    }
    // Under mu_: the host waits for every copy issued so far and learns each one's outcome from
    // the marks that cover it (one recorded after the newest copy): an event that reports an
    // error blames the copies since the mark before it, and no others. Where no mark can be
    // recorded, the stream's outcome is every copy's.
    void settle_by_marks() {
        flush();
        if (landed_ == issued_ && injected_.empty()) return retire_marks();
        if (marks_.empty() || marks_.back().through < issued_) record_mark();
        while (!marks_.empty()) {
            const cudaError_t e = cudaEventSynchronize(marks_.front().event.get());
            if (e != cudaSuccess) (void)cudaGetLastError();
            settle_through(marks_.front().through, e);
            events_.push_back(std::move(marks_.front().event));
            marks_.pop_front();
        }
    }
    // Under mu_: the stream was waited for with outcome `e`: every copy issued is over.
    void settle_all(cudaError_t e) {
        retire_marks();
        settle_through(issued_, e);
    }
    // Under mu_: the stream was waited for: every mark is past, its event back to the pool.
    void retire_marks() {
        for (mark &m : marks_) events_.push_back(std::move(m.event));
        marks_.clear();
    }
    // Under mu_: the failure that covers the landed copy `seq`, or nullptr.
    failure *failure_of(std::uint64_t seq) {
        for (failure &f : failures_)
            if (seq >= f.first && seq <= f.last) return &f;
        return nullptr;
    }
    cudaError_t failed_in(std::uint64_t seq) {
        const failure *f = failure_of(seq);
        return f ? f->error : cudaSuccess;
    }

    // The heap's stream waits for the work queued on `after` so far, on the GPU: an event
    // recorded on `after` in the calling thread's device context (where 0, cudaStreamLegacy and
    // cudaStreamPerThread name that device's streams), waited for by the heap's stream (CUDA
    // waits across devices). A created stream of another device cannot take the event: then it
    // is recorded on the heap's device, and if that fails too the host waits for `after`.
    cudaError_t order_after(cudaStream_t after) {
        cuda_event ev;  // destroyed on return: CUDA releases it once the wait is satisfied
        cudaError_t e = cudaEventCreateWithFlags(ev.out(), cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventRecord(ev.get(), after);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            ev.reset();
            device_scope on(device_);
            e = cudaEventCreateWithFlags(ev.out(), cudaEventDisableTiming);
            if (e == cudaSuccess) e = cudaEventRecord(ev.get(), after);
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                return cudaStreamSynchronize(after);
            }
        }
        device_scope on(device_);
        return cudaStreamWaitEvent(stream_.get(), ev.get(), 0);
    }

    static std::string describe(const flight &f) {
        return "copy of " + std::to_string(f.bytes) + " bytes from rank " + std::to_string(f.rank_s) + " to rank " +
               std::to_string(f.rank_d);
    }

    // On the initiator: the copy of `f` is over (`e`): a failure is recorded for check_copies()
    // and, while the engine is open, redone (finish() with redo_ok; the redo is counted in
    // fallbacks_in_flight() here, under the lock that close() takes, so destroy() waits for it).
    void complete(flight *raw, cudaError_t e) {
        std::unique_ptr<flight> f(raw);
        bool redo = false;
        if (e != cudaSuccess && f->is_wait) {  // after(): reported, nothing to redo
            std::lock_guard<std::mutex> lock(mu_);
            if (error_.empty())
                error_ = std::string(
                             "nvshmem_heap::after: CUDA reported an error for the work queued on the stream "
                             "before the call (") +
                         cudaGetErrorString(e) + "); the future was made ready regardless";
        } else if (e != cudaSuccess) {
            std::lock_guard<std::mutex> lock(mu_);
            redo = !closed_.load();
            if (redo) fallbacks_in_flight_->fetch_add(1);
            if (failure *fl = failure_of(f->seq)) fl->redone += redo;
            if (error_.empty())
                error_ = "nvshmem_heap::copy: the " + describe(*f) + " failed after it was issued (" +
                         cudaGetErrorString(e) + ")" +
                         (f->seq == 0 ? std::string("; it was on a caller's stream (copy_on_stream): the work queued "
                                                    "there after it did not see its bytes")
                                      : std::string()) +
                         (redo ? "; it was redone through upcxx::copy"
                               : "; the heap was being destroyed, so it was not redone");
        }
        flight &ref = *f;
        ref.finish(std::move(f), e, redo ? fallbacks_in_flight_ : nullptr);
    }

    // How copy `f` ended, or cudaErrorNotReady. The completions of a flood run back to back in
    // one progress: one asks CUDA, and the others, covered by a mark, take its answer until each
    // comes round again (one query per round, not one per copy).
    cudaError_t outcome(flight &f) {
        std::lock_guard<std::mutex> lock(mu_);
        if (f.seq > landed_ && f.asked != asked_ && !marks_.empty() && marks_.back().through >= f.seq) {
            f.asked = asked_;
            return cudaErrorNotReady;
        }
        f.asked = ++asked_;
        return outcome_of(f.seq);
    }

public:
    /// The host waits for every fast copy issued so far; their outcomes are known from here on
    /// (destroy(), before the progress that completes, and redoes, this persona's copies; a
    /// completion that cannot stay queued).
    void wait_all() {
        std::lock_guard<std::mutex> lock(mu_);
        if (released_) return;
        wait_on_stream_copies();
        if (!stream_) return;
        device_scope on(device_);
        settle_by_marks();
    }

private:
    // One copy's completion, queued on its initiator persona (at user level; at internal level
    // for a copy that owes a remote completion): finishes the copy once it landed, else queues
    // itself again. It owns the flight.
    struct poll {
        std::shared_ptr<copy_engine> self;
        flight *f;
        bool user = false;  // moved to user level: an internal-level copy that CUDA failed (redone there)

        void queue() const {
            if (f->internal && !user)
                queue_internal(upcxx::current_persona(), poll{*this});
            else
                upcxx::current_persona().lpc_ff(poll{*this});
        }
        void operator()() const {
            if (!f->issued) {  // never issued (start() threw): nothing to notify
                delete f;
                return;
            }
            const cudaError_t e = f->ev || f->settled ? self->event_outcome(*f) : self->outcome(*f);
            if (e == cudaSuccess || (e != cudaErrorNotReady && (user || !f->internal))) {
                f->in_internal = f->internal && !user;
                return self->complete(f, e);
            }
            try {
                // A failed copy is redone through upcxx::copy at user level, never in internal
                // progress.
                poll{self, f, user || e != cudaErrorNotReady}.queue();
            } catch (...) {  // cannot stay queued: wait here for the copy instead
                self->wait_all();
                self->complete(f, self->outcome(*f));
            }
        }
    };

    const int device_;
    const bool force_fallback_;
    std::atomic<std::size_t> batch_bytes_;  // the largest copy batched (0: none)

    const unsigned generation_ = watch_forks();
    cuda_stream stream_;
    std::uint64_t issued_ = 0;                             // copies issued on the stream (the last one's seq)
    std::uint64_t landed_ = 0;                             // every copy up to this seq is over
    std::deque<mark> marks_;                               // recorded, oldest first, not yet seen complete
    std::vector<failure> failures_;                        // landed copies CUDA reported an error for
    std::vector<std::uint64_t> injected_;                  // test hook: copies to report failed when they land
    std::vector<cuda_event> events_;                       // reused: creating one costs microseconds
    std::string error_;                                    // the first fast copy that failed after it was issued
    std::uint64_t asked_ = 0;                              // how many times a completion asked CUDA (outcome())
    std::vector<upcxx_extra_nvshmem_copy_desc_t> batch_;   // issued, not yet on the stream (the newest)
    std::vector<std::uint64_t> batch_seq_;                 // their sequence numbers
    std::atomic<bool> batching_{true};                     // false once the batch kernel could not be launched
    std::vector<cudaEvent_t> on_stream_;                   // events after copy_on_stream copies on callers' streams
    std::uint32_t *flag_host_ = nullptr;                   // the word streams wait on for tickets (mapped host memory)
    void *flag_dev_ = nullptr;                             // its device address
    std::uint32_t tickets_issued_ = 0, tickets_done_ = 0;  // copy_on_stream's upcxx::copy calls
    std::vector<std::uint32_t> tickets_out_of_order_;      // done, after one not yet done
    bool released_ = false;                                // drain() released the stream and the events
    std::mutex mu_;                                        // everything above
    std::atomic<std::size_t> fast_{0}, fallback_{0}, batched_{0};
    const std::shared_ptr<std::atomic<long>> fallbacks_in_flight_ = std::make_shared<std::atomic<long>>(0);
    std::atomic<bool> closed_{false};
};

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_COPY_ENGINE_HPP
