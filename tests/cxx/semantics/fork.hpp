// copy_semantics_test, fork(): a child's calls refused, destroy() there quiet.
// Part of copy_semantics_test.cpp, which includes every file of semantics/ into one translation unit
// (one compile of UPC++ and the layer) and runs the groups; the helpers are common.hpp's.
//
//   F15 fork(): in a child, heap.copy (fast, 0 elements), copy_after (also of host memory),
//      update() and check_copies() throw errc forked, and touch neither CUDA nor UPC++; destroy()
//      and the destructor of a heap moved there return quietly (no abort, nothing on stderr).
//      Naive: only the fast path refuses; destroy() destructing the parent's live allocators
//      (UPC++ aborts), the destructor telling the child to call destroy().
//      (A copy with host memory at both ends by type is upcxx::copy as written, unchecked.)
#ifndef UXN_SEMANTICS_FORK_HPP
#define UXN_SEMANTICS_FORK_HPP

#include "common.hpp"

// F15: fork().
static void f15_fork(nvshmem_heap &heap, unsigned char *a, unsigned char *b) {
    const dptr ga = heap.to_global_ptr(a), gb = heap.to_global_ptr(b, next);
    std::vector<unsigned char> host(64);
    const hptr hg = upcxx::new_array<unsigned char>(64);
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        // The child: every call must throw errc forked, status FORKED (the engine's), before
        // touching CUDA or UPC++.
        int wrong = 0;
        auto expect_forked = [&](auto &&call) {
            try {
                call();
                wrong++;
            } catch (const heap_error &e) {
                // The engine's one refusal: its status and its message (which names the cause).
                if (e.errc() != upcxx::extra::nvshmem_errc::forked || e.status() != UPCXX_EXTRA_NVSHMEM_STATUS_FORKED ||
                    std::string(e.what()).find("fork() child of the one that made the heap") == std::string::npos)
                    wrong++;
            } catch (...) {
                wrong++;
            }
        };
        expect_forked([&] { (void)heap.copy(ga, gb, small); });
        expect_forked([&] { (void)heap.copy(ga, gb, 0); });
        expect_forked([&] { (void)heap.copy_after(0, ga, gb, small); });
        expect_forked([&] { (void)heap.copy_after(0, host.data(), hg, 64); });
        expect_forked([&] { (void)heap.update(); });
        expect_forked([&] { heap.check_copies(); });
        _exit(wrong);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    check("F15.fork", WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "in a fork() child, 4 copies (fast, 0 elements, copy_after of device and of host memory), update() and "
          "check_copies() threw errc forked, status FORKED and the engine's message (%d did not)",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    // destroy(), and the destructor of a heap moved into the child's scope: quiet, no abort.
    for (const bool by_destroy : {true, false}) {
        int err[2] = {-1, -1};
        if (pipe(err) != 0) {
            check("F15.fork_destroy", false, "pipe() failed");
            break;
        }
        std::fflush(stdout);
        const pid_t c = fork();
        if (c == 0) {
            dup2(err[1], 2);
            close(err[0]);
            if (by_destroy) {
                heap.destroy();
                _exit(heap.is_active() ? 3 : 0);
            }
            {
                nvshmem_heap moved(std::move(heap));  // its destructor runs here, in the child
            }
            _exit(heap.is_active() ? 3 : 0);
        }
        close(err[1]);
        std::string said;
        char buf[512];
        for (ssize_t r; (r = read(err[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(r));
        close(err[0]);
        int st = -1;
        waitpid(c, &st, 0);
        check("F15.fork_destroy", WIFEXITED(st) && WEXITSTATUS(st) == 0 && said.empty(),
              "in a fork() child, %s: exit status %d%s, stderr \"%s\"",
              by_destroy ? "heap.destroy()" : "the destructor of the heap moved into the child",
              WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? " (killed by a signal)" : "", said.c_str());
    }
    check("F15.parent_heap", heap.is_active(), "the parent's heap is still active after its children");
    upcxx::delete_array(hg);
    barrier();
}

#endif  // UXN_SEMANTICS_FORK_HPP
