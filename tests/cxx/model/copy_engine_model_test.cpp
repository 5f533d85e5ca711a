// The copy engine's threads and lifetimes (include/upcxx_extra/nvshmem/copy_engine.hpp) with CUDA
// and UPC++'s personas replaced by the stand-ins in this folder: no GPU and no UPC++, so copies
// land exactly when the test says, which a GPU run cannot arrange. scripts/test-all.sh builds it
// with ThreadSanitizer. The real engine on GPUs: copy_semantics_test (F1, F4, F7, F8).
//   M1 the waiter thread completes a copy that landed even when a copy handed to it earlier has
//      not (personas may hand copies over out of issue order)
//   M2 drain() returns once every copy landed and the waiter has queued each completion on its
//      initiator persona, not before
//   M3 4 threads (personas) x 8 copies landing at random; the last owner of the engine is a
//      copy's completion, so the engine is destroyed inside it while its waiter runs: every
//      completion runs once, on its initiator, with cudaSuccess, and the engine is freed (an
//      event queried after it was destroyed traps)
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "upcxx_extra/nvshmem/copy_engine.hpp"
#include "check.hpp"

using upcxx::extra::detail::copy_engine;
using upcxx::extra::detail::flight;
using clk = std::chrono::steady_clock;

namespace {

struct counted_flight : flight {
    std::atomic<int> *done;
    upcxx::persona *expected = &upcxx::current_persona();
    std::atomic<int> *wrong;  // completions on another persona or with an error
    counted_flight(std::atomic<int> *d, std::atomic<int> *w) : done(d), wrong(w) {}
    void finish(cudaError_t e, bool) override {
        if (e != cudaSuccess || &upcxx::current_persona() != expected) ++*wrong;
        ++*done;
    }
};

// Issues one copy on `eng` from the current persona and hands it to the engine to complete.
std::uint64_t copy_async(copy_engine &eng, std::atomic<int> &done, std::atomic<int> &wrong) {
    copy_engine::ticket t = eng.issue(nullptr, nullptr, std::size_t(1) << 30, nullptr, "model copy");
    const std::uint64_t seq = uxn_model::issued().load();
    eng.watch(t, std::make_unique<counted_flight>(&done, &wrong), "model copy");
    return seq;
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

void m1_out_of_order() {
    auto eng = std::make_shared<copy_engine>(0, false);
    upcxx::persona a, b;
    std::atomic<int> done_a{0}, done_b{0}, wrong{0};
    std::uint64_t first;
    {
        upcxx::persona_scope s(b);
        first = copy_async(*eng, done_b, wrong);  // issued first: lands first
    }
    {
        upcxx::persona_scope s(a);
        copy_async(*eng, done_a, wrong);
    }
    std::this_thread::sleep_for(copy_engine::poll_window * 2);
    {
        upcxx::persona_scope s(a);
        a.progress();  // past the polling window: the later copy is handed to the waiter first
    }
    {
        upcxx::persona_scope s(b);
        b.progress();  // then the earlier one
    }
    uxn_model::landed() = first;  // only the earlier copy lands
    bool b_done = progress_until(b, [&] { return done_b.load() == 1; });
    CHECK(b_done && done_a.load() == 0,
          "M1: a landed copy handed over after one still in flight completes (earlier copy %s, later copy %s)",
          b_done ? "completed" : "NOT completed in 2 s", done_a.load() ? "completed" : "in flight");
    land_all();
    eng->drain();  // every completion queued on its persona before the personas go
    bool a_done = progress_until(a, [&] { return done_a.load() == 1; });
    b_done = progress_until(b, [&] { return done_b.load() == 1; });
    CHECK(a_done && b_done && wrong.load() == 0, "M1: both copies complete once they landed (%d wrong completions)",
          wrong.load());
}

void m2_drain() {
    auto eng = std::make_shared<copy_engine>(0, false);
    upcxx::persona a;
    std::atomic<int> done{0}, wrong{0};
    {
        upcxx::persona_scope s(a);
        for (int i = 0; i < 3; i++) copy_async(*eng, done, wrong);
    }
    std::this_thread::sleep_for(copy_engine::poll_window * 2);
    {
        upcxx::persona_scope s(a);
        a.progress();  // all three handed to the waiter
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
    CHECK(err.empty() && took >= landing && queued == 3 && done.load() == 0,
          "M2: drain() returned after %lld ms (the copies land after %lld ms) with %zu of 3 completions queued, "
          "none run (%d ran)%s%s",
          static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
          static_cast<long long>(landing.count()), queued, done.load(), err.empty() ? "" : ": ", err.c_str());
    bool all = progress_until(a, [&] { return done.load() == 3; });
    CHECK(all && wrong.load() == 0, "M2: the 3 completions run at the persona's progress (%d ran, %d wrong)",
          done.load(), wrong.load());
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
        auto eng = std::make_shared<copy_engine>(0, false);
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
                e.reset();  // from here on the copies in flight own the engine
                issued_all++;
                while (mine.load() < copies) upcxx::current_persona().progress();
                total += mine.load();
            });
        while (issued_all.load() < threads) std::this_thread::yield();
        eng->drain();
        eng.reset();  // the heap lets go: a completion ends the engine
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

}  // namespace

int main(int argc, char **argv) {
    m1_out_of_order();
    m2_drain();
    m3_stress(argc > 1 ? std::atoi(argv[1]) : 100);
    return uxn_check::finish("copy_engine_model_test");
}
