// copy_semantics_test, what a copy takes and refuses: raw pointers, 0 elements, a peer's mapping, raw ranges.
// Part of copy_semantics_test.cpp, which includes every file of semantics/ into one translation unit
// (one compile of UPC++ and the layer) and runs the groups; the helpers are common.hpp's.
//
//   F9 a raw T* INTO the heap (source or destination, with or without completions) throws
//      nvshmem_error INVALID_ARGUMENT naming heap.to_global_ptr, copies nothing; raw host T* to
//      and from the heap works (upcxx::copy's private-memory semantics, the fallback), as does a
//      UPC++ host global_ptr.
//      Naive: a raw pointer taken as a symmetric address (the old overloads), or handed to
//      upcxx::copy, which reads device memory as host memory.
//   F13 0 elements, as upcxx::copy: at the heap's end (one past extent()) no range error, the
//      future as ready as upcxx::copy's, nothing counted. Naive: range checks before n == 0.
//   F14 a raw T* from nvshmem_ptr(sym, peer) (a peer's heap as mapped here), source or
//      destination: INVALID_ARGUMENT naming heap.to_global_ptr. Naive: only this rank's range
//      checked, the mapping handed to upcxx::copy as host memory.
//   F19 raw ranges: a raw T* range that starts below the heap and runs into it (and one that runs
//      into a peer's heap as mapped here) is INVALID_ARGUMENT in every form (raw -> UPC++ host
//      global_ptr, UPC++ host global_ptr -> raw, raw -> heap global_ptr), nothing copied; one that
//      ends exactly at the heap's base is host memory. Naive: only the first byte checked.
#ifndef UXN_SEMANTICS_ARGUMENTS_HPP
#define UXN_SEMANTICS_ARGUMENTS_HPP

#include "common.hpp"

