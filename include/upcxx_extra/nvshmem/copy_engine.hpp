// upcxx-extra-nvshmem: the fast copy engine of nvshmem_heap::copy. Part of
// <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
//
// A fast copy is one cudaMemcpyAsync between two addresses this process reaches (NVSHMEM's peer
// mapping, or this rank's own device memory), on a private non-blocking stream of the heap's
// device, with an event of its own. Its completion runs on the persona that issued it:
//   - copies of up to sync_copy_max bytes wait for their own event in the call;
//   - larger ones are polled from LPCs on the initiator for up to poll_window, then handed to the
//     engine's waiter thread, which checks the copy's event every waiter_period and posts the
//     completing LPC to the initiator when the copy lands. On an H200 it hands a copy over
//     about 20 us after it lands, for about a quarter of a core while it waits; a CUDA host
//     function, or an event with blocking sync, takes 100-125 us.
// A copy whose event reports a CUDA error is redone through upcxx::copy (flight::finish), so a
// completion always means the bytes landed; the error is kept for check_copies(). The engine is
// shared (shared_ptr) by the heap and its copies in flight, which may outlive the heap.
#ifndef UPCXX_EXTRA_NVSHMEM_COPY_ENGINE_HPP
#define UPCXX_EXTRA_NVSHMEM_COPY_ENGINE_HPP

#include <upcxx/upcxx.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

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

class copy_engine;

/// One fast copy in flight: what its completion needs. finish() runs on the initiator persona.
struct flight {
    virtual ~flight() = default;
    /// The copy landed (`e` cudaSuccess) or CUDA reported `e`; `redo_ok` false once the heap is
    /// destroyed (its UPC++ segment is gone: a failed copy can only be reported then).
    virtual void finish(cudaError_t e, bool redo_ok) = 0;

    std::shared_ptr<copy_engine> engine;
    upcxx::persona *initiator = nullptr;
    cudaEvent_t event = nullptr;
    bool injected_failure = false;
    std::chrono::steady_clock::time_point issued;
    std::string what;  // "copy of N bytes from rank a to rank b", for the error message
};

class copy_engine : public std::enable_shared_from_this<copy_engine> {
public:
    /// Copies up to this size wait for their own event in the call: they take less than an
    /// asynchronous completion's bookkeeping (4 MiB: about 11 us at 380 GB/s over NVLink).
    static constexpr std::size_t sync_copy_max = std::size_t(4) << 20;
    /// How long a large copy is polled from LPCs before the waiter thread takes over.
    static constexpr std::chrono::microseconds poll_window{100};
    /// How often the waiter thread checks the event of the copy it waits for.
    static constexpr std::chrono::microseconds waiter_period{20};

    struct counts_t {
        std::size_t fast = 0;      // CUDA async copy through NVSHMEM's P2P mapping
        std::size_t fallback = 0;  // upcxx::copy
    };

    copy_engine(int device, bool force_fallback) : device_(device), force_fallback_(force_fallback) {}
    ~copy_engine() {
        {  // no flight is left to wait for: each one holds the engine
            std::lock_guard<std::mutex> lock(wait_mu_);
            stop_ = true;
        }
        wait_cv_.notify_all();
        if (waiter_.joinable()) waiter_.join();
        device_scope on(device_);
        if (stream_) {
            cudaStreamSynchronize(stream_);
            cudaStreamDestroy(stream_);
        }
        for (cudaEvent_t e : events_) cudaEventDestroy(e);
    }
    copy_engine(const copy_engine &) = delete;
    copy_engine &operator=(const copy_engine &) = delete;

    bool force_fallback() const noexcept { return force_fallback_; }
    void count_fallback() noexcept { fallback_.fetch_add(1, std::memory_order_relaxed); }
    counts_t counts() const noexcept { return counts_t{fast_.load(), fallback_.load()}; }

    /// One issued copy: its event, recorded on the stream after it.
    struct ticket {
        cudaEvent_t event;
        bool injected_failure;  // test hook: not issued, fails when waited for
    };

