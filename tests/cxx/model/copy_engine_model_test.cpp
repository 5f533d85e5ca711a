// The copy engine's completions, marks and lifetimes (include/upcxx_extra/nvshmem/copy_engine.hpp) with
// CUDA and UPC++'s personas replaced by the stand-ins in this folder: no GPU and no UPC++, so
// copies land exactly when the test says, which a GPU run cannot arrange. Built with
// ThreadSanitizer by the test driver. The real engine on GPUs: copy_semantics_test.
//   M1 a flood: 5 copies issued without waiting, none completed inside the call; 3 landed: one
//      progress completes the first (a copy issued while no mark is pending has an event of its
//      own) and none of the others (they share the event a completion records); all 5, in
//      issue order, once landed
//   M2 drain() returns once every copy landed, not before, and runs no completion; each is then
//      queued on its initiator persona and runs at its next progress
//   M3 4 threads (personas) x 8 copies landing at random; the last owner of the engine is a
//      copy's completion, so the engine is destroyed inside it: every completion runs once, on
//      its initiator, with cudaSuccess, and the engine is freed (an event queried after it was
//      destroyed traps)
//   M4 nothing is posted to a persona by a thread that does not hold it (in real UPC++ such a
//      post can come after upcxx::finalize(), which aborts in its debug codemode): no waiter
//      thread posts completions, in M1-M3 and in a copy left in flight for 50 ms
//   M5 copy_after's stream: stream 0 (the legacy default stream) is a stream to order after,
//      not "no stream"; stream_order::none() orders after nothing
//   M6 cudaEventRecord fails for the event that would tell a copy landed: the copy is reported
//      issued (no throw), completes with cudaSuccess (the host waits for the stream instead), and
//      is counted as a fast copy
//   M8 a flood of 100 copies completes with a handful of event queries (one event, recorded by
//      the poll, covers every copy issued before it)
//   M9 batching: 300 small copies with heap memory at both ends are 3 kernel launches (two full
//      batches of UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX at issue, the rest at the first progress),
//      counted batched, completed in issue order; a large copy, a copy ordered after a stream
//      and a copy with a non-heap end are cudaMemcpyAsync after the batch (stream order kept)
//   M10 the batch kernel cannot be launched: the batch's copies are cudaMemcpyAsync instead and
//      complete with cudaSuccess, batching is off from then on, check_copies() says why
//   M7 fork(): a child of a process with copies in flight drops its engine without hanging, and a
//      copy it starts throws nvshmem_error (errc forked) naming fork()
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "upcxx_extra/nvshmem/copy_engine.hpp"
#include "check.hpp"

// The engine's internal-level queue (upcxx_internals.hpp in the library): the model's personas
// have one inbox.
template <class Fn>
void upcxx::extra::detail::queue_internal(upcxx::persona &p, Fn &&fn) {
    p.lpc_ff(std::forward<Fn>(fn));
}

using upcxx::extra::detail::copy_engine;
using upcxx::extra::detail::copy_policy;
using upcxx::extra::detail::flight;
using upcxx::extra::detail::stream_order;
using clk = std::chrono::steady_clock;

