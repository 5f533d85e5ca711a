// upcxx-extra-nvshmem: the C++ face of the copy engine of nvshmem_heap::copy. Part of
// <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
//
// The engine itself is the C library's (upcxx_extra_nvshmem_engine_*, src/engine/): it issues a
// fast copy between two addresses this process reaches (NVSHMEM's peer mapping, this rank's own
// device memory) on a private non-blocking stream of the heap's device (small copies with heap
// memory at both ends batched into one kernel launch), and tells by a ticket when the copy
// landed. This file delivers the UPC++ completions: nothing waits in the call; one LPC, queued on
// the persona that issued the copy, polls the ticket at that persona's user-level progress and
// completes the copy once it landed (the polls of a flood ask the GPU once per round, not once
// per copy). It makes no CUDA call: CUDA types appear in signatures only.
//
// A wait on a caller's stream (after(), copies_on_stream) that its first poll finds not ready is
// parked with the engine's watcher thread instead of polled again (copy_engine::park): the thread
// reads the wait's completion word and, once the stream has written it, queues the poll again on
// the initiator persona (persona::lpc_ff, which UPC++ allows from any thread, in seq mode too).
// upcxx::progress() meanwhile returns at once, so the host is free while the stream works. The
// persona must outlive the wait, as for any UPC++ operation it initiated.
//
// Each completion LPC owns its copy and holds nothing of any other persona: a persona (or the
// thread whose default persona it was) that goes away with copies in flight takes only their
// completions with it, as it does upcxx::copy's own. The engine it shares with them keeps no CUDA
// object once drained: drain() (destroy(), or a heap that goes out of scope) waits for every copy
// issued and releases the stream and the events.
//
// A copy with a remote completion (remote_cx::as_rpc) is polled at its initiator's internal-level
// progress instead, as UPC++ runs its own copy's: once the bytes landed its remote completion is
// sent there (upcxx::discharge(), which makes internal-level progress only, waits for it), and its
// operation and source completions go on to the persona's user-level progress.
//
// A copy whose ticket reports a CUDA error is redone through upcxx::copy (flight::finish) while
// the engine is open (one that owes a remote completion is first issued again by the engine from
// internal-level progress, so that upcxx::discharge() still returns: copy_engine::reissue), so a completion always
// means the bytes landed; the error is kept for check_copies(). Once the engine is closed a failed copy is reported,
// not redone, and drain() says how many were.
#ifndef UPCXX_EXTRA_NVSHMEM_COPY_ENGINE_HPP
#define UPCXX_EXTRA_NVSHMEM_COPY_ENGINE_HPP

#include <upcxx/upcxx.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>  // cudaStream_t in signatures (no call)

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

/// An nvshmem_error for the engine's status `s`, named after `fn`: status() is `s` itself and
/// what() the engine's own message (the thread's last error), unchanged; errc() names the
/// condition for code that matches on it: forked (FORKED), stream_capture (STREAM_CAPTURE),
/// heap_inactive (ENGINE_CLOSED: the heap is being destroyed), cuda (CUDA_ERROR), else c_status.
inline nvshmem_error engine_error(upcxx_extra_nvshmem_status_t s, const char *fn) {
    nvshmem_errc errc = nvshmem_errc::c_status;
    switch (s) {
        case UPCXX_EXTRA_NVSHMEM_STATUS_FORKED:
            errc = nvshmem_errc::forked;
            break;
        case UPCXX_EXTRA_NVSHMEM_STATUS_STREAM_CAPTURE:
            errc = nvshmem_errc::stream_capture;
            break;
        case UPCXX_EXTRA_NVSHMEM_STATUS_ENGINE_CLOSED:
            errc = nvshmem_errc::heap_inactive;
            break;
        case UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR:
            errc = nvshmem_errc::cuda;
            break;
        default:
            break;
    }
    return nvshmem_error(s, std::string(fn) + ": " + upcxx_extra_nvshmem_last_error(), errc);
}

