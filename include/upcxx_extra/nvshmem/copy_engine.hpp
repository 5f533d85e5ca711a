// upcxx-extra-nvshmem: the fast copy engine of nvshmem_heap::copy. Part of
// <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
//
// A fast copy is one cudaMemcpyAsync between two addresses this process reaches (NVSHMEM's peer
// mapping, or this rank's own device memory), on a private non-blocking stream of the heap's
// device. Nothing waits in the call: the copy gets the next sequence number of the stream and
// joins the lane of the persona that issued it; one poll LPC per lane (queued while the lane
// holds a copy) completes the copies that landed, in issue order, at that persona's user-level
// progress. The stream runs copies in issue order, so one CUDA event (a mark) tells that every
// copy up to a sequence number landed. A mark is recorded after a lane's first copy, and by a
// poll for the copies issued since: a flood of copies costs one cudaMemcpyAsync each and a few
// events in all, and the copies issued back to back before a progress complete together (as
// soon as the last of them lands), a lone copy as soon as it lands. Completions run only
// inside UPC++ progress: nothing is posted to a persona from another thread, after
// upcxx::finalize(), or in a forked child.
//
// A copy covered by a mark that reports a CUDA error is redone through upcxx::copy
// (flight::finish), so a completion always means the bytes landed; the error is kept for
// check_copies(). The engine is shared (shared_ptr) by the heap and the polls of its lanes, which
// may outlive the heap.
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

