// UPC++'s own upcxx::copy, with no GPU and no part of this library: a 4-byte host copy between
// private memory (a T* outside the shared segment) and another rank's shared segment, with one
// completion form (argv[1]: default, promise, lpc, future) in one direction (argv[2]: put, private
// -> the next rank's segment; get, the next rank's segment -> private), on 2 ranks.
//
// UPC++ 2020.10.0 gets this copy wrong (docs/compatibility.md, "upcxx::copy with private memory"):
// on the smp conduit it hands the private address to GASNet as the other rank's address, and the
// copy crashes (opt: SIGSEGV; debug: GASNet's "Remote address out of range") or moves wrong bytes.
// heap.copy hands such a copy to upcxx::copy unchanged when no end is NVSHMEM heap memory mapped
// here, so the defect is UPC++'s to show. The program first checks the same form on copies that
// release gets right (shared segment <-> the next rank's, private <-> its own segment), prints
// "controls right", then says what it expects of the copy itself from UPCXX_VERSION:
//   "expect: right bytes"                 a release without the defect (2023.9.0): the copy's bytes
//                                         are checked, then "RESULT upcxx_copy_private_test PASS"
//   "expect: the UPC++ 2020.10 defect"    the copy must crash or move wrong bytes ("DEFECT SEEN");
//                                         right bytes there are a FAIL (the record would be wrong)
// ctest (tests/cxx/CMakeLists.txt, label upcxx-defect) passes on either outcome as expected.
#include <upcxx/upcxx.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

#include "check.hpp"

namespace {

const char *g_form = "default";

template <typename Src, typename Dst>
void copy(Src src, Dst dst, std::size_t n) {
    if (!std::strcmp(g_form, "promise")) {
        upcxx::promise<> p;
        upcxx::copy(src, dst, n, upcxx::operation_cx::as_promise(p));
        p.finalize().wait();
    } else if (!std::strcmp(g_form, "lpc")) {
        bool done = false;
        upcxx::copy(src, dst, n, upcxx::operation_cx::as_lpc(upcxx::current_persona(), [&done] { done = true; }));
        while (!done) upcxx::progress();
    } else if (!std::strcmp(g_form, "future")) {
        upcxx::copy(src, dst, n, upcxx::operation_cx::as_future()).wait();
    } else {
        upcxx::copy(src, dst, n).wait();
    }
}

void say(const char *fmt, int a = 0) {
    std::printf(fmt, a);
    std::printf("\n");
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char **argv) {
    upcxx::init();
    g_form = argc > 1 ? argv[1] : "default";
    const bool put = !(argc > 2 && !std::strcmp(argv[2], "get"));
    const int me = upcxx::rank_me(), n = upcxx::rank_n();
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    REQUIRE(n == 2, "2 ranks, not %d", n);
    upcxx::global_ptr<int> mine = upcxx::new_array<int>(4);
    REQUIRE(mine, "new_array");
    upcxx::dist_object<upcxx::global_ptr<int>> dobj(mine);
    const upcxx::global_ptr<int> theirs = dobj.fetch(next).wait();
    std::vector<int> priv(1);
    auto value = [](int rank, int what) { return 0x5a000000 + rank * 256 + what; };

    // Controls: the same completion form where UPC++ 2020.10 is right.
    mine.local()[0] = value(me, 1);
    mine.local()[1] = -1;
    upcxx::barrier();
    copy(theirs, mine + 1, 1);  // the next rank's segment -> mine
    CHECK(mine.local()[1] == value(next, 1), "%s: shared <- the next rank's shared: 0x%x", g_form, mine.local()[1]);
    priv[0] = value(me, 2);
    copy(priv.data(), mine + 2, 1);  // private -> my own segment
    CHECK(mine.local()[2] == value(me, 2), "%s: private -> own shared: 0x%x", g_form, mine.local()[2]);
    copy(mine, priv.data(), 1);  // my own segment -> private
    CHECK(priv[0] == value(me, 1), "%s: own shared -> private: 0x%x", g_form, priv[0]);
    upcxx::barrier();
    if (uxn_check::failures() == 0) say("rank %d: controls right", me);

#if UPCXX_VERSION <= 20201000L
    const bool defect_expected = true;
    say("rank %d: expect: the UPC++ 2020.10 defect", me);
#else
    const bool defect_expected = false;
    say("rank %d: expect: right bytes", me);
#endif
    mine.local()[3] = -1;
    priv[0] = put ? value(me, 3) : -1;
    upcxx::barrier();
    if (put) {
        say("rank %d: upcxx::copy private -> the next rank's segment, 4 bytes", me);
        copy(priv.data(), theirs + 3, 1);
    } else {
        say("rank %d: upcxx::copy the next rank's segment -> private, 4 bytes", me);
        copy(theirs, priv.data(), 1);
    }
    upcxx::barrier();
    const int got = put ? mine.local()[3] : priv[0];
    const int want = put ? value(prev, 3) : value(next, 1);
    if (defect_expected) {
        if (got != want) {
            std::printf("rank %d: DEFECT SEEN: 0x%x where 0x%x belongs\n", me, got, want);
        } else {
            CHECK(false,
                  "%s %s: the UPC++ 2020.10 defect expected, the bytes are right: docs/compatibility.md is wrong",
                  g_form, put ? "put" : "get");
        }
    } else {
        CHECK(got == want, "%s %s: 0x%x, want 0x%x", g_form, put ? "put" : "get", got, want);
    }
    upcxx::barrier();
    upcxx::delete_array(mine);
    const int rc =
        uxn_check::finish(defect_expected ? "upcxx_copy_private_test (the defect)" : "upcxx_copy_private_test");
    upcxx::finalize();
    return rc;
}
