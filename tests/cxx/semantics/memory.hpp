// copy_semantics_test, where the memory is: the user's own allocator and pointers made before growth, another current
// device, 40 growths. Part of copy_semantics_test.cpp, which includes every file of semantics/ into one translation
// unit (one compile of UPC++ and the layer) and runs the groups; the helpers are common.hpp's.
//
//   F2 a device global_ptr of the user's own allocator on this rank (UPC++ >= 2022.3
//      make_gpu_allocator; skipped on 2020.10 where the heap owns the GPU's only cuda_device)
//      with heap memory: the fast path, counted, bytes right (static and memory_kind::any); a
//      peer's own-allocator pointer: the fallback; a global pointer made BEFORE update() and the
//      heap's growth, copied to and from memory mapped after. Meant for the debug codemode too:
//      global-pointer arithmetic across allocators asserts there.
//   F3 (>= 2 GPUs visible) the calling thread's current device is another GPU than the heap's,
//      from the heap's first copy on: copies right, fast, no error later, the caller's device
//      left as it was.
//   F3 also: copy_after(0, ...) with the other device current is ordered after THAT device's
//      legacy default stream (a host function sleeping 300 ms, then writing the source).
//      Naive: the event recorded on the heap device's legacy stream: the copy reads the old bytes.
//   F6 40 growths (nvshmem_malloc 512 MiB + update(); without CUDA VMM the heap cannot grow: 8 MiB
//      allocations): segments() stays <= 1, no abort, copies into the newest chunk of the next PE
//      right.
#ifndef UXN_SEMANTICS_MEMORY_HPP
#define UXN_SEMANTICS_MEMORY_HPP

#include "common.hpp"

// F2: the user's own device allocator; a global pointer made before update().
static void f2_own_allocator_and_old_pointers(nvshmem_heap &heap, [[maybe_unused]] unsigned char *a,
                                              [[maybe_unused]] unsigned char *b) {
    int salt = 20;
#if HAS_GPU_ALLOCATOR
    {
        const std::size_t n = 2 * MiB;
        auto own = upcxx::make_gpu_allocator<upcxx::cuda_device>(8 * MiB, gpu);  // collective
        dptr mine = own.allocate<unsigned char>(n);
        unsigned char *mine_local = own.local(mine);
        upcxx::dist_object<dptr> d(mine);
        const dptr peer_mine = d.fetch(next).wait();
        const dptr ga = heap.to_global_ptr(a), ga_next = heap.to_global_ptr(a, next),
                   gb_next = heap.to_global_ptr(b, next);

        // heap (next PE's) -> mine (this rank's own device memory): fast.
        fill(a, n, me, ++salt);
        cudaMemset(mine_local, 0, n);
        cudaDeviceSynchronize();
        barrier();
        auto c0 = heap.copies();
        bool ok = waited("F2.own_allocator", heap.copy(ga_next, mine, n), "next's heap -> my own allocator");
        check("F2.own_allocator", ok && count_wrong(mine_local, n, next, salt) == 0,
              "next PE's heap -> this rank's make_gpu_allocator memory: bytes right");
        path_is("F2.own_allocator_path", c0, mapped ? 1 : 0, mapped ? 0 : 1, "heap -> own allocator");
        barrier();
        // mine -> heap (next PE's), as memory_kind::any: fast.
        fill(mine_local, n, me, ++salt);
        cudaMemset(b, 0, n);
        cudaDeviceSynchronize();
        barrier();
        c0 = heap.copies();
        ok = waited("F2.own_allocator", heap.copy(aptr(mine), aptr(gb_next), n), "own allocator -> next's heap (any)");
        barrier();
        check("F2.own_allocator", ok && count_wrong(b, n, prev, salt) == 0,
              "this rank's own allocator -> next PE's heap (memory_kind::any): bytes right");
        path_is("F2.own_allocator_path", c0, mapped ? 1 : 0, mapped ? 0 : 1, "own allocator -> heap");
        // mine -> my own heap with completions.
        c0 = heap.copies();
        upcxx::future<> of, sf;
        std::tie(of, sf) = heap.copy(mine, ga, n, operation_cx::as_future() | source_cx::as_future());
        ok = waited("F2.own_allocator", upcxx::when_all(of, sf), "own allocator -> my heap");
        check("F2.own_allocator", ok && count_wrong(a, n, me, salt) == 0,
              "own allocator -> my heap, op|src futures: bytes right");
        path_is("F2.own_allocator_path", c0, forced ? 0 : 1, forced ? 1 : 0, "own allocator -> my own heap");
        barrier();
        // The next rank's own allocator: not this rank's private memory, the fallback.
        fill(a, n, me, ++salt);
        cudaMemset(mine_local, 0, n);
        cudaDeviceSynchronize();
        barrier();
        c0 = heap.copies();
        ok = waited("F2.peer_allocator", heap.copy(ga, peer_mine, n), "my heap -> next rank's own allocator");
        barrier();
        check("F2.peer_allocator", ok && count_wrong(mine_local, n, prev, salt) == 0,
              "my heap -> the next rank's own allocator: bytes right");
        path_is("F2.peer_allocator_path", c0, 0, 1, "heap -> another rank's own allocator");
        barrier();
        own.deallocate(mine);
        own.destroy();  // collective
    }
#else
    (void)salt;
    skip("F2.own_allocator", "UPC++ before 2022.3: one cuda_device per GPU per process, and the heap owns it");
#endif
    // A global pointer made before update() and the heap's growth, with memory mapped after.
    {
        const std::size_t n = 2 * MiB;
        unsigned char *x = static_cast<unsigned char *>(nvshmem_malloc(n));
        heap.update();
        const dptr old_next = heap.to_global_ptr(x, next);  // made before the growth
        void *grow = nvshmem_malloc(size_t(1) << 30);       // a new chunk under CUDA VMM
        unsigned char *y = static_cast<unsigned char *>(nvshmem_malloc(n));
        const std::size_t ext = heap.update();
        check("F2.old_pointer", x && grow && y && heap.segments() <= 1,
              "update() after 1 GiB more: extent %zu, %zu segment(s)", ext, heap.segments());
        if (x && y) {
            fill(x, n, me, ++salt);
            cudaMemset(y, 0, n);
            cudaDeviceSynchronize();
            barrier();
            auto c0 = heap.copies();
            bool ok =
                waited("F2.old_pointer", heap.copy(old_next, heap.to_global_ptr(y), n), "old pointer -> new memory");
            check("F2.old_pointer", ok && count_wrong(y, n, next, salt) == 0,
                  "a pointer made before update() -> memory mapped after: bytes right");
            fill(y, n, me, ++salt);
            barrier();
            ok = waited("F2.old_pointer", heap.copy(heap.to_global_ptr(y), old_next, n), "new memory -> old pointer");
            barrier();
            check("F2.old_pointer", ok && count_wrong(x, n, prev, salt) == 0,
                  "memory mapped after update() -> a pointer made before: bytes right");
            path_is("F2.old_pointer_path", c0, mapped ? 2 : 0, mapped ? 0 : 2, "old pointers");
            auto back = heap.from_global_ptr(old_next);
            check("F2.old_pointer", back.first == x && back.second == next,
                  "from_global_ptr of the old pointer: (x, next PE)");
        }
        barrier();
        nvshmem_free(y);
        nvshmem_free(grow);
        nvshmem_free(x);
    }
}

