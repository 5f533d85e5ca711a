// cuFFTMp from UPC++, without MPI: a distributed 3-D complex-to-complex FFT on nvshmem_malloc'd
// slabs, NVSHMEM initialised by upcxx::extra::nvshmem_init() and the slabs reached through
// upcxx::extra::nvshmem_heap's global pointers.
// SPDX-License-Identifier: BSD-3-Clause
//
//   1. upcxx::init(); upcxx::extra::nvshmem_init(): NVSHMEM bootstrapped by UPC++ (unique id);
//   2. a cuFFTMp plan with CUFFT_COMM_NONE (cuFFTMp uses the NVSHMEM the program initialised),
//      cuFFTMp's built-in slabs (CUFFT_XT_FORMAT_INPLACE in, CUFFT_XT_FORMAT_INPLACE_SHUFFLED out:
//      rank r holds X-planes [r*NX/P, (r+1)*NX/P) before the forward transform and Y-rows
//      [r*NY/P, (r+1)*NY/P) of every X-plane after it), one nvshmem_malloc'd buffer per rank;
//   3. round trip: rank 0 scatters a pseudo-random input to every rank's slab with heap.copy
//      (its private host memory -> heap.to_global_ptr(data, pe)), forward + inverse on every rank,
//      rank 0 gathers the slabs with heap.copy and checks result / (NX*NY*NZ) against the input:
//      relative L2 error <= 1e-5;
//   4. an analytic transform: a single plane wave exp(+2 pi i (kx x/NX + ky y/NY + kz z/NZ)),
//      scattered the same way; after the forward transform bin (kx, ky, kz) holds NX*NY*NZ and every
//      other bin 0. An RPC to the rank that owns that bin reads it there, from its own slab; rank 0
//      gathers the whole output and checks every bin (max error <= 1e-5 of NX*NY*NZ).
// Every rank prints "rank R: ..." and exits 1 when anything fails; nvshmem_init() fails on every
// rank together (no GPU, no NVSHMEM), so without a GPU every rank reports rank 0's reason and no
// rank waits. Prints "RESULT cufftmp_upcxx PASS" (rank 0) and exits 0 when both checks pass.
//
//   UPCXX_SHARED_HEAP_SIZE=256MB NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo upcxx-run -n 2 -- ./cufftmp_upcxx [N]
// N (default 64): the cube's edge; NX and NY must be multiples of the number of ranks.
#include <cuda_runtime.h>
#include <cufftMp.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <upcxx/upcxx.hpp>
#include <upcxx_extra/nvshmem.hpp>

namespace {

using cplx = cufftComplex;  // float2: trivially copyable, a valid global_ptr element

// A step that failed on this rank: its message, agreed on by every rank (below).
struct step_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Every rank passes whether its step worked; when any failed, every rank throws with the lowest
// failing rank's message, so no rank goes on into a collective the others left.
void agree(const std::string &mine, const char *what) {
    const int me = upcxx::rank_me();
    const int first = upcxx::reduce_all(mine.empty() ? upcxx::rank_n() : me, upcxx::op_fast_min).wait();
    if (first == upcxx::rank_n()) return;
    std::array<char, 512> text{};  // a trivially serializable copy of the failing rank's message
    if (me == first) mine.copy(text.data(), text.size() - 1);
    text = upcxx::broadcast(text, first).wait();
    const std::string msg(text.data());
    throw step_error(std::string(what) + ": " + (first == me ? msg : "rank " + std::to_string(first) + ": " + msg));
}
std::string cufft_check(cufftResult r, const char *call) {
    return r == CUFFT_SUCCESS ? std::string() : std::string(call) + " returned cufftResult " + std::to_string(int(r));
}
std::string cuda_check(cudaError_t e, const char *call) {
    return e == cudaSuccess ? std::string() : std::string(call) + ": " + cudaGetErrorString(e);
}

// This rank's slab (the same symmetric object on every rank), for the RPC.
cplx *g_data = nullptr;

}  // namespace