namespace upcxx {
namespace extra {
namespace detail {

#if defined(UPCXX_EXTRA_NVSHMEM_TEST_HOOKS)
/// Test hooks, compiled in only with -DUPCXX_EXTRA_NVSHMEM_TEST_HOOKS: a stand-in for a real
/// asynchronous CUDA failure of a copy, which cannot be provoked without breaking the context.
struct test_hooks {
    static std::atomic<int> &failing() {
        static std::atomic<int> n{0};
        return n;
    }
    /// The next `n` fast copies are not issued, and their events report cudaErrorUnknown.
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
/// count is its parent's plus one), counted by a pthread_atfork handler registered at the first
/// call. A load, where getpid() would be a system call per copy.
inline unsigned fork_generation() noexcept {
    static std::atomic<unsigned> generation{0};
    static const int registered =
        ::pthread_atfork(nullptr, nullptr, [] { generation.fetch_add(1, std::memory_order_relaxed); });
    (void)registered;
    return generation.load(std::memory_order_relaxed);
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
/// cudaStreamPerThread and created streams alike.
struct stream_order {
    bool set = false;
    cudaStream_t stream = nullptr;
    static stream_order none() noexcept { return stream_order{}; }
    static stream_order after(cudaStream_t s) noexcept { return stream_order{true, s}; }
};

/// One fast copy in flight. finish() runs on the initiator persona, once, and owns the flight.
struct flight {
    virtual ~flight() = default;
    /// The copy landed (`e` cudaSuccess) or CUDA reported `e`; `redo_ok` false once the heap is
    /// destroyed (its UPC++ segment is gone: a failed copy can only be reported then).
    virtual void finish(std::unique_ptr<flight> self, cudaError_t e, bool redo_ok) = 0;

    // What the error message names, formatted only when the copy fails.
    std::size_t bytes = 0;
    int rank_s = -1, rank_d = -1;
    // Set by the engine.
    flight *next = nullptr;         // the lane's next (younger) copy
    std::uint64_t seq = 0;          // its place on the stream: 1, 2, ...
    bool injected_failure = false;  // test hook: not issued, fails when it completes
};

class copy_engine : public std::enable_shared_from_this<copy_engine> {
public:
    struct counts_t {
        std::size_t fast = 0;      // CUDA async copy through NVSHMEM's P2P mapping
        std::size_t fallback = 0;  // upcxx::copy
    };

    copy_engine(int device, bool force_fallback) : device_(device), force_fallback_(force_fallback) {}
    ~copy_engine() {
        for (std::unique_ptr<lane> &l : lanes_)  // empty but for a child of fork() (never completed)
            for (flight *f = l->head; f;) {
                flight *n = f->next;
                delete f;
                f = n;
            }
        if (forked()) return;  // the parent's CUDA objects are not this process's to touch
        device_scope on(device_);
        if (stream_) {
            cudaStreamSynchronize(stream_);
            cudaStreamDestroy(stream_);
        }
        for (const mark &m : marks_) cudaEventDestroy(m.event);
        for (cudaEvent_t e : events_) cudaEventDestroy(e);
    }
    copy_engine(const copy_engine &) = delete;
    copy_engine &operator=(const copy_engine &) = delete;

    bool force_fallback() const noexcept { return force_fallback_; }
    void count_fallback() noexcept { fallback_.fetch_add(1, std::memory_order_relaxed); }
    /// How many upcxx::copy calls through the heap (fallbacks) have not completed: raised when one
    /// is issued, lowered by its completion (copy.hpp). Shared with those completions.
    const std::shared_ptr<std::atomic<long>> &fallbacks_in_flight() const noexcept { return fallbacks_in_flight_; }
    counts_t counts() const noexcept { return counts_t{fast_.load(), fallback_.load()}; }

    /// Whether this process is a fork() child of the one that made the engine: CUDA does not
    /// survive fork(), so such a child cannot copy (the heap's copies throw).
    bool forked() const noexcept { return fork_generation() != generation_; }

    /// Issues the copy to <- from of `f->bytes`, ordered after the work queued on `order` so far
    /// when it is set, and completes it on the calling persona at its progress (finish() runs
    /// there once the bytes landed). Takes `f` on every path. Throws nvshmem_error (errc cuda,
    /// or forked; nothing copied, nothing will be notified) when the copy cannot be issued; once
    /// CUDA has accepted the copy it is reported issued: nothing after it can fail.
    void start(std::unique_ptr<flight> f, void *to, const void *from, stream_order order) {
        if (forked())
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT,
                                "nvshmem_heap::copy: this process is a fork() child of the one that made the heap; "
                                "CUDA does not survive fork(), so nothing was copied (make the heap in this process)",
                                nvshmem_errc::forked);
        upcxx::persona &me = upcxx::current_persona();
        lane &l = lane_of(me);
        if (!l.polling) {  // before the copy is issued: a poll that cannot be posted copies nothing
            me.lpc_ff(poll{shared_from_this(), &l});
            l.polling = true;  // a poll that finds the lane empty ends
        }
        const bool first = !l.head;
        issue(*f, to, from, order, first);
        l.push(f.release());
        fast_.fetch_add(1, std::memory_order_relaxed);
    }

    /// Whether a failed copy may still be redone through upcxx::copy (false once drained).
    bool open() const noexcept { return !closed_.load(); }

    /// Waits until every fast copy issued so far has landed. Each one's completion is then queued
    /// on its initiator persona (its lane's poll LPC finds it landed) and runs at that persona's
    /// next user-level progress. From here on a copy that failed is reported, not redone.
    /// Returns the CUDA error met ("" when none).
    std::string drain() {
        closed_.store(true);
        if (forked()) return std::string();
        const cudaError_t e = drain_stream();
        if (e == cudaSuccess) return std::string();
        return std::string("nvshmem_heap: waiting for the fast copies failed: ") + cudaGetErrorString(e);
    }

    /// The first fast copy that failed after it was issued since the last call ("" when none).
    std::string take_error() {
        std::lock_guard<std::mutex> lock(mu_);
        std::string e;
        e.swap(error_);
        return e;
    }

private:
    // The copies of one persona in issue order. Touched only by the thread holding that persona
    // (start() and the poll run there); lanes live as long as the engine.
    struct lane {
        upcxx::persona *owner = nullptr;
        flight *head = nullptr, *tail = nullptr;
        bool polling = false;  // a poll LPC is queued on `owner`
        void push(flight *f) noexcept {
            (tail ? tail->next : head) = f;
            tail = f;
        }
        flight *pop() noexcept {
            flight *f = head;
            head = f->next;
            if (!head) tail = nullptr;
            f->next = nullptr;
            return f;
        }
    };

    lane &lane_of(upcxx::persona &p) {
        std::lock_guard<std::mutex> lock(mu_);
        for (std::unique_ptr<lane> &l : lanes_)
            if (l->owner == &p) return *l;
        lanes_.push_back(std::make_unique<lane>());
        lanes_.back()->owner = &p;
        return *lanes_.back();
    }

    // One cudaMemcpyAsync on the stream, numbered in stream order, with a mark after it when it
    // is the first copy of its lane (a lone copy completes as soon as it lands; the copies issued
    // after it before the next progress share the mark that progress records). Throws (nothing
    // copied) when CUDA refuses the copy.
    void issue(flight &f, void *to, const void *from, stream_order order, bool mark_it) {
        device_scope on(device_);
        std::lock_guard<std::mutex> lock(mu_);
        cudaError_t e = cudaSuccess;
        if (!stream_) e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
        if (e == cudaSuccess && order.set) e = order_after(order.stream);
#if defined(UPCXX_EXTRA_NVSHMEM_TEST_HOOKS)
        f.injected_failure = test_hooks::take_failure();
#endif
        if (e == cudaSuccess && !f.injected_failure) e = cudaMemcpyAsync(to, from, f.bytes, cudaMemcpyDefault, stream_);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR,
                                "nvshmem_heap::copy: issuing the " + describe(f) + " failed: " + cudaGetErrorString(e),
                                nvshmem_errc::cuda);
        }
        f.seq = ++issued_;
        if (mark_it) record_mark();
    }