// F9: raw pointers.
static void f9_raw_pointers(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    const dptr ga = heap.to_global_ptr(a), gb = heap.to_global_ptr(b), gb_next = heap.to_global_ptr(b, next);
    const upcxx_extra_nvshmem_status_t INV = UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT;
    cudaMemset(b, 0, small);
    cudaDeviceSynchronize();
    expect_error("F9.raw_heap_source", INV, "to_global_ptr", "heap.copy(const T* into the heap, gp, n)",
                 [&] { (void)heap.copy(static_cast<const unsigned char *>(a), gb, small); });
    expect_error("F9.raw_heap_source", INV, "to_global_ptr", "heap.copy(T* into the heap (interior), gp, n)",
                 [&] { (void)heap.copy(a + 4097, gb, 16); });
    expect_error("F9.raw_heap_source", INV, "to_global_ptr", "heap.copy(T* into the heap, gp, n, op|src futures)",
                 [&] { (void)heap.copy(a, gb, small, operation_cx::as_future() | source_cx::as_future()); });
    expect_error("F9.raw_heap_destination", INV, "to_global_ptr", "heap.copy(gp, T* into the heap, n)",
                 [&] { (void)heap.copy(ga, b, small); });
    expect_error("F9.raw_heap_destination", INV, "to_global_ptr", "heap.copy(gp of the next PE, T* into the heap, n)",
                 [&] { (void)heap.copy(heap.to_global_ptr(a, next), b + 100, 16); });
    upcxx::promise<> p;
    expect_error("F9.raw_heap_destination", INV, "to_global_ptr", "heap.copy(gp, T* into the heap, n, as_promise)",
                 [&] { heap.copy(ga, b, small, operation_cx::as_promise(p)); });
    check("F9.nothing_copied", count_not(b, small, 0) == 0, "the refused copies wrote nothing");

    // Raw host memory (the caller's private memory, as upcxx::copy reads it) to and from the heap.
    const int salt = 91;
    std::vector<unsigned char> h = copy_test::host_pattern(small, me, salt), back(small, 0);
    cudaMemset(b, 0, small);
    cudaDeviceSynchronize();
    barrier();
    auto c0 = heap.copies();
    bool ok = true;
    std::size_t refused = 0;
#if UPCXX_VERSION < 20210300L
    if (!mapped || forced) {
        // upcxx::copy between private host memory and another rank's device memory crashes in
        // UPC++ 2020.10: heap.copy refuses such a copy where it would be upcxx::copy.
        expect_error("F9.raw_host_upcxx_2020", INV, "crashes", "heap.copy(host T*, next's heap) as upcxx::copy",
                     [&] { (void)heap.copy(h.data(), gb_next, small); });
        expect_error("F9.raw_host_upcxx_2020", INV, "crashes", "heap.copy(next's heap, host T*) as upcxx::copy",
                     [&] { (void)heap.copy(gb_next, back.data(), small); });
        refused = 2;
        barrier();
    } else
#endif
    {
        ok = waited("F9.raw_host", heap.copy(h.data(), gb_next, small), "heap.copy(host T*, next's heap)");
        barrier();
        check("F9.raw_host", ok && count_wrong(b, small, prev, salt) == 0, "host T* -> next PE's heap: bytes right");
        ok = waited("F9.raw_host", heap.copy(gb_next, back.data(), small), "heap.copy(next's heap, host T*)");
        check("F9.raw_host", ok && back == h, "next PE's heap -> host T*: bytes right");
    }
    barrier();  // the previous PE has read my b: it may be written again
    // const T* source with completions.
    std::vector<unsigned char> back2(small, 0);
    upcxx::future<> of, sf;
    std::tie(of, sf) = heap.copy(static_cast<const unsigned char *>(h.data()), gb, small,
                                 operation_cx::as_future() | source_cx::as_future());
    ok = waited("F9.raw_host", upcxx::when_all(of, sf), "heap.copy(const host T*, my heap, op|src)");
    check("F9.raw_host", ok && count_wrong(b, small, me, salt) == 0,
          "const host T* -> my heap with op|src futures: bytes right");
    // Host memory is read and written by CUDA on the fast path when the heap end is mapped here.
    path_is("F9.raw_host_path", c0, mapped ? 3 - refused : 1, mapped ? 0 : 2 - refused, "raw host pointers");
    // A raw host pointer is told from the heap without a failing C call: the thread's last C
    // error stays as it was. Naive: asking the C library, whose OUT_OF_HEAP overwrites it.
    (void)upcxx_extra_nvshmem_offset(nullptr, nullptr);  // NULL_ARGUMENT: a last error to keep
    const std::string last_before = upcxx_extra_nvshmem_last_error();
    ok = waited("F9.last_error", heap.copy(h.data(), gb, small), "heap.copy(host T*, my heap)");
    check("F9.last_error", ok && last_before == upcxx_extra_nvshmem_last_error(),
          "a raw host pointer leaves the thread's last C error as it was (\"%s\", now \"%s\")", last_before.c_str(),
          upcxx_extra_nvshmem_last_error());
    // A UPC++ host global_ptr (this rank's shared segment) with the heap: this process reaches it.
    hptr hg = upcxx::new_array<unsigned char>(small);
    std::memset(hg.local(), 0, small);
    c0 = heap.copies();
    ok = waited("F9.upcxx_host", heap.copy(gb, hg, small), "heap.copy(my heap, UPC++ host gp)");
    check("F9.upcxx_host", ok && std::memcmp(hg.local(), h.data(), small) == 0,
          "my heap -> UPC++ host global_ptr: bytes right");
    barrier();  // read my b before the previous PE writes it
    ok = waited("F9.upcxx_host", heap.copy(aptr(hg), aptr(gb_next), small),
                "heap.copy(UPC++ host any, next's heap any)");
    barrier();
    check("F9.upcxx_host", ok && count_wrong(b, small, prev, salt) == 0,
          "UPC++ host -> next's heap (memory_kind::any): bytes right");
    path_is("F9.upcxx_host_path", c0, mapped ? 2 : 1, mapped ? 0 : 1, "a UPC++ host global_ptr");
    upcxx::delete_array(hg);
    barrier();
}