int main(int argc, char **argv) {
    upcxx::init();
    const int me = upcxx::rank_me(), P = upcxx::rank_n();
    int rc = 0;
    try {
        upcxx::extra::nvshmem_init();  // collective: this rank's GPU, NVSHMEM bootstrapped by UPC++

        const long long N = argc > 1 ? std::atoll(argv[1]) : 64;
        const long long NX = N, NY = N, NZ = N, total = NX * NY * NZ;
        agree(N >= P && NX % P == 0 && NY % P == 0
                  ? ""
                  : "the edge " + std::to_string(N) + " must be a multiple of the " + std::to_string(P) + " ranks",
              "parameters");
        const long long xs = NX / P, ys = NY / P;            // X-planes in, Y-rows out, per rank
        const std::size_t slab = std::size_t(xs * NY * NZ);  // == NX * ys * NZ elements

        // 2. The plan: cuFFTMp on the NVSHMEM initialised above (CUFFT_COMM_NONE), built-in slabs.
        cudaStream_t stream = nullptr;
        cufftHandle plan = 0;
        std::size_t work = 0;
        std::string err = cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
        if (err.empty()) err = cufft_check(cufftCreate(&plan), "cufftCreate");
        agree(err, "plan");
        err = cufft_check(cufftMpAttachComm(plan, CUFFT_COMM_NONE, nullptr), "cufftMpAttachComm(CUFFT_COMM_NONE)");
        if (err.empty()) err = cufft_check(cufftSetStream(plan, stream), "cufftSetStream");
        if (err.empty())
            err =
                cufft_check(cufftXtSetSubformatDefault(plan, CUFFT_XT_FORMAT_INPLACE, CUFFT_XT_FORMAT_INPLACE_SHUFFLED),
                            "cufftXtSetSubformatDefault");
        agree(err, "plan");
        agree(cufft_check(cufftMakePlan3d(plan, int(NX), int(NY), int(NZ), CUFFT_C2C, &work), "cufftMakePlan3d"),
              "plan");

        g_data = static_cast<cplx *>(nvshmem_malloc(slab * sizeof(cplx)));  // collective
        agree(g_data ? "" : "nvshmem_malloc(" + std::to_string(slab * sizeof(cplx)) + ") failed", "nvshmem_malloc");
        upcxx::extra::nvshmem_heap heap;  // collective: the heap, now holding every slab
        cplx *const data = g_data;

        // Rank 0 writes `in` (global X-slab order: rank r's slab is in[r*slab, (r+1)*slab)) into
        // every rank's slab, with heap.copy from its private host memory.
        auto scatter = [&](const std::vector<cplx> &in) {
            if (me == 0) {
                upcxx::future<> all = upcxx::make_future();
                for (int r = 0; r < P; r++)
                    all = upcxx::when_all(all, heap.copy(in.data() + r * slab, heap.to_global_ptr(data, r), slab));
                all.wait();
            }
            upcxx::barrier();  // every slab written before any rank transforms it
        };
        // Every rank reads its slab's slot `rank r` into rank 0's `out`, the other way.
        auto gather = [&](std::vector<cplx> &out) {
            upcxx::barrier();  // every rank's transform done
            if (me == 0) {
                out.assign(std::size_t(total), cplx{0.f, 0.f});
                upcxx::future<> all = upcxx::make_future();
                for (int r = 0; r < P; r++)
                    all = upcxx::when_all(all, heap.copy(heap.to_global_ptr(data, r), out.data() + r * slab, slab));
                all.wait();
            }
            upcxx::barrier();
        };
        auto exec = [&](int direction, const char *what) {
            std::string e = cufft_check(cufftExecC2C(plan, data, data, direction), what);
            if (e.empty()) e = cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            agree(e, what);
        };

        // 3. Forward then inverse, against the input.
        std::vector<cplx> in, out;
        if (me == 0) {
            in.resize(std::size_t(total));
            std::uint64_t s = 0x9e3779b97f4a7c15ull;
            for (cplx &c : in) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                c.x = float((s >> 40) & 0xffffff) / float(1 << 24) - 0.5f;
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                c.y = float((s >> 40) & 0xffffff) / float(1 << 24) - 0.5f;
            }
        }
        scatter(in);
        exec(CUFFT_FORWARD, "cufftExecC2C(CUFFT_FORWARD)");
        exec(CUFFT_INVERSE, "cufftExecC2C(CUFFT_INVERSE)");
        gather(out);
        double rel = 0;
        if (me == 0) {
            double num = 0, den = 0;
            for (std::size_t i = 0; i < in.size(); i++) {
                const double dx = out[i].x / double(total) - in[i].x, dy = out[i].y / double(total) - in[i].y;
                num += dx * dx + dy * dy;
                den += double(in[i].x) * in[i].x + double(in[i].y) * in[i].y;
            }
            rel = std::sqrt(num / den);
            std::printf("round trip %lldx%lldx%lld on %d ranks: relative L2 error %.3g (<= 1e-5)\n", NX, NY, NZ, P,
                        rel);
        }
        rel = upcxx::broadcast(rel, 0).wait();
        const bool round_ok = rel <= 1e-5;

        // 4. A plane wave: one nonzero bin.
        const long long kx = 1 % NX, ky = 2 % NY, kz = 3 % NZ;
        if (me == 0) {
            const double two_pi = 6.283185307179586476925286766559;
            for (long long x = 0; x < NX; x++)
                for (long long y = 0; y < NY; y++)
                    for (long long z = 0; z < NZ; z++) {
                        const double ph = two_pi * (double((kx * x) % NX) / NX + double((ky * y) % NY) / NY +
                                                    double((kz * z) % NZ) / NZ);
                        in[std::size_t((x * NY + y) * NZ + z)] = cplx{float(std::cos(ph)), float(std::sin(ph))};
                    }
        }
        scatter(in);
        exec(CUFFT_FORWARD, "cufftExecC2C(CUFFT_FORWARD) of the plane wave");
        upcxx::barrier();
        // The bin's owner (Y-slabs) and its place in that rank's slab: [x][y - owner*ys][z].
        const int owner = int(ky / ys);
        const std::size_t at = std::size_t((kx * ys + (ky - owner * ys)) * NZ + kz);
        bool bin_ok = true, rest_ok = true;
        if (me == 0) {
            std::array<float, 3> got =
                upcxx::rpc(
                    owner,
                    [](std::size_t i) {
                        cplx v{0.f, 0.f};
                        cudaError_t e = cudaMemcpy(&v, g_data + i, sizeof v, cudaMemcpyDeviceToHost);
                        return std::array<float, 3>{v.x, v.y, float(e == cudaSuccess ? upcxx::rank_me() : -1)};
                    },
                    at)
                    .wait();
            bin_ok = got[2] == float(owner) && std::fabs(got[0] - double(total)) <= 1e-5 * double(total) &&
                     std::fabs(got[1]) <= 1e-5 * double(total);
            std::printf("plane wave (%lld,%lld,%lld): bin read on its owner, rank %d: (%g, %g), want (%lld, 0): %s\n",
                        kx, ky, kz, int(got[2]), got[0], got[1], total, bin_ok ? "ok" : "WRONG");
        }
        gather(out);
        if (me == 0) {
            double worst = 0;
            long long worst_at = -1;
            for (int r = 0; r < P; r++)
                for (long long x = 0; x < NX; x++)
                    for (long long yl = 0; yl < ys; yl++)
                        for (long long z = 0; z < NZ; z++) {
                            const std::size_t i = r * slab + std::size_t((x * ys + yl) * NZ + z);
                            const bool hot = x == kx && r * ys + yl == ky && z == kz;
                            const double e = std::hypot(out[i].x - (hot ? double(total) : 0.0), double(out[i].y));
                            if (e > worst) worst = e, worst_at = (x * NY + r * ys + yl) * NZ + z;
                        }
            rest_ok = worst <= 1e-5 * double(total);
            std::printf("plane wave: every bin checked, max error %.3g of %lld at flat bin %lld (<= 1e-5 of it): %s\n",
                        worst, total, worst_at, rest_ok ? "ok" : "WRONG");
        }
        const bool all_ok = upcxx::broadcast(round_ok && bin_ok && rest_ok, 0).wait();

        heap.destroy();  // collective: every copy landed
        nvshmem_free(g_data);
        g_data = nullptr;
        cufftDestroy(plan);
        cudaStreamDestroy(stream);
        upcxx::extra::nvshmem_finalize();
        if (me == 0) std::printf("RESULT cufftmp_upcxx %s\n", all_ok ? "PASS" : "FAIL");
        rc = all_ok ? 0 : 1;
    } catch (const upcxx::extra::nvshmem_error &e) {  // thrown on every rank together
        std::fprintf(stderr, "rank %d: %s\n", me, e.what());
        rc = 1;
    } catch (const std::exception &e) {  // step_error: agreed on by every rank
        std::fprintf(stderr, "rank %d: %s\n", me, e.what());
        rc = 1;
    }
    upcxx::finalize();
    return rc;
}