    // Under mu_: how copy `seq` ended (cudaSuccess, a CUDA error), or cudaErrorNotReady. Retires
    // the marks that completed; when none covers `seq`, records one after every copy issued.
    cudaError_t outcome_of(std::uint64_t seq) {
        while (seq > landed_ && !marks_.empty()) {
            const cudaError_t e = cudaEventQuery(marks_.front().event);
            if (e == cudaErrorNotReady) break;
            settle_through(marks_.front().through, e);
            events_.push_back(marks_.front().event);
            marks_.pop_front();
        }
        if (seq <= landed_) return failed_in(seq);
        if (marks_.empty() || marks_.back().through < seq) record_mark();
        return seq <= landed_ ? failed_in(seq) : cudaErrorNotReady;
    }

    // Under mu_: an event after every copy issued so far. When CUDA cannot make or record one,
    // the host waits for the stream instead (the copies are issued: they complete regardless).
    void record_mark() {
        device_scope on(device_);
        cudaEvent_t ev = nullptr;
        if (!events_.empty()) {
            ev = events_.back();
            events_.pop_back();
        }
        cudaError_t e = ev ? cudaSuccess : cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventRecord(ev, stream_);
        if (e == cudaSuccess) {
            marks_.push_back(mark{ev, issued_});
            return;
        }
        (void)cudaGetLastError();
        if (ev) cudaEventDestroy(ev);  // its state is unknown: not back to the pool
        settle_all(cudaStreamSynchronize(stream_));
    }

    // Under mu_: every copy up to `through` is over, with `e` for those not over before.
    void settle_through(std::uint64_t through, cudaError_t e) {
        if (through <= landed_) return;
        if (e != cudaSuccess) failures_.push_back(failure{landed_ + 1, through, e});
        landed_ = through;
    }
    // Under mu_: the stream was waited for with outcome `e`: every copy issued is over.
    void settle_all(cudaError_t e) {
        for (const mark &m : marks_) events_.push_back(m.event);
        marks_.clear();
        settle_through(issued_, e);
    }
    // Under mu_: how the landed copy `seq` ended.
    cudaError_t failed_in(std::uint64_t seq) const {
        for (const failure &f : failures_)
            if (seq >= f.first && seq <= f.last) return f.error;
        return cudaSuccess;
    }
    cudaError_t outcome(const flight &f) {
        std::lock_guard<std::mutex> lock(mu_);
        return outcome_of(f.seq);
    }

