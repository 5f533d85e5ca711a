// copy_semantics_test, batched small copies, and batch launches that fail.
// Part of copy_semantics_test.cpp, which includes every file of semantics/ into one translation unit
// (one compile of UPC++ and the layer) and runs the groups; the helpers are common.hpp's.
//
//   F16 batching: 2 x 300 small copies (1 B to 64 KiB + 3, odd offsets and lengths) put to the
//      next PE's heap and got from it, issued without waiting, with futures and a promise: every
//      byte right at the destination, each completion once, all counted fast and, unless
//      UPCXX_EXTRA_NVSHMEM_COPY=unbatched, batched (on the CUDA stand-in: far fewer kernel
//      launches than copies). Naive: a batch launched with the wrong descriptors (offsets,
//      lengths, unaligned tails), completions fired before the batch ran, or a batch that waits
//      for progress that never comes.
//   F20 (stand-in) a batch launch that CUDA refuses at the call: the batch's copies still land, the
//      heap stops batching and copy_batch_bytes() says 0, check_copies() names it once. Naive:
//      copy_batch_bytes() still reporting the knob's value.
//   F21 (stand-in, par) an asynchronous failure of a batch launch (its copies redone), then a thread
//      issues 4 good batched copies and exits without progress: destroy() succeeds on every rank.
//      Naive: a synchronize that reports the old failure again, blamed on every unsettled copy.
#ifndef UXN_SEMANTICS_BATCHING_HPP
#define UXN_SEMANTICS_BATCHING_HPP

#include "common.hpp"

// F16: batched small copies.
static void f16_batching(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    constexpr std::size_t W = 300, slot = 65536 + 64;  // every copy has its own slot
    const std::size_t sizes[] = {1, 8, 13, 64, 255, 4096, 4099, 65536 + 3};
    const std::size_t n_sizes = sizeof(sizes) / sizeof(sizes[0]);
    auto size_of = [&](std::size_t i) { return sizes[i % n_sizes]; };
    auto src_off = [&](std::size_t i) { return i * slot + i % 3; };
    auto dst_off = [&](std::size_t i) { return i * slot + i % 5; };
    const std::size_t region = W * slot;  // b: puts land in [0, region), gets in [region, 2 region)
    const int salt = 16;
    fill(a, region, me, salt);
    cudaMemset(b, 0, 2 * region);
    cudaDeviceSynchronize();
    barrier();
    const char *knob = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY");
    const char *bytes_knob = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES");
    // The copies the policy batches (docs/copy.md: at most UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES).
    const std::size_t limit =
        bytes_knob ? std::strtoull(bytes_knob, nullptr, 10) : upcxx::extra::detail::copy_policy::default_batch_bytes;
    const bool batching = mapped && !forced && !(knob && std::string(knob) == "unbatched") && limit > 0;
    std::size_t expect_batched = 0;
    for (std::size_t i = 0; batching && i < W; i++) expect_batched += size_of(i) <= limit ? 2 : 0;
    using launches_fn = long (*)();
    const auto launches = reinterpret_cast<launches_fn>(dlsym(RTLD_DEFAULT, "uxn_standin_batch_launches"));
    const long l0 = launches ? launches() : 0;
    const auto c0 = heap.copies();
    const dptr ga = heap.to_global_ptr(a), ga_next = heap.to_global_ptr(a, next);
    const dptr gb = heap.to_global_ptr(b), gb_next = heap.to_global_ptr(b, next);
    std::vector<upcxx::future<>> futures;
    upcxx::promise<> all;
    for (std::size_t i = 0; i < W; i++) {
        if (i % 2)
            futures.push_back(heap.copy(ga + src_off(i), gb_next + dst_off(i), size_of(i)));
        else
            heap.copy(ga + src_off(i), gb_next + dst_off(i), size_of(i), upcxx::operation_cx::as_promise(all));
        futures.push_back(heap.copy(ga_next + src_off(i), gb + region + dst_off(i), size_of(i)));
    }
    bool complete = waited("F16.complete", all.finalize(), "the promise of 150 puts");
    for (auto &f : futures) complete = complete && waited("F16.complete", f, "a future of a batched copy");
    const auto c1 = heap.copies();
    const long l1 = launches ? launches() : 0;
    barrier();  // the next PE's puts into my b have completed
    std::vector<unsigned char> got(2 * region);
    cudaMemcpy(got.data(), b, 2 * region, cudaMemcpyDefault);
    long wrong_put = 0, wrong_get = 0;
    for (std::size_t i = 0; i < W; i++)
        for (std::size_t j = 0; j < size_of(i); j++) {
            wrong_put += got[dst_off(i) + j] != copy_test::pattern(prev, src_off(i) + j, salt);
            wrong_get += got[region + dst_off(i) + j] != copy_test::pattern(next, src_off(i) + j, salt);
        }
    check("F16.bytes", complete && wrong_put == 0 && wrong_get == 0,
          "%zu puts and %zu gets of 1 B to 64 KiB + 3 at odd offsets: %ld wrong bytes put here, %ld got", W, W,
          wrong_put, wrong_get);
    if (!mapped || forced) {
        path_is("F16.path", c0, 0, 2 * W, "600 small copies");
    } else {
        check("F16.path", c1.fast - c0.fast == 2 * W && c1.batched - c0.batched == expect_batched,
              "600 small copies: %zu fast, %zu of them batched (expected %zu, batching %s)", c1.fast - c0.fast,
              c1.batched - c0.batched, expect_batched, batching ? "on" : "off");
    }
    // set_copy_batch_bytes(0): the next small copy is not batched; then the old limit again.
    const std::size_t keep = heap.copy_batch_bytes();
    const std::size_t policy_limit = knob && std::string(knob) == "unbatched" ? 0 : limit;
    check("F16.batch_bytes", keep == policy_limit, "copy_batch_bytes() is %zu (the environment's %zu)", keep,
          policy_limit);
    heap.set_copy_batch_bytes(0);
    const auto c2 = heap.copies();
    bool one = waited("F16.set_batch_bytes", heap.copy(ga, gb_next, 8), "an 8-byte copy with batching set off");
    const auto c3 = heap.copies();
    heap.set_copy_batch_bytes(keep);
    check("F16.set_batch_bytes", one && c3.batched == c2.batched && heap.copy_batch_bytes() == keep,
          "after set_copy_batch_bytes(0) an 8-byte copy is not batched (%zu batched), the limit restored (%zu)",
          c3.batched - c2.batched, heap.copy_batch_bytes());
    if (launches)
        check("F16.launches", expect_batched ? (l1 - l0 >= 1 && l1 - l0 <= 8) : l1 == l0,
              "the CUDA stand-in ran %ld batch kernel launches for 600 copies (batching %s)", l1 - l0,
              batching ? "on: 1 to 8" : "off: none");
    barrier();
}