namespace {

struct counted_flight : flight {
    std::atomic<int> *done;
    upcxx::persona *expected = &upcxx::current_persona();
    std::atomic<int> *wrong;  // completions on another persona or with an error
    std::vector<int> *order;  // the completions' ids, in completion order (single-persona tests)
    int id;
    counted_flight(std::atomic<int> *d, std::atomic<int> *w, std::vector<int> *o, int i)
        : done(d), wrong(w), order(o), id(i) {}
    void finish(std::unique_ptr<flight>, cudaError_t e, std::shared_ptr<std::atomic<long>>) override {
        if (e != cudaSuccess || &upcxx::current_persona() != expected) ++*wrong;
        if (order) order->push_back(id);
        ++*done;
    }
};

// Starts one copy on `eng` from the current persona; returns its sequence number on the stream.
// `bytes` and `heap_ends` (both ends heap memory) decide whether it may be batched.
std::uint64_t copy_async(copy_engine &eng, std::atomic<int> &done, std::atomic<int> &wrong,
                         std::vector<int> *order = nullptr, int id = 0, stream_order after = stream_order::none(),
                         std::size_t bytes = std::size_t(1) << 30, bool heap_ends = false) {
    auto f = std::make_unique<counted_flight>(&done, &wrong, order, id);
    f->bytes = bytes;
    eng.start(std::move(f), nullptr, nullptr, after, heap_ends);
    return uxn_model::issued().load();
}

// Progress on `p` until `cond` or `limit`; returns whether `cond` held.
template <class C>
bool progress_until(upcxx::persona &p, C cond, std::chrono::milliseconds limit = std::chrono::milliseconds(2000)) {
    const auto end = clk::now() + limit;
    while (!cond() && clk::now() < end) {
        upcxx::persona_scope s(p);
        p.progress();
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return cond();
}

void land_all() { uxn_model::landed() = uxn_model::issued().load(); }

void m1_flood() {
    auto eng = std::make_shared<copy_engine>(0, copy_policy{});
    upcxx::persona a;
    std::atomic<int> done{0}, wrong{0};
    std::vector<int> order;
    std::uint64_t third = 0;
    {
        upcxx::persona_scope s(a);
        for (int i = 0; i < 5; i++) {
            const std::uint64_t seq = copy_async(*eng, done, wrong, &order, i);
            if (i == 2) third = seq;
        }
    }
    CHECK(done.load() == 0, "M1: no copy of a flood completes inside the call (%d did)", done.load());
    uxn_model::landed() = third;
    {
        upcxx::persona_scope s(a);
        a.progress();
    }
    // The first copy has an event of its own; the 4 issued after it share the one the first poll
    // records: of the 3 landed, exactly the first is known to have landed.
    CHECK(done.load() == 1 && order == std::vector<int>({0}),
          "M1: one progress completes the first copy of 5 (its own event), no copy not known to have landed (%d "
          "completed)",
          done.load());
    land_all();
    bool all = progress_until(a, [&] { return done.load() == 5; });
    CHECK(all && order == std::vector<int>({0, 1, 2, 3, 4}) && wrong.load() == 0,
          "M1: the other 2 complete once they landed, in order (%d completed, %d wrong)", done.load(), wrong.load());
    CHECK(eng->counts().fast == 5, "M1: 5 fast copies counted (%zu)", eng->counts().fast);
}

void m2_drain() {
    auto eng = std::make_shared<copy_engine>(0, copy_policy{});
    upcxx::persona a;
    std::atomic<int> done{0}, wrong{0};
    {
        upcxx::persona_scope s(a);
        for (int i = 0; i < 3; i++) copy_async(*eng, done, wrong);
        a.progress();  // each copy's completion finds nothing landed and stays queued
    }
    const auto landing = std::chrono::milliseconds(50);
    const auto t0 = clk::now();
    std::thread gpu([&] {
        std::this_thread::sleep_for(landing);
        land_all();
    });
    std::string err = eng->drain();
    const auto took = clk::now() - t0;
    gpu.join();
    std::size_t queued;
    {
        std::lock_guard<std::mutex> lock(a.mu);
        queued = a.inbox.size();
    }
    CHECK(
        err.empty() && took >= landing && queued == 3 && done.load() == 0,
        "M2: drain() returned after %lld ms (the copies land after %lld ms), each copy's completion queued (%zu LPCs), "
        "no completion run (%d ran)%s%s",
        static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
        static_cast<long long>(landing.count()), queued, done.load(), err.empty() ? "" : ": ", err.c_str());
    {
        upcxx::persona_scope s(a);
        a.progress();
    }
    CHECK(done.load() == 3 && wrong.load() == 0, "M2: the 3 completions run at the persona's next progress (%d ran)",
          done.load());
    CHECK(!eng->open(), "M2: a drained engine redoes no failed copy");
}

void m3_stress(int rounds) {
    std::atomic<bool> stop{false};
    std::thread gpu([&] {  // lands the copies one by one, 0-250 us apart
        std::mt19937 r(1);
        while (!stop.load()) {
            if (uxn_model::landed().load() < uxn_model::issued().load()) {
                std::this_thread::sleep_for(std::chrono::microseconds(r() % 250));
                uxn_model::landed()++;
            } else {
                std::this_thread::yield();
            }
        }
    });
    const int threads = 4, copies = 8;
    int leaked = 0, miscounted = 0;
    std::atomic<int> wrong{0};
    for (int round = 0; round < rounds; ++round) {
        auto eng = std::make_shared<copy_engine>(0, copy_policy{});
        std::weak_ptr<copy_engine> weak = eng;
        std::atomic<int> issued_all{0}, total{0};
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
            ts.emplace_back([&, e = eng]() mutable {
                std::atomic<int> mine{0};
                for (int i = 0; i < copies; ++i) {
                    copy_async(*e, mine, wrong);
                    upcxx::current_persona().progress();
                }
                e.reset();  // from here on the lanes' polls own the engine
                issued_all++;
                while (mine.load() < copies) upcxx::current_persona().progress();
                total += mine.load();
            });
        while (issued_all.load() < threads) std::this_thread::yield();
        eng->drain();
        eng.reset();  // the heap lets go: a completion's poll ends the engine
        for (auto &t : ts) t.join();
        if (!weak.expired()) leaked++;
        if (total.load() != threads * copies) miscounted++;
    }
    stop = true;
    gpu.join();
    CHECK(leaked == 0 && miscounted == 0 && wrong.load() == 0,
          "M3: %d rounds of %d threads x %d copies: %d engines left alive, %d rounds with a completion missing or "
          "run twice, %d completions on another persona or with an error (%ld event queries)",
          rounds, threads, copies, leaked, miscounted, wrong.load(), uxn_model::queries().load());
}

void m4_no_foreign_posts() {
    auto eng = std::make_shared<copy_engine>(0, copy_policy{});
    upcxx::persona a;
    std::atomic<int> done{0}, wrong{0};
    {
        upcxx::persona_scope s(a);
        copy_async(*eng, done, wrong);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // in flight, its persona idle
    land_all();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(upcxx::foreign_posts().load() == 0,
          "M4: no LPC posted to a persona by a thread not holding it (%d posted, in M1-M4)",
          upcxx::foreign_posts().load());
    bool ok = progress_until(a, [&] { return done.load() == 1; });
    CHECK(ok, "M4: the copy completes at its persona's progress");
}

void m5_stream_zero() {
    auto eng = std::make_shared<copy_engine>(0, copy_policy{});
    upcxx::persona a;
    std::atomic<int> done{0}, wrong{0};
    upcxx::persona_scope s(a);
    const int w0 = uxn_model::stream_waits().load();
    copy_async(*eng, done, wrong, nullptr, 0, stream_order::none());
    CHECK(uxn_model::stream_waits().load() == w0, "M5: a plain copy waits for no stream");
    uxn_model::waited_stream() = reinterpret_cast<CUstream_st *>(&a);  // not a stream the copy uses
    copy_async(*eng, done, wrong, nullptr, 0, stream_order::after(nullptr));
    CHECK(uxn_model::stream_waits().load() == w0 + 1 && uxn_model::waited_stream().load() == nullptr,
          "M5: copy_after(0, ...) waits for an event recorded on stream 0, the legacy default stream (%d waits)",
          uxn_model::stream_waits().load() - w0);
    land_all();
    bool ok = progress_until(a, [&] { return done.load() == 2; });
    CHECK(ok && wrong.load() == 0, "M5: both copies complete");
}

void m6_record_fails() {
    auto eng = std::make_shared<copy_engine>(0, copy_policy{});
    upcxx::persona a;
    std::atomic<int> done{0}, wrong{0};
    upcxx::persona_scope s(a);
    std::thread gpu([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        land_all();
    });
    const std::uint64_t before = uxn_model::issued().load();
    uxn_model::fail_records() = 1;
    bool threw = false;
    try {
        copy_async(*eng, done, wrong);
    } catch (const upcxx::extra::nvshmem_error &e) {
        threw = true;
        std::printf("M6: start() threw: %s\n", e.what());
    }
    CHECK(!threw && uxn_model::issued().load() == before + 1, "M6: a copy CUDA accepted is reported issued");
    a.progress();  // the poll's event cannot be recorded: it waits for the stream instead
    gpu.join();
    bool ok = progress_until(a, [&] { return done.load() == 1; });
    CHECK(ok && wrong.load() == 0 && eng->counts().fast == 1 && uxn_model::fail_records().load() == 0,
          "M6: when its event cannot be recorded it completes with cudaSuccess, counted fast (%d done, %d wrong)",
          done.load(), wrong.load());
}

void m8_marks() {
    auto eng = std::make_shared<copy_engine>(0, copy_policy{});
    upcxx::persona a;
    std::atomic<int> done{0}, wrong{0};
    upcxx::persona_scope s(a);
    const long q0 = uxn_model::queries().load();
    for (int i = 0; i < 100; i++) copy_async(*eng, done, wrong);
    a.progress();
    land_all();
    bool ok = progress_until(a, [&] { return done.load() == 100; });
    const long queries = uxn_model::queries().load() - q0;
    CHECK(ok && wrong.load() == 0 && queries <= 4,
          "M8: a flood of 100 copies completes with %ld event queries (one event covers them all)", queries);
}

void m9_batching() {
    auto eng = std::make_shared<copy_engine>(0, copy_policy{});
    upcxx::persona a;
    std::atomic<int> done{0}, wrong{0};
    std::vector<int> order;
    upcxx::persona_scope s(a);
    const long l0 = uxn_model::batch_launches().load();
    const std::uint64_t i0 = uxn_model::issued().load();
    for (int i = 0; i < 300; i++) copy_async(*eng, done, wrong, &order, i, stream_order::none(), 8, true);
    const long at_issue = uxn_model::batch_launches().load() - l0;
    CHECK(at_issue == 2 && uxn_model::issued().load() - i0 == 256,
          "M9: 300 batched copies: %ld launches of %d copies at issue, the rest waits for progress", at_issue,
          (int)UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX);
    a.progress();  // the first completion puts the rest on the stream, then records its mark
    CHECK(uxn_model::batch_launches().load() - l0 == 3 && uxn_model::issued().load() - i0 == 300,
          "M9: the first progress launches the last batch (%ld launches)", uxn_model::batch_launches().load() - l0);
    // Not batched: too large, ordered after a stream, an end outside the heap. Each goes after
    // the batch (the model's stream counts every copy in stream order).
    cudaStream_t user = nullptr;
    copy_async(*eng, done, wrong, &order, 300, stream_order::none(), copy_policy::default_batch_bytes + 1, true);
    copy_async(*eng, done, wrong, &order, 301, stream_order::after(user), 8, true);
    copy_async(*eng, done, wrong, &order, 302, stream_order::none(), 8, false);
    copy_async(*eng, done, wrong, &order, 303, stream_order::none(), 8, true);  // a new batch
    CHECK(uxn_model::issued().load() - i0 == 303 && uxn_model::batch_launches().load() - l0 == 3,
          "M9: a large copy, copy_after and a non-heap end are cudaMemcpyAsync (%llu on the stream)",
          (unsigned long long)(uxn_model::issued().load() - i0));
    land_all();
    bool ok = progress_until(a, [&] {
        land_all();
        return done.load() == 304;
    });
    bool in_order = order.size() == 304;
    for (std::size_t i = 0; in_order && i < order.size(); i++) in_order = order[i] == (int)i;
    CHECK(ok && wrong.load() == 0 && in_order && eng->counts().fast == 304 && eng->counts().batched == 301,
          "M9: every copy completes once, in issue order, %zu of %zu fast copies counted batched (%d done)",
          eng->counts().batched, eng->counts().fast, done.load());
}

void m10_batch_refused() {
    auto eng = std::make_shared<copy_engine>(0, copy_policy{});
    upcxx::persona a;
    std::atomic<int> done{0}, wrong{0};
    upcxx::persona_scope s(a);
    uxn_model::fail_batches() = 1;
    const std::uint64_t i0 = uxn_model::issued().load();
    for (int i = 0; i < 10; i++) copy_async(*eng, done, wrong, nullptr, i, stream_order::none(), 64, true);
    a.progress();
    CHECK(uxn_model::issued().load() - i0 == 10, "M10: a batch whose kernel cannot launch is 10 cudaMemcpyAsync");
    for (int i = 0; i < 5; i++) copy_async(*eng, done, wrong, nullptr, i, stream_order::none(), 64, true);
    CHECK(uxn_model::issued().load() - i0 == 15, "M10: batching is off from then on (copies issued at once)");
    land_all();
    bool ok = progress_until(a, [&] { return done.load() == 15; });
    const std::string why = eng->take_error();
    CHECK(ok && wrong.load() == 0 && eng->counts().batched == 0 && why.find("batching is off") != std::string::npos &&
              why.find("model: no kernel") != std::string::npos,
          "M10: every copy completes with cudaSuccess; check_copies() names the launch failure: %s", why.c_str());
}

void m7_fork() {
    auto eng = std::make_shared<copy_engine>(0, copy_policy{});
    std::atomic<int> done{0}, wrong{0};
    for (int i = 0; i < 3; i++) copy_async(*eng, done, wrong);  // in flight at fork()
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
        int code = 0;
        try {
            copy_async(*eng, done, wrong);
            code = 2;  // started a copy with the parent's CUDA objects
        } catch (const upcxx::extra::nvshmem_error &e) {
            if (e.errc() != upcxx::extra::nvshmem_errc::forked || !std::strstr(e.what(), "fork()")) code = 3;
        }
        (void)eng->drain();
        eng.reset();
        _exit(code);
    }
    int status = -1;
    const auto end = clk::now() + std::chrono::seconds(5);
    pid_t got = 0;
    while ((got = waitpid(child, &status, WNOHANG)) == 0 && clk::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (got == 0) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
    }
    CHECK(got == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "M7: a fork() child with copies in flight: its copy throws errc forked and its engine drops without "
          "hanging (%s, exit %d)",
          got == 0 ? "HUNG, killed after 5 s" : "exited", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    land_all();
    bool ok = progress_until(upcxx::current_persona(), [&] { return done.load() == 3; });
    CHECK(ok && wrong.load() == 0, "M7: the parent's copies complete");
}

}  // namespace

int main(int argc, char **argv) {
    m7_fork();  // first: the child must not inherit the threads of the tests below
    m1_flood();
    m2_drain();
    m3_stress(argc > 1 ? std::atoi(argv[1]) : 100);
    m4_no_foreign_posts();
    m5_stream_zero();
    m6_record_fails();
    m8_marks();
    m9_batching();
    m10_batch_refused();
    return uxn_check::finish("copy_engine_model_test");
}