// =================================================================================================
// F3: the caller's current device is not the heap's.
static void f3_other_device(unsigned char *a, unsigned char *b) {
    const int ndev = copy_test::visible_gpus();
    const int want = upcxx::reduce_all(ndev >= 2 ? 1 : 0, upcxx::op_fast_min).wait();
    if (!want) {
        skip("F3.other_device",
             "needs 2 GPUs visible (the calling thread's current device set to the one that is not the heap's)");
        return;
    }
    const int other = (gpu + 1) % ndev;
    nvshmem_heap heap;  // fresh: its first copy runs with the other device current
    g_heap = &heap;
    int salt = 30;
    const dptr ga = heap.to_global_ptr(a), gb_next = heap.to_global_ptr(b, next);
    auto c0 = heap.copies();
    std::size_t copies = 0;
    for (int round = 0; round < 3; round++) {
        const int current = round == 1 ? gpu : other;
        prepare(a, b, big, ++salt);
        cudaSetDevice(current);
        std::vector<upcxx::future<>> fs;
        bool ok = true;
        try {
            for (int k = 0; k < 4; k++) fs.push_back(heap.copy(ga + k * (big / 4), gb_next + k * (big / 4), big / 4));
            copies += 4;
            fs.push_back(heap.copy(ga, gb_next + big, small));
            copies++;
            for (auto &f : fs) ok = ok && wait_for(f, 60);
        } catch (const std::exception &e) {
            ok = false;
            check("F3.other_device", false, "round %d: %s", round, e.what());
        }
        int now_dev = -1;
        cudaGetDevice(&now_dev);
        check("F3.device_kept", now_dev == current, "round %d: the caller's current device is still %d (%d)", round,
              current, now_dev);
        cudaSetDevice(gpu);
        barrier();
        check("F3.other_device", ok && count_wrong(b, big, prev, salt) == 0,
              "round %d, current device %d, heap's %d: 4 x 16 MiB copies in flight + 1 small, bytes right", round,
              current, gpu);
    }
    bool quiet = true;
    try {
        heap.check_copies();
    } catch (const std::exception &e) {
        quiet = false;
        check("F3.other_device", false, "check_copies: %s", e.what());
    }
    check("F3.other_device", quiet, "no copy failed later");
    path_is("F3.path", c0, mapped ? copies : 0, mapped ? 0 : copies, "copies with another device current");
    // copy_after(0, ...) with the other device current: after the work on THAT device's legacy
    // default stream (a host function that sleeps, then writes the host source), into this
    // rank's own heap.
    {
        static std::vector<unsigned char> host_src;
        host_src.assign(small, 0);
        prepare(a, b, small, ++salt);
        cudaSetDevice(other);
        static int ms = 300;
        static int fill_salt;
        fill_salt = salt;
        cudaLaunchHostFunc(
            0,
            [](void *) {
                usleep(static_cast<useconds_t>(ms) * 1000u);
                for (std::size_t i = 0; i < host_src.size(); i++) host_src[i] = copy_test::pattern(me, i, fill_salt);
            },
            nullptr);
        bool ok = false;
        try {
            ok = wait_for(heap.copy_after(0, host_src.data(), heap.to_global_ptr(b), small), 60);
        } catch (const std::exception &e) {
            check("F3.copy_after_legacy", false, "copy_after(0, ...): %s", e.what());
        }
        cudaDeviceSynchronize();
        cudaSetDevice(gpu);
        barrier();
        const long wrong = count_wrong(b, small, me, salt);
        check("F3.copy_after_legacy", ok && wrong == 0,
              "copy_after(0, ...) with device %d current (heap's %d): ordered after that device's legacy stream (%ld "
              "wrong bytes)",
              other, gpu, wrong);
    }
    heap.destroy();
    g_heap = nullptr;
}