// =================================================================================================
// F20, F21: failed batch launches (the CUDA stand-in's controls).
// The stand-in's failure control `name` (standin_control.h) when batched fast copies run here;
// else nullptr, and group `group` says it is skipped.
static standin_fail_fn batched_standin_control(const char *group, const char *name) {
    const standin_fail_fn fn = standin_fail_control(name);
    const char *knob = std::getenv("UPCXX_EXTRA_NVSHMEM_COPY");
    if (fn && mapped && !forced && !(knob && std::string(knob) == "unbatched")) return fn;
    skip(group, "needs the CUDA stand-in's failure controls and batched fast copies");
    return nullptr;
}

static void f20_refused_launch(unsigned char *a, unsigned char *b) {
    const standin_fail_fn fail_launches = batched_standin_control("F20", "uxn_standin_fail_next_launches");
    if (!fail_launches) return;
    nvshmem_heap heap;
    g_heap = &heap;
    const int salt = 200;
    prepare(a, b, small, salt);
    const std::size_t limit = heap.copy_batch_bytes();
    fail_launches(1);
    std::vector<upcxx::future<>> fs;
    for (std::size_t i = 0; i < 16; i++)
        fs.push_back(heap.copy(heap.to_global_ptr(a + i * 256), heap.to_global_ptr(b + i * 256, next), 256));
    bool ok = true;
    for (auto &f : fs) ok = waited("F20.complete", f, "a copy of the refused batch") && ok;
    barrier();
    check("F20.bytes", ok && count_wrong(b, 16 * 256, prev, salt) == 0, "the refused batch's 16 copies landed");
    check("F20.batch_bytes", limit > 0 && heap.copy_batch_bytes() == 0,
          "copy_batch_bytes() was %zu, is %zu once the launch was refused (batching off)", limit,
          heap.copy_batch_bytes());
    std::string said;
    try {
        heap.check_copies();
    } catch (const heap_error &e) {
        said = e.what();
    }
    check("F20.check_copies", said.find("batching is off") != std::string::npos, "check_copies(): %s",
          said.empty() ? "(nothing)" : said.c_str());
    const auto c0 = heap.copies();
    ok = waited("F20.after", heap.copy(heap.to_global_ptr(a), heap.to_global_ptr(b, next), 64), "a copy after");
    check("F20.after", ok && heap.copies().batched == c0.batched, "a small copy after it is not batched");
    barrier();
    heap.destroy();
    g_heap = nullptr;
}

static void f21_failed_launch_then_thread(unsigned char *a, unsigned char *b) {
#if UPCXX_THREADMODE
    const standin_fail_fn fail_copies = batched_standin_control("F21", "uxn_standin_fail_next_copies");
    if (!fail_copies) return;
    nvshmem_heap heap;
    g_heap = &heap;
    const int salt = 210;
    prepare(a, b, small, salt);
    bool ok = true;
    if (me == 0) {
        fail_copies(1);  // the batch's launch fails when it runs
        ok = waited("F21.redone", heap.copy(heap.to_global_ptr(a), heap.to_global_ptr(b, 1), 512), "the failed batch");
        try {
            heap.check_copies();
            ok = false;  // the failure must have been seen
        } catch (const heap_error &) {
        }
        std::thread t([&] {
            cudaSetDevice(gpu);
            for (std::size_t i = 1; i <= 4; i++)
                (void)heap.copy(heap.to_global_ptr(a + i * 512), heap.to_global_ptr(b + i * 512, 1), 512);
        });
        t.join();  // its persona makes no progress again; its copies are good
    }
    std::string err;
    try {
        heap.destroy();
    } catch (const std::exception &e) {
        err = e.what();
    }
    g_heap = nullptr;
    check("F21.destroy", ok && err.empty(),
          "a batch failed and redone, then 4 good copies from a thread that exited: destroy() %s",
          err.empty() ? "succeeded" : err.c_str());
    if (me == 1)
        check("F21.bytes", count_wrong(b, 5 * 512, 0, salt) == 0, "the redone copy and the 4 good ones landed");
    barrier();
#else
    (void)a, (void)b;
    skip("F21", "threads issuing copies need the par threadmode");
#endif
}

#endif  // UXN_SEMANTICS_BATCHING_HPP