    /// Issues the copy to <- from (`bytes`), ordered after the work queued on `after` so far when
    /// it is not null. Throws nvshmem_error (errc cuda; nothing copied) when CUDA refuses it.
    ticket issue(void *to, const void *from, std::size_t bytes, cudaStream_t after, const std::string &what) {
        device_scope on(device_);
        cudaError_t e = cudaSuccess;
        ticket t{nullptr, false};
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!stream_) e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
            if (e == cudaSuccess && !events_.empty()) {
                t.event = events_.back();
                events_.pop_back();
            }
        }
        if (e == cudaSuccess && !t.event) e = cudaEventCreateWithFlags(&t.event, cudaEventDisableTiming);
        if (e == cudaSuccess && after) e = order_after(after);
#if defined(UPCXX_EXTRA_NVSHMEM_TEST_HOOKS)
        t.injected_failure = test_hooks::take_failure();
#endif
        if (e == cudaSuccess && !t.injected_failure) e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream_);
        if (e == cudaSuccess) e = cudaEventRecord(t.event, stream_);
        if (e != cudaSuccess) {
            if (t.event) give_back(t.event);
            throw nvshmem_error(UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR,
                                "nvshmem_heap::copy: issuing the " + what + " failed: " + cudaGetErrorString(e),
                                nvshmem_errc::cuda);
        }
        fast_.fetch_add(1, std::memory_order_relaxed);
        return t;
    }

    /// Waits here for the copy of `t` (its own event, not the stream: another copy's failure is
    /// not this one's). Returns its outcome; a failure is recorded for check_copies().
    cudaError_t wait(ticket t, const std::string &what) {
        return settle(t.event, t.injected_failure, cudaEventSynchronize(t.event), what);
    }

    /// Completes the copy of `t` asynchronously on the calling persona: f->finish() runs there
    /// when the copy landed or failed. The flight is owned by the engine from here on.
    void watch(ticket t, std::unique_ptr<flight> f, std::string what) {
        f->engine = shared_from_this();
        f->what = std::move(what);
        f->initiator = &upcxx::current_persona();
        f->event = t.event;
        f->injected_failure = t.injected_failure;
        f->issued = std::chrono::steady_clock::now();
        flight *raw = f.release();
        raw->initiator->lpc_ff(poll{raw});
    }

    /// Whether a failed copy may still be redone through upcxx::copy (false once drained).
    bool open() const noexcept { return !closed_.load(); }

    /// Waits until every fast copy issued so far has landed. Each one's completion has then run
    /// or is queued on its initiator persona (a poll LPC that finds it done, or the LPC the
    /// waiter thread posted) and runs at that persona's next user-level progress. From here on a
    /// copy that failed is reported, not redone. Returns the CUDA error met ("" when none).
    std::string drain() {
        closed_.store(true);
        cudaError_t e = cudaSuccess;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!stream_) return std::string();
            device_scope on(device_);
            e = cudaStreamSynchronize(stream_);
        }
        {  // the waiter has posted the completion of every copy handed to it so far
            std::unique_lock<std::mutex> lock(wait_mu_);
            const std::size_t handed = posted_ + waiting_.size();
            wait_cv_.wait(lock, [&] { return posted_ >= handed; });
        }
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

    void give_back(cudaEvent_t ev) {
        std::lock_guard<std::mutex> lock(mu_);
        events_.push_back(ev);
    }

    // A copy is over, its event having reported `e`: the event goes back to the pool and a
    // failure is recorded for check_copies(). Returns the copy's outcome.
    cudaError_t settle(cudaEvent_t ev, bool injected_failure, cudaError_t e, const std::string &what) {
        if (injected_failure && e == cudaSuccess) e = cudaErrorUnknown;
        give_back(ev);
        if (e != cudaSuccess) record(what, e);
        return e;
    }

    void record(const std::string &what, cudaError_t e) {
        std::lock_guard<std::mutex> lock(mu_);
        if (error_.empty())
            error_ = "nvshmem_heap::copy: the " + what + " failed after it was issued (" + cudaGetErrorString(e) + ")" +
                     (closed_.load() ? "; the heap was destroyed, so it was not redone"
                                     : "; it was redone through upcxx::copy");
    }

    // On the initiator: the copy of `f` is over (`e`). Owns and deletes `f`.
    static void complete(flight *raw, cudaError_t e) {
        std::unique_ptr<flight> f(raw);
        std::shared_ptr<copy_engine> self = f->engine;
        e = self->settle(f->event, f->injected_failure, e, f->what);
        f->event = nullptr;
        f->finish(e, self->open());
    }

    struct poll {
        flight *f;
        void operator()() const {
            cudaError_t e = cudaEventQuery(f->event);
            if (e != cudaErrorNotReady) return complete(f, e);
            if (std::chrono::steady_clock::now() - f->issued < poll_window) return f->initiator->lpc_ff(poll{f});
            if (!f->engine->hand_to_waiter(f))
                complete(f, cudaEventSynchronize(f->event));  // no waiter thread: wait here
        }
    };

    // The waiter thread, started at the first copy handed to it. Copies land in the order they
    // were issued (one stream), but several personas may hand theirs over out of that order, so
    // every period it checks each copy handed over and posts the completion of those that landed
    // to their initiators (lpc_ff is safe from any thread). It never touches a flight after
    // posting it, and posts under wait_mu_: the completion may free the engine, whose destructor
    // takes wait_mu_ before it stops and joins the waiter. Returns false (the caller waits for
    // the copy itself) when the thread cannot be started.
    bool hand_to_waiter(flight *f) {
        std::lock_guard<std::mutex> lock(wait_mu_);
        if (waiter_failed_) return false;
        try {
            waiting_.push_back(f);
            if (!waiter_.joinable()) waiter_ = std::thread([this] { wait_loop(); });
        } catch (...) {
            if (!waiting_.empty() && waiting_.back() == f) waiting_.pop_back();
            waiter_failed_ = !waiter_.joinable();
            return false;
        }
        wait_cv_.notify_all();
        return true;
    }
    void wait_loop() {
#if defined(__linux__)
        prctl(PR_SET_TIMERSLACK, 1000UL);  // this thread's sleeps end within 1 us of the period
#endif
        // The heap's device: a first CUDA call on a new thread would otherwise set up device 0.
        // Should this fail, the event queries below still work (CUDA allows another device).
        (void)cudaSetDevice(device_);
        std::unique_lock<std::mutex> lock(wait_mu_);
        for (;;) {
            wait_cv_.wait(lock, [&] { return stop_ || !waiting_.empty(); });
            if (waiting_.empty()) return;  // stop_
            for (auto it = waiting_.begin(); it != waiting_.end();) {
                flight *f = *it;
                const cudaError_t e = cudaEventQuery(f->event);
                if (e == cudaErrorNotReady) {
                    ++it;
                    continue;
                }
                it = waiting_.erase(it);
                f->initiator->lpc_ff([f, e] { complete(f, e); });
                posted_++;
                wait_cv_.notify_all();  // drain() waits for posted_
            }
            if (waiting_.empty()) continue;
            lock.unlock();
            std::this_thread::sleep_for(waiter_period);
            lock.lock();
        }
    }

    const int device_;
    const bool force_fallback_;
    cudaStream_t stream_ = nullptr;
    std::vector<cudaEvent_t> events_;  // reused: creating one per copy costs microseconds
    std::string error_;                // the first fast copy that failed after it was issued
    std::mutex mu_;                    // stream_ creation, events_, error_
    std::atomic<std::size_t> fast_{0}, fallback_{0};
    std::atomic<bool> closed_{false};
    std::thread waiter_;            // started at the first copy handed to it; joined by the destructor
    std::deque<flight *> waiting_;  // handed to the waiter and not yet posted, in hand-over order
    std::size_t posted_ = 0;        // copies whose completion the waiter has posted so far
    bool stop_ = false;             // the destructor ends the waiter
    bool waiter_failed_ = false;    // the thread could not be started: copies are waited for by their caller
    std::mutex wait_mu_;            // all of the above
    std::condition_variable wait_cv_;
};

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_COPY_ENGINE_HPP