/// Throws nvshmem_error (errc stream_capture) when `s` is being captured into a CUDA graph, or
/// when CUDA cannot say (the legacy stream during another stream's global-mode capture): the
/// stream operations complete through UPC++ progress on events of work that a graph only runs
/// when it is launched.
inline void refuse_capture(cudaStream_t s, const char *fn) {
    const upcxx_extra_nvshmem_status_t st = upcxx_extra_nvshmem_stream_check(s);
    if (st != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw engine_error(st, fn);
}

/// Frees a C object with `fn` (wasmtime's helpers.hh): the deleter of handle<T, fn>.
template <class T, void (*fn)(T *)>
struct c_deleter {
    void operator()(T *p) const noexcept { fn(p); }
};
/// A C object owned by a std::unique_ptr, freed with `fn`.
template <class T, void (*fn)(T *)>
using c_handle = std::unique_ptr<T, c_deleter<T, fn>>;

/// One fast copy in flight. finish() runs on the initiator persona, once, and owns the flight.
struct flight {
    virtual ~flight() = default;
    /// The copy landed (`result` UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_LANDED) or CUDA reported `result` (a CUresult).
    /// `redo`: the count of the heap's upcxx::copy calls, raised for this copy's redo when CUDA
    /// failed it and the engine is still open; null when a failure can only be reported.
    virtual void finish(std::unique_ptr<flight> self, int result, std::shared_ptr<std::atomic<long>> redo) = 0;

    // What the error message names, formatted only when the copy fails.
    std::size_t bytes = 0;
    int rank_s = -1, rank_d = -1;
    // Set by the engine.
    std::uint64_t ticket = 0;  // the engine's ticket (0: not issued)
    std::uint64_t asked = 0;   // the engine's poll slot for it
    // Set by the copy path: the copy owes a remote completion, so it is polled at the initiator's
    // internal-level progress (upcxx::discharge() makes no other).
    bool internal = false;
    // Set by start_after() and start_batch(): a wait on a caller's stream, parked with the
    // engine's watcher once a poll found it not ready (copy_engine::park).
    bool wait = false;
    // Set by the engine: finish() runs in internal-level progress (only a landed copy's remote
    // completion may be sent there; the rest goes on to user level).
    bool in_internal = false;
    // Set by reissue(): whether the copy was issued again, and how it was settled there.
    bool reissued = false;
    signed char settled = 0;  // 1: settled REDO (counted in fallbacks_in_flight), 2: REPORT, by reissue()
    // Set by the engine for a copy that owes a remote completion (internal): the copy as issued,
    // which reissue() issues again once when CUDA fails it. Out of line, so that the flight of a
    // copy with the usual completions stays within malloc's fast bins (fast_flight <= 120 bytes).
    std::unique_ptr<upcxx_extra_nvshmem_engine_copy_t> issued;
};

/// The heap's copy engine: the C library's engine (one handle, freed with this object) and the
/// UPC++ side of its copies.
///
/// Every status of the engine's calls is looked at: a call that can throw throws engine_error for
/// any status but OK; a noexcept one (a completion's LPC, a query of a noexcept heap accessor)
/// says by its call which statuses can come and what it does with them. The handle is never NULL
/// (the constructor throws instead), so NULL_ARGUMENT, the only failure of most calls, cannot
/// come.
class copy_engine : public std::enable_shared_from_this<copy_engine> {
public:
    struct counts_t {
        std::size_t fast = 0;      // moved by CUDA through NVSHMEM's P2P mapping (batched or not)
        std::size_t fallback = 0;  // upcxx::copy of a copy with an end that may be heap memory
        std::size_t batched = 0;   // of `fast`, those a batch's kernel launch moved
        // Waits (after(), copies_on_stream) the engine's watcher thread holds now: UPC++ progress
        // does not poll them until the stream reached them.
        std::size_t parked = 0;
    };

    /// Throws nvshmem_error when the C library refuses the engine.
    copy_engine(int device, const copy_policy &policy) : h_(make(device, policy)), force_fallback_(policy.upcxx_only) {}
    // The destructor frees h_ (upcxx_extra_nvshmem_engine_free): it drains the engine (waits for
    // every fast copy issued) and frees it; in a fork() child of the process that made it, it
    // only forgets it.
    copy_engine(const copy_engine &) = delete;
    copy_engine &operator=(const copy_engine &) = delete;

    bool force_fallback() const noexcept { return force_fallback_; }
    /// The largest copy batched from the next copy on (0: none; 0 also once a batch launch failed,
    /// which turns batching off for this engine).
    std::size_t batch_bytes() const noexcept {
        std::size_t n = 0;
        // OK or NULL_ARGUMENT, which cannot come (h_ and &n are not NULL); were it to, 0 (no
        // batching) is what the heap says.
        if (upcxx_extra_nvshmem_engine_batch_bytes(h_.get(), &n) != UPCXX_EXTRA_NVSHMEM_STATUS_OK) return 0;
        return n;
    }
    /// Throws nvshmem_error for any status but OK (only NULL_ARGUMENT could come, and cannot).
    void set_batch_bytes(std::size_t n) {
        check(upcxx_extra_nvshmem_engine_set_batch_bytes(h_.get(), n), "nvshmem_heap::set_copy_batch_bytes");
    }
    void count_fallback() noexcept { fallback_.fetch_add(1, std::memory_order_relaxed); }
    /// How many upcxx::copy calls the heap made (fallbacks with a heap end, and redone fast
    /// copies) have not completed: raised when one is issued, lowered by an LPC on the master
    /// persona that its operation completion queues (copy.hpp). Shared with those LPCs.
    const std::shared_ptr<std::atomic<long>> &fallbacks_in_flight() const noexcept { return fallbacks_in_flight_; }
    counts_t counts() const noexcept {
        upcxx_extra_nvshmem_engine_counts_t c{};
        // OK or NULL_ARGUMENT, which cannot come (h_ and &c are not NULL); were it to, the engine's
        // counts stay 0 (`c` is written only on OK).
        if (upcxx_extra_nvshmem_engine_counts(h_.get(), &c) != UPCXX_EXTRA_NVSHMEM_STATUS_OK) c = {};
        return counts_t{c.fast, fallback_.load(), c.batched, c.parked};
    }

    /// Throws nvshmem_error (errc forked, status FORKED, the engine's message) in a fork() child of
    /// the process that made the engine: the engine's one fork check, for the calls that refuse
    /// before any CUDA or UPC++ work of their own. No CUDA call.
    void check_usable(const char *fn) const {
        const upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_engine_check_usable(h_.get());
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw engine_error(s, fn);
    }

    /// Whether this process is a fork() child of the one that made the engine.
    bool forked() const noexcept {
        bool f = false;
        // OK or NULL_ARGUMENT, which cannot come (h_ and &f are not NULL); were it to, false: the
        // engine still refuses every call of a fork() child that needs CUDA (FORKED, which
        // engine_error turns into errc forked).
        if (upcxx_extra_nvshmem_engine_forked(h_.get(), &f) != UPCXX_EXTRA_NVSHMEM_STATUS_OK) return false;
        return f;
    }

    /// Issues the copy to <- from of `f->bytes`, ordered after (or on) the stream of `order` when
    /// it is set, and completes it on the calling persona at its progress (finish() runs there
    /// once the bytes landed). `device_ends`: both ends are device memory (heap memory), which a
    /// batch's kernel can move. Takes `f` on every path. Throws nvshmem_error (errc cuda, forked,
    /// stream_capture, or heap_inactive once closed; nothing copied, nothing will be notified)
    /// when the copy cannot be issued; once CUDA has accepted the copy nothing can fail.
    void start(std::unique_ptr<flight> f, void *to, const void *from, stream_order order, bool device_ends) {
        const char *fn = order.on ? "nvshmem_heap::copy_on_stream" : "nvshmem_heap::copy";
        // The engine refuses a fork() child's copy (FORKED), as the routing in front of it does.
        flight *raw = f.get();
        // Queued before the copy is issued: a completion that cannot be queued copies nothing.
        // It cannot run before this returns (only this persona's progress runs it).
        poll{shared_from_this(), raw}.queue();
        (void)f.release();  // the poll owns it: a flight that is not issued is dropped there
        upcxx_extra_nvshmem_engine_copy_t c = describe(*raw);
        c.dst = to;
        c.src = from;
        std::uint32_t flags = device_ends ? std::uint32_t(UPCXX_EXTRA_NVSHMEM_ENGINE_FLAG_DEVICE_ENDS) : 0u;
        if (order.on)
            flags |= std::uint32_t(UPCXX_EXTRA_NVSHMEM_ENGINE_FLAG_ON_STREAM);
        else if (order.set)
            flags |= std::uint32_t(UPCXX_EXTRA_NVSHMEM_ENGINE_FLAG_AFTER_STREAM);
        c.flags = flags;
        c.stream = order.stream;
        // Allocated before the copy is issued: once CUDA has accepted it nothing can fail.
        std::unique_ptr<upcxx_extra_nvshmem_engine_copy_t> keep;
        if (raw->internal) keep.reset(new upcxx_extra_nvshmem_engine_copy_t{});
        std::uint64_t t = 0;
        const upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_engine_copy(h_.get(), &c, &t);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw engine_error(s, fn);
        if (keep) {
            *keep = c;
            raw->issued = std::move(keep);
        }
        raw->ticket = t;
    }

    /// after(): completes `f` (a wait, no copy) on the calling persona at its user-level progress
    /// once the work queued on `s` before the call has completed. Throws nvshmem_error (errc
    /// stream_capture, cuda, forked, heap_inactive; nothing will be notified) when it cannot.
    void start_after(std::unique_ptr<flight> f, cudaStream_t s) {
        flight *raw = f.get();
        raw->wait = true;
        poll{shared_from_this(), raw}.queue();
        (void)f.release();
        std::uint64_t t = 0;
        const upcxx_extra_nvshmem_status_t st = upcxx_extra_nvshmem_engine_after(h_.get(), s, &t);
        if (st != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw engine_error(st, "nvshmem_heap::after");
        raw->ticket = t;
    }

    /// copies_on_stream(): issues the `n` copies of `copies` in the order of `s`, as one (small
    /// copies with heap memory at both ends in one launch of the batch kernel), and completes `f`
    /// (a wait, no copy of its own) on the calling persona at its user-level progress once `s`
    /// has run them all. Throws nvshmem_error (errc stream_capture, cuda, forked, heap_inactive;
    /// nothing will be notified) when they cannot be issued.
    void start_batch(std::unique_ptr<flight> f, cudaStream_t s, const upcxx_extra_nvshmem_engine_copy_t *copies,
                     std::size_t n) {
        flight *raw = f.get();
        raw->wait = true;
        poll{shared_from_this(), raw}.queue();
        (void)f.release();
        std::uint64_t t = 0;
        const upcxx_extra_nvshmem_status_t st =
            upcxx_extra_nvshmem_engine_copy_on_stream_batch(h_.get(), s, copies, n, &t);
        if (st != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw engine_error(st, "nvshmem_heap::copies_on_stream");
        raw->ticket = t;
    }
    /// The work queued on `s` after the call waits, on the GPU, until ticket `t` (stream_ticket)
    /// is done; where CUDA cannot enqueue that wait, the host makes progress until it is (false:
    /// it did not come within 60 s). Throws nvshmem_error (errc forked) in a fork() child.
    bool stream_waits_for(cudaStream_t s, std::uint32_t t) {
        const upcxx_extra_nvshmem_status_t st = upcxx_extra_nvshmem_engine_stream_wait_ticket(h_.get(), s, t);
        if (st == UPCXX_EXTRA_NVSHMEM_STATUS_OK) return true;
        // CUDA_ERROR: the driver cannot enqueue the wait; the host waits instead, below.
        if (st != UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR) throw engine_error(st, "nvshmem_heap::copy_on_stream");
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!ticket_done_by(t) && std::chrono::steady_clock::now() < until) upcxx::progress();
        return ticket_done_by(t);
    }
    /// A ticket for one upcxx::copy that a stream will wait for (copy_on_stream off the fast
    /// path); ticket_done(t) when its operation completed.
    std::uint32_t stream_ticket() {
        std::uint32_t t = 0;
        check(upcxx_extra_nvshmem_engine_ticket_new(h_.get(), &t), "nvshmem_heap::copy_on_stream");
        return t;
    }
    /// Marks ticket `t` done; false when it was already (nothing changes). Runs in completion
    /// LPCs, so it throws nothing: INVALID_ARGUMENT (done already) is expected, from the second of
    /// the two LPCs that mark a copy_on_stream's ticket (copy.hpp's upcxx_on_stream: the first to
    /// run marks it), or from one that runs after drain() marked every ticket done; NULL_ARGUMENT
    /// cannot come (h_ is not NULL).
    bool ticket_done(std::uint32_t t) noexcept {
        return upcxx_extra_nvshmem_engine_ticket_done(h_.get(), t) == UPCXX_EXTRA_NVSHMEM_STATUS_OK;
    }
    /// Whether a copy_on_stream's upcxx::copy has not completed yet (a stream may be waiting for it).
    bool tickets_pending() {
        bool done = true;
        check(upcxx_extra_nvshmem_engine_ticket_query(h_.get(), 0, &done), "nvshmem_heap");
        return !done;
    }
    /// UPC++ progress until no stream ticket is pending, for at most `seconds` (false: one still is).
    bool progress_while_tickets_pending(int seconds = 60) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
        while (tickets_pending()) {
            if (std::chrono::steady_clock::now() >= until) return false;
            upcxx::progress();
        }
        return true;
    }
    bool ticket_done_by(std::uint32_t t) {
        bool done = false;
        check(upcxx_extra_nvshmem_engine_ticket_query(h_.get(), t, &done), "nvshmem_heap::copy_on_stream");
        return done;
    }

    /// No copy is issued or redone from here on (destroy(), before it waits for the upcxx::copy
    /// calls); reopen() undoes it when destroy() gives up.
    void close() { check(upcxx_extra_nvshmem_engine_close(h_.get()), "nvshmem_heap::destroy"); }
    void reopen() { check(upcxx_extra_nvshmem_engine_reopen(h_.get()), "nvshmem_heap::destroy"); }

    /// Closes the engine, waits until every fast copy issued so far has landed and releases the
    /// stream and the events. Each copy's completion then runs at its initiator persona's next
    /// user-level progress, if it comes. Returns what went wrong ("" when nothing): copies failed
    /// that will be reported, not redone.
    std::string drain() {
        std::uint64_t unredone = 0;
        check(upcxx_extra_nvshmem_engine_drain(h_.get(), &unredone), "nvshmem_heap::destroy");
        if (unredone == 0) return std::string();
        return "nvshmem_heap: " + std::to_string(unredone) +
               " fast copy(ies) failed after they were issued and could not be redone (their initiator persona "
               "made no progress before destroy()); their completions do not mean the bytes landed";
    }

    /// The first fast copy that failed after it was issued since the last call ("" when none).
    std::string take_error() {
        const upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_engine_take_error(h_.get());
        if (s == UPCXX_EXTRA_NVSHMEM_STATUS_OK) return std::string();
        // CUDA_ERROR: a copy failed, its text is the last error; anything else is the call's own failure.
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR) throw engine_error(s, "nvshmem_heap::check_copies");
        std::string e = upcxx_extra_nvshmem_last_error();
        const std::string prefix = "upcxx_extra_nvshmem_engine_take_error: ";
        if (e.compare(0, prefix.size(), prefix) == 0) e.erase(0, prefix.size());
        return "nvshmem_heap: " + e;
    }

    /// The host waits for every fast copy issued so far; their outcomes are known from here on
    /// (destroy(), before the progress that completes, and redoes, this persona's copies; a
    /// completion that cannot stay queued). Throws nvshmem_error (errc forked in a fork() child).
    void wait_all() { check(upcxx_extra_nvshmem_engine_wait_all(h_.get()), "nvshmem_heap::destroy"); }

private:
    using handle = c_handle<upcxx_extra_nvshmem_engine_t, upcxx_extra_nvshmem_engine_free>;

    static handle make(int device, const copy_policy &policy) {
        upcxx_extra_nvshmem_engine_t *e = nullptr;
        const upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_engine_new(device, policy.batch_bytes, &e);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw engine_error(s, "nvshmem_heap");
        return handle(e);
    }
    static void check(upcxx_extra_nvshmem_status_t s, const char *fn) {
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw engine_error(s, fn);
    }

    static upcxx_extra_nvshmem_engine_copy_t describe(const flight &f) {
        upcxx_extra_nvshmem_engine_copy_t c{};
        c.bytes = f.bytes;
        c.src_rank = f.rank_s;
        c.dst_rank = f.rank_d;
        return c;
    }

    // How the copy of `f` ended (upcxx_extra_nvshmem_engine_poll_t): landed, a CUresult, or not_ready.
    int outcome(flight &f) {
        int r = unknown;
        // OK; FORKED (a fork() child running a completion the parent queued: nothing reaches
        // CUDA and `r` is not written, so the copy ends as failed, unknown, and is reported, not
        // redone: complete() is refused FORKED too); NULL_ARGUMENT cannot come. A completion
        // LPC throws nothing, so the status is not used further.
        if (upcxx_extra_nvshmem_engine_poll(h_.get(), f.ticket, &f.asked, &r) != UPCXX_EXTRA_NVSHMEM_STATUS_OK)
            r = unknown;
        return r;
    }

    // Internal-level progress, a copy that owes a remote completion failed (`r`): settled (the
    // failure kept for check_copies()), then issued again on the heap's stream, once, so that
    // its remote completion still goes from internal-level progress (upcxx::discharge() waits
    // for it; a redo through upcxx::copy would wait for user-level progress). False when it
    // cannot be (the engine is closed, or the copy is refused): the user-level redo follows.
    bool reissue(flight &f, int r) {
        upcxx_extra_nvshmem_engine_copy_t c = *f.issued;  // set by start() for every internal copy
        upcxx_extra_nvshmem_engine_settled_t settled = UPCXX_EXTRA_NVSHMEM_ENGINE_SETTLED_REPORT;
        fallbacks_in_flight_->fetch_add(1);  // as complete(): counted before the engine is asked
        // `settled` is written on OK only: any other status leaves REPORT (see settle()).
        settle(f.ticket, r, &c, settled);
        f.reissued = true;
        f.settled = settled == UPCXX_EXTRA_NVSHMEM_ENGINE_SETTLED_REDO ? 1 : 2;
        if (f.settled == 2) {
            fallbacks_in_flight_->fetch_sub(1);
            return false;
        }
        // On the heap's stream, after the failed copy (a copy_on_stream's stream has run its later
        // work without the bytes, as check_copies() then says).
        c.flags &= std::uint32_t(UPCXX_EXTRA_NVSHMEM_ENGINE_FLAG_DEVICE_ENDS);
        std::uint64_t t = 0;
        // Any status but OK (CUDA_ERROR, ENGINE_CLOSED, FORKED): settled REDO, still counted, so
        // the user-level redo through upcxx::copy follows; its text stays for check_copies().
        if (upcxx_extra_nvshmem_engine_copy(h_.get(), &c, &t) != UPCXX_EXTRA_NVSHMEM_STATUS_OK) return false;
        fallbacks_in_flight_->fetch_sub(1);  // the engine's copy now: drain() waits for it
        f.settled = 0;
        f.ticket = t;
        f.asked = 0;
        return true;
    }

    // On the initiator: the copy of `f` is over (`r`): a failure is recorded for check_copies()
    // and, while the engine is open, redone (finish() with `redo`; the redo is counted in
    // fallbacks_in_flight() before the engine is asked, so a destroy() that closed the engine
    // meanwhile waits for it).
    void complete(flight *raw, int r) {
        std::unique_ptr<flight> f(raw);
        bool redo = false;
        if (f->settled != 0) {  // settled by reissue(), which could not issue it again
            redo = f->settled == 1;
        } else if (r != landed) {
            fallbacks_in_flight_->fetch_add(1);
            const upcxx_extra_nvshmem_engine_copy_t c = describe(*f);
            upcxx_extra_nvshmem_engine_settled_t settled = UPCXX_EXTRA_NVSHMEM_ENGINE_SETTLED_REPORT;
            settle(f->ticket, r, &c, settled);
            redo = settled == UPCXX_EXTRA_NVSHMEM_ENGINE_SETTLED_REDO;
            if (!redo) fallbacks_in_flight_->fetch_sub(1);
        } else {
            upcxx_extra_nvshmem_engine_settled_t settled = UPCXX_EXTRA_NVSHMEM_ENGINE_SETTLED_LANDED;
            settle(f->ticket, landed, nullptr, settled);  // a landed copy has nothing to redo or report
        }
        flight &ref = *f;
        ref.finish(std::move(f), r, redo ? fallbacks_in_flight_ : nullptr);
    }

    // Settles `ticket` (upcxx_extra_nvshmem_engine_complete) from a completion LPC, which throws
    // nothing: `settled` is written only on OK, so the caller's initial value (REPORT for a
    // failure: reported, not redone) is the fallback. INVALID_ARGUMENT cannot come (each flight
    // settles its ticket once, and never with a NOT_READY result: operator() completes only what
    // is over); FORKED (a fork() child running the parent's completion) takes the fallback, as
    // nothing of CUDA can redo the copy there; NULL_ARGUMENT cannot come (h_, &settled not NULL).
    void settle(std::uint64_t ticket, int r, const upcxx_extra_nvshmem_engine_copy_t *c,
                upcxx_extra_nvshmem_engine_settled_t &settled) noexcept {
        upcxx_extra_nvshmem_engine_settled_t s = settled;
        if (upcxx_extra_nvshmem_engine_complete(h_.get(), ticket, r, c, &s) == UPCXX_EXTRA_NVSHMEM_STATUS_OK)
            settled = s;
    }

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
            if (f->ticket == 0) {  // never issued (start() threw): nothing to notify
                delete f;
                return;
            }
            int r = f->settled != 0 ? unknown : self->outcome(*f);
            if (r != landed && r != not_ready && f->internal && !user && !f->reissued && self->reissue(*f, r))
                r = not_ready;  // issued again: polled here, at internal level, once more
            if (r == landed || (r != not_ready && (user || !f->internal))) {
                f->in_internal = f->internal && !user;
                return self->complete(f, r);
            }
            // A wait the stream has not reached: the engine's watcher thread queues this poll
            // again once it has, so progress does not poll it meanwhile.
            if (r == not_ready && f->wait && self->park(*this)) return;
            try {
                // A failed copy is redone through upcxx::copy at user level, never in internal
                // progress (there it is only issued again by the engine, once: reissue()).
                poll{self, f, user || r != not_ready}.queue();
            } catch (...) {  // cannot stay queued: wait here for the copy instead
                // OK, or FORKED (a fork() child: nothing reaches CUDA, so the copy is reported
                // failed, unknown, as outcome() would say); NULL_ARGUMENT cannot come. Nothing may
                // throw here.
                const bool waited =
                    upcxx_extra_nvshmem_engine_wait_all(self->h_.get()) == UPCXX_EXTRA_NVSHMEM_STATUS_OK;
                self->complete(f, f->settled != 0 || !waited ? unknown : self->outcome(*f));
            }
        }
    };
    // A poll parked with the engine's watcher, and the persona to queue it on when its wait is over.
    struct parked {
        poll p;
        upcxx::persona *on;
    };
    // The watcher's wake (upcxx_extra_nvshmem_engine_wake_t), on the watcher's thread: queues the
    // poll on its persona (UPC++ allows lpc_ff from any thread, in seq mode too). The poll is
    // moved into the LPC first, so `pk`'s end drops no reference to the engine on this thread.
    static bool wake(void *ctx) noexcept {
        parked *pk = static_cast<parked *>(ctx);
        try {
            pk->on->lpc_ff(std::move(pk->p));
        } catch (...) {  // cannot be queued now (no memory): the watcher calls again later
            return false;
        }
        delete pk;
        return true;
    }
    // Parks poll `p` (user level, of a wait) with the engine's watcher, on the calling persona:
    // false when it is not (no memory; the engine refuses: a ticket settled, the thread cannot
    // start, a fork() child), and the poll is queued again as before.
    bool park(const poll &p) noexcept {
        parked *pk = new (std::nothrow) parked{p, &upcxx::current_persona()};
        if (!pk) return false;
        if (upcxx_extra_nvshmem_engine_park(h_.get(), p.f->ticket, &copy_engine::wake, pk) !=
            UPCXX_EXTRA_NVSHMEM_STATUS_OK) {
            delete pk;
            return false;
        }
        return true;
    }

    // The poll results the engine names (upcxx_extra_nvshmem_engine_poll_t); any other is a CUresult.
    static constexpr int landed = UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_LANDED;        // CUDA_SUCCESS
    static constexpr int not_ready = UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_NOT_READY;  // CUDA_ERROR_NOT_READY
    static constexpr int unknown = UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_UNKNOWN;      // CUDA_ERROR_UNKNOWN

    const handle h_;
    const bool force_fallback_;
    std::atomic<std::size_t> fallback_{0};
    const std::shared_ptr<std::atomic<long>> fallbacks_in_flight_ = std::make_shared<std::atomic<long>>(0);
};

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_COPY_ENGINE_HPP