    // The heap's stream waits for the work queued on `after` so far, on the GPU. A stream of
    // another device cannot take this device's event: then the host waits for it instead.
    cudaError_t order_after(cudaStream_t after) {
        cudaEvent_t ev = nullptr;
        cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e != cudaSuccess) return e;
        e = cudaEventRecord(ev, after);
        if (e == cudaSuccess) {
            e = cudaStreamWaitEvent(stream_, ev, 0);
        } else {
            (void)cudaGetLastError();
            e = cudaStreamSynchronize(after);
        }
        cudaEventDestroy(ev);  // released once the wait is satisfied
        return e;
    }

    static std::string describe(const flight &f) {
        return "copy of " + std::to_string(f.bytes) + " bytes from rank " + std::to_string(f.rank_s) + " to rank " +
               std::to_string(f.rank_d);
    }

    void record(const flight &f, cudaError_t e) {
        std::lock_guard<std::mutex> lock(mu_);
        if (error_.empty())
            error_ = "nvshmem_heap::copy: the " + describe(f) + " failed after it was issued (" +
                     cudaGetErrorString(e) + ")" +
                     (closed_.load() ? "; the heap was destroyed, so it was not redone"
                                     : "; it was redone through upcxx::copy");
    }

    // On the initiator: the copy of `f` is over (`e`): a failure recorded for check_copies(),
    // then its completion.
    void complete(flight *raw, cudaError_t e) {
        std::unique_ptr<flight> f(raw);
        if (f->injected_failure && e == cudaSuccess) e = cudaErrorUnknown;
        if (e != cudaSuccess) record(*f, e);
        flight &ref = *f;
        ref.finish(std::move(f), e, open());
    }

    // A lane's poll: completes the copies that landed, oldest first, and stays queued while the
    // lane holds one. A completion may start copies on this lane (they join it) or drop the
    // heap (`self` keeps the engine and the lane).
    struct poll {
        std::shared_ptr<copy_engine> self;
        lane *l;
        void operator()() const {
            while (flight *f = l->head) {
                const cudaError_t e = self->outcome(*f);
                if (e == cudaErrorNotReady) return requeue();
                self->complete(l->pop(), e);
            }
            l->polling = false;
        }
        void requeue() const {
            try {
                l->owner->lpc_ff(poll{self, l});
            } catch (...) {  // cannot stay queued: wait here for the lane's copies instead
                (void)self->drain_stream();
                while (flight *f = l->head) {
                    const cudaError_t e = self->outcome(*f);
                    self->complete(l->pop(), e);
                }
                l->polling = false;
            }
        }
    };

    const int device_;
    const bool force_fallback_;
    // Marks: every copy up to `through` landed once `event` completed.
    struct mark {
        cudaEvent_t event;
        std::uint64_t through;
    };
    // Copies first..last (landed) that CUDA reported `error` for.
    struct failure {
        std::uint64_t first, last;
        cudaError_t error;
    };

    // The host waits for every copy issued so far (drain(), a poll that cannot stay queued).
    cudaError_t drain_stream() {
        std::lock_guard<std::mutex> lock(mu_);
        if (!stream_) return cudaSuccess;  // nothing was ever issued
        device_scope on(device_);
        const cudaError_t e = cudaStreamSynchronize(stream_);
        settle_all(e);
        return e;
    }

    const unsigned generation_ = fork_generation();
    cudaStream_t stream_ = nullptr;
    std::uint64_t issued_ = 0;                  // copies issued on the stream (the last one's seq)
    std::uint64_t landed_ = 0;                  // every copy up to this seq is over
    std::deque<mark> marks_;                    // recorded, oldest first, not yet seen complete
    std::vector<failure> failures_;             // landed copies CUDA reported an error for
    std::vector<cudaEvent_t> events_;           // reused: creating one costs microseconds
    std::vector<std::unique_ptr<lane>> lanes_;  // one per persona that copied
    std::string error_;                         // the first fast copy that failed after it was issued
    std::mutex mu_;                             // everything above
    std::atomic<std::size_t> fast_{0}, fallback_{0};
    const std::shared_ptr<std::atomic<long>> fallbacks_in_flight_ = std::make_shared<std::atomic<long>>(0);
    std::atomic<bool> closed_{false};
};

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_COPY_ENGINE_HPP