// =================================================================================================
// F6: 40 growths.
static void f6_growth(nvshmem_heap &heap, unsigned char *a) {
    upcxx_extra_nvshmem_heap_info_t info;
    const bool can_grow =
        upcxx_extra_nvshmem_heap_query(&info) == UPCXX_EXTRA_NVSHMEM_STATUS_OK && heap.extent() < info.size;
    const std::size_t chunk = can_grow ? 512 * MiB : 8 * MiB, n = MiB;
    if (!can_grow)
        skip("F6.growth", "the whole heap is mapped (no CUDA VMM): 40 allocations of 8 MiB + update() instead");
    const std::size_t extent0 = heap.extent();
    std::vector<void *> chunks;
    std::size_t max_segments = heap.segments();
    long wrong = 0, failed = 0;
    bool threw = false;
    const dptr ga = heap.to_global_ptr(a);
    for (int k = 0; k < 40; k++) {
        unsigned char *p = static_cast<unsigned char *>(nvshmem_malloc(chunk));
        int ok_here = p != nullptr, ok_all = upcxx::reduce_all(ok_here, upcxx::op_fast_min).wait();
        if (!ok_all) {
            if (p) nvshmem_free(p);
            check("F6.growth", false, "nvshmem_malloc(%zu) failed at growth %d", chunk, k);
            break;
        }
        chunks.push_back(p);
        try {
            heap.update();
            max_segments = std::max(max_segments, heap.segments());
            fill(a, n, me, 600 + k);
            if (!wait_for(heap.copy(ga, heap.to_global_ptr(p + chunk - n, next), n), 30)) failed++;
        } catch (const std::exception &e) {
            if (!threw) check("F6.growth", false, "growth %d: %s", k, e.what());
            threw = true;
        }
        barrier();
        wrong += count_wrong(p + chunk - n, n, prev, 600 + k);
    }
    check("F6.segments", max_segments <= 1, "%zu growths: at most %zu UPC++ device segment(s) (<= 1)", chunks.size(),
          max_segments);
    check("F6.newest_chunk", !threw && failed == 0 && wrong == 0 && chunks.size() == 40,
          "copies into the last MiB of the newest allocation of the next PE after each update(): %ld wrong bytes, %ld "
          "timeouts",
          wrong, failed);
    if (!chunks.empty()) {
        const std::size_t end =
            static_cast<std::size_t>(static_cast<char *>(chunks.back()) + chunk - static_cast<char *>(heap.base()));
        check("F6.extent", end <= heap.extent(),
              "extent %zu -> %zu bytes, covering the newest allocation (ends at offset %zu)%s", extent0, heap.extent(),
              end, can_grow ? "" : " (no growth: the heap is mapped whole)");
    }
    barrier();
    for (auto it = chunks.rbegin(); it != chunks.rend(); ++it) nvshmem_free(*it);
}

#endif  // UXN_SEMANTICS_MEMORY_HPP