// =================================================================================================
// F13: 0 elements, exactly as upcxx::copy.
static void f13_zero_elements(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    const dptr base = heap.to_global_ptr(static_cast<unsigned char *>(heap.base()));
    // One past the heap. UPC++ 2023.9's debug codemode refuses to form a pointer past its
    // segment's last byte, and without CUDA VMM the segment ends where the heap does: there, the
    // last byte.
    std::ptrdiff_t past = static_cast<std::ptrdiff_t>(heap.extent());
#if !(defined(UPCXX_CODEMODE) && (UPCXX_CODEMODE + 0))
    const char *no_vmm = std::getenv("NVSHMEM_DISABLE_CUDA_VMM");
    if (no_vmm && *no_vmm && std::strcmp(no_vmm, "0") != 0) past -= 1;
#endif
    const dptr end = base + past;
    std::vector<unsigned char> host(16);
    const auto c0 = heap.copies();
    int errors = 0, readiness = 0;
    auto zero = [&](const char *what, auto &&heap_call, auto &&upcxx_call) {
        try {
            auto f1 = heap_call();
            auto f2 = upcxx_call();
            if (ready(f1) != ready(f2)) {
                readiness++;
                check("F13.future", false, "%s: heap.copy's future %s, upcxx::copy's %s", what,
                      ready(f1) ? "ready" : "not ready", ready(f2) ? "ready" : "not ready");
            }
            if (!wait_for(f1, 30) || !wait_for(f2, 30)) errors++;
        } catch (const std::exception &e) {
            errors++;
            check("F13.zero", false, "%s: %s", what, e.what());
        }
    };
    zero(
        "end of heap -> host", [&] { return heap.copy(end, host.data(), 0); },
        [&] { return upcxx::copy(end, host.data(), 0); });
    zero("heap -> end of heap", [&] { return heap.copy(base, end, 0); }, [&] { return upcxx::copy(base, end, 0); });
    const dptr ga = heap.to_global_ptr(a), gb = heap.to_global_ptr(b, next);
    zero("heap -> peer heap", [&] { return heap.copy(ga, gb, 0); }, [&] { return upcxx::copy(ga, gb, 0); });
    const auto c1 = heap.copies();
    check("F13.zero", errors == 0 && readiness == 0 && c1.fast == c0.fast && c1.fallback == c0.fallback,
          "0-element copies at and one past the heap's end: no error, futures as upcxx::copy's, none counted (%zu "
          "fast, %zu fallback)",
          c1.fast - c0.fast, c1.fallback - c0.fallback);
    barrier();
}

// =================================================================================================
// F14: a raw pointer into a peer's heap as NVSHMEM maps it here.
static void f14_peer_mapping(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    unsigned char *peer_b = static_cast<unsigned char *>(nvshmem_ptr(b, next));
    if (!peer_b || next == me) {
        skip("F14", "NVSHMEM does not map the next PE's heap here");
        return;
    }
    std::vector<unsigned char> host(small);
    const hptr hg = upcxx::new_array<unsigned char>(small);
    expect_error("F14.peer_mapping", UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, "to_global_ptr",
                 "a peer's mapping as the source", [&] { (void)heap.copy(peer_b + 8, hg, small); });
    expect_error("F14.peer_mapping", UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT, "to_global_ptr",
                 "a peer's mapping as the destination", [&] { (void)heap.copy(heap.to_global_ptr(a), peer_b, small); });
    upcxx::delete_array(hg);
    barrier();
}

// =================================================================================================
// F19: a raw range that runs into a heap.
static void f19_raw_ranges(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    const upcxx_extra_nvshmem_status_t INV = UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT;
    const std::size_t half = 65536, n = 2 * half;
    unsigned char *below = static_cast<unsigned char *>(heap.base()) - half;  // [base - 64 KiB, base + 64 KiB)
    const hptr hg = upcxx::new_array<unsigned char>(n);
    std::memset(hg.local(), 0x33, n);
    cudaMemset(b, 0, n);
    cudaDeviceSynchronize();
    expect_error("F19.raw_range", INV, "to_global_ptr", "heap.copy(raw range into the heap, UPC++ host gp)",
                 [&] { (void)heap.copy(below, hg, n); });
    expect_error("F19.raw_range", INV, "to_global_ptr", "heap.copy(UPC++ host gp, raw range into the heap)",
                 [&] { (void)heap.copy(hg, below, n); });
    expect_error("F19.raw_range", INV, "to_global_ptr", "heap.copy(raw range into the heap, my heap gp)",
                 [&] { (void)heap.copy(static_cast<const unsigned char *>(below), heap.to_global_ptr(b), n); });
    expect_error("F19.raw_range", INV, "heap offset 0", "the message names the first heap byte of the range",
                 [&] { (void)heap.copy(below, hg, half + 1); });
    check("F19.nothing_copied",
          count_not(b, n, 0) == 0 && count_not(static_cast<unsigned char *>(hg.local()), n, 0x33) == 0,
          "the refused copies wrote nothing");
    (void)a;
    unsigned char *peer_b = static_cast<unsigned char *>(nvshmem_ptr(b, next));
    if (peer_b && next != me && peer_b != b) {
        expect_error("F19.peer_range", INV, "to_global_ptr", "a raw range that runs into a peer's mapping",
                     [&] { (void)heap.copy(peer_b - 64, hg, 128); });
        expect_error("F19.peer_range", INV, "to_global_ptr", "a raw destination range into a peer's mapping",
                     [&] { (void)heap.copy(hg, peer_b - 64, 128); });
    }
    upcxx::delete_array(hg);
    barrier();
}

#endif  // UXN_SEMANTICS_ARGUMENTS_HPP
