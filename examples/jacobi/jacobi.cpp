// jacobi_upcxx: a 2-D Jacobi solver on NVSHMEM memory with its host side on UPC++ (no MPI).
// SPDX-License-Identifier: BSD-3-Clause
//
// The algorithm, sizes, options, output and check of NVIDIA's NVSHMEM Jacobi solver (the
// nvshmem/ variant of NVIDIA's multi-GPU programming models; README.md here says what differs):
// an nx x ny mesh, its ny - 2 interior rows split into row slabs, one per PE, on
// nvshmem_malloc'd memory; periodic in y (the first row's neighbour above is the last row);
// columns 0 and nx-1 hold sin(2 pi y). Each iteration is one sweep over the slab and the
// exchange of its first and last row with the neighbour PEs, chosen by -halo:
//
//   device  the sweep writes the neighbours' halo rows itself with nvshmem_float_p, then
//           nvshmemx_barrier_all_on_stream (NVIDIA's scheme);
//   copy    the sweep updates the slab only; heap.copies_on_stream moves the two boundary rows into
//           the neighbours' halo rows in the stream's order, then nvshmemx_barrier_all_on_stream;
//   upcxx   the same rows with upcxx::copy (UPC++ alone), once heap.after(stream) says the sweep
//           is done, then upcxx::barrier_async; the next sweep is queued after that.
//
// In every mode the L2 norm of the change is summed over the PEs with upcxx::reduce_all. Its local
// value comes from heap.after(stream) (the callback only reads the pinned copy); reduce_all itself
// starts from the loop, in iteration order on every rank, never from a completion callback (UPC++
// forbids starting a collective inside progress). The norm of iteration k decides whether
// iteration k + 2 runs (iteration k + 1 is queued meanwhile), in the single-GPU reference too. Every rank first runs
// the whole mesh on its GPU alone (the reference, timed), then the distributed solver; at the end every cell of every
// slab is compared with the reference (tolerance 1e-8): exit status 1 on a mismatch, on every rank.
//
//   upcxx-run -n 2 ./jacobi_upcxx [-niter 1000] [-nx 16384] [-ny 16384] [-nccheck 1] [-csv]
//                                 [-halo device|copy|upcxx]
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <upcxx/upcxx.hpp>
#include <upcxx_extra/nvshmem.hpp>

#include "jacobi_kernels.hpp"

namespace {

using jacobi::real;
constexpr real tol = 1.0e-8f;
using device_gptr = upcxx::global_ptr<real, upcxx::memory_kind::cuda_device>;
using const_device_gptr = upcxx::global_ptr<const real, upcxx::memory_kind::cuda_device>;

enum class halo { device, copy, upcxx };
const char *halo_name(halo h) { return h == halo::device ? "device" : h == halo::copy ? "copy" : "upcxx"; }

struct options {
    int niter = 1000, nx = 16384, ny = 16384, nccheck = 1;
    bool csv = false;
    halo mode = halo::device;
};

// NVIDIA's options (-niter -nx -ny -nccheck -csv) and -halo; an empty string, or why not.
std::string parse(int argc, char **argv, options &o) {
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-csv") {
            o.csv = true;
            continue;
        }
        if (i + 1 >= argc) return "option " + a + " needs a value (or is unknown)";
        const std::string v = argv[++i];
        if (a == "-halo") {
            if (v == "device")
                o.mode = halo::device;
            else if (v == "copy")
                o.mode = halo::copy;
            else if (v == "upcxx")
                o.mode = halo::upcxx;
            else
                return "-halo takes device, copy or upcxx, not '" + v + "'";
            continue;
        }
        int *dst = a == "-niter"     ? &o.niter
                   : a == "-nx"      ? &o.nx
                   : a == "-ny"      ? &o.ny
                   : a == "-nccheck" ? &o.nccheck
                                     : nullptr;
        if (!dst) return "unknown option " + a;
        char *end = nullptr;
        const long n = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end || n < 0 || n > INT_MAX) return "option " + a + ": '" + v + "' is not a count";
        *dst = static_cast<int>(n);
    }
    if (o.nx < 3 || o.ny < 3) return "the mesh must be at least 3 x 3";
    if (static_cast<long long>(o.nx) * o.ny > INT_MAX) return "the mesh must have fewer than 2^31 cells";
    if (o.nccheck < 1) return "-nccheck must be at least 1";
    return "";
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// A CUDA call in the solver's loops: a failure there ends the job (as NVIDIA's CUDA_RT_CALL does).
void cuda_or_exit(cudaError_t e, const char *call) {
    if (e == cudaSuccess) return;
    std::fprintf(stderr, "rank %d: %s: %s\n", upcxx::rank_me(), call, cudaGetErrorString(e));
    std::exit(1);
}
#define CUDA_OR_EXIT(call) cuda_or_exit((call), #call)

// A step of the set-up that failed on this rank: its message, agreed on by every rank.
struct step_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// Every rank passes whether its step worked; when any failed, every rank throws the lowest failing
// rank's message, so no rank goes on into a collective the others left.
void agree(const std::string &mine, const char *what) {
    const int me = upcxx::rank_me();
    const int first = upcxx::reduce_all(mine.empty() ? upcxx::rank_n() : me, upcxx::op_fast_min).wait();
    if (first == upcxx::rank_n()) return;
    std::array<char, 512> text{};
    if (me == first) mine.copy(text.data(), text.size() - 1);
    text = upcxx::broadcast(text, first).wait();
    const std::string msg(text.data());
    throw step_error(std::string(what) + ": " + (first == me ? msg : "rank " + std::to_string(first) + ": " + msg));
}
std::string cuda_check(cudaError_t e, const char *call) {
    return e == cudaSuccess ? std::string() : std::string(call) + ": " + cudaGetErrorString(e);
}

// Whether iteration `iter` computes the norm (NVIDIA's rule: every nccheck iterations, and every
// 100 for the printout), and whether that norm may stop the run (every nccheck iterations).
bool norm_iteration(const options &o, int iter) { return iter % o.nccheck == 0 || (!o.csv && iter % 100 == 0); }
bool stop_check(const options &o, int iter) { return iter % o.nccheck == 0; }

// The whole mesh on this rank's GPU alone, written to `out` (nx * ny); its time in seconds. Rows 0
// and ny-1 are the halo rows of the periodic y direction: the sweep writes row 1 into row ny-1 and
// row ny-2 into row 0. The same stopping rule as the distributed solver.
double single_gpu(const options &o, std::vector<real> &out, bool print, std::string &err) {
    const int nx = o.nx, ny = o.ny;
    const std::size_t bytes = std::size_t(nx) * ny * sizeof(real);
    real *a = nullptr, *a_new = nullptr, *l2_d = nullptr, *l2_h = nullptr;
    cudaStream_t stream = nullptr;
    err = cuda_check(cudaMalloc(&a, bytes), "cudaMalloc");
    if (err.empty()) err = cuda_check(cudaMalloc(&a_new, bytes), "cudaMalloc");
    if (err.empty()) err = cuda_check(cudaMalloc(&l2_d, sizeof(real)), "cudaMalloc");
    if (err.empty()) err = cuda_check(cudaMallocHost(&l2_h, sizeof(real)), "cudaMallocHost");
    if (err.empty()) err = cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (err.empty()) err = cuda_check(cudaMemset(a, 0, bytes), "cudaMemset");
    if (err.empty()) err = cuda_check(cudaMemset(a_new, 0, bytes), "cudaMemset");
    if (err.empty()) err = cuda_check(jacobi::set_boundaries(a, a_new, 0, ny - 2, nx, ny - 2), "set_boundaries");
    double t = 0;
    if (err.empty()) {
        if (print)
            std::printf(
                "Single GPU jacobi relaxation: %d iterations on %d x %d mesh with norm check every %d iterations\n",
                o.niter, ny, nx, o.nccheck);
        const double t0 = now();
        bool stop = false;
        real last = 1;  // the norm of the previous iteration, when it was a stop check
        bool last_checked = false;
        for (int iter = 0; !stop && iter < o.niter; iter++) {
            CUDA_OR_EXIT(cudaMemsetAsync(l2_d, 0, sizeof(real), stream));
            const jacobi::sweep s{a_new, a, l2_d, 1, ny - 1, nx, 0, ny - 1, 0, 0};
            CUDA_OR_EXIT(jacobi::launch_sweep(jacobi::halo_write::local, s, stream));
            // Iteration iter + 1 runs unless the norm of iteration iter - 1 is below the tolerance.
            if (last_checked && last <= tol) stop = true;
            last_checked = false;
            if (norm_iteration(o, iter)) {
                CUDA_OR_EXIT(cudaMemcpyAsync(l2_h, l2_d, sizeof(real), cudaMemcpyDeviceToHost, stream));
                CUDA_OR_EXIT(cudaStreamSynchronize(stream));
                const real norm = std::sqrt(*l2_h);
                if (print && iter % 100 == 0) std::printf("%5d, %0.6f\n", iter, norm);
                last = norm;
                last_checked = stop_check(o, iter);
            }
            std::swap(a, a_new);
        }
        CUDA_OR_EXIT(cudaStreamSynchronize(stream));
        t = now() - t0;
        err = cuda_check(cudaMemcpy(out.data(), a, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    }
    if (stream) cudaStreamDestroy(stream);
    cudaFreeHost(l2_h);
    cudaFree(l2_d);
    cudaFree(a_new);
    cudaFree(a);
    return t;
}

// One norm on its way: iteration `iter`'s squared changes, this PE's (`local`, ready once the
// stream computed it) or already being summed over the PEs (`summed`: `value` is the sum).
struct pending_norm {
    int iter;
    upcxx::future<real> value;
    bool summed;
};

}  // namespace

int main(int argc, char **argv) {
    upcxx::init();
    const int me = upcxx::rank_me();
    options o;
    const std::string bad = parse(argc, argv, o);
    if (!bad.empty()) {  // the same arguments on every rank: every rank stops here
        if (me == 0)
            std::fprintf(stderr,
                         "jacobi_upcxx: %s\nusage: jacobi_upcxx [-niter N] [-nx N] [-ny N] [-nccheck N] [-csv] "
                         "[-halo device|copy|upcxx]\n",
                         bad.c_str());
        upcxx::finalize();
        return 2;
    }
    int rc = 0;
    try {
        const int nx = o.nx, ny = o.ny, n_ranks = upcxx::rank_n();
        // ny - 2 interior rows over the PEs: the first num_low PEs get chunk_low rows, the others one
        // more. Both arrays are allocated with chunk_high + 2 rows on every PE (symmetric).
        const int chunk_low = (ny - 2) / n_ranks, chunk_high = chunk_low + 1;
        const std::size_t slab_bytes = std::size_t(nx) * (chunk_high + 2) * sizeof(real);

        // NVSHMEM's default heap (1 GiB) holds small meshes; a larger one is asked for when needed
        // and NVSHMEM_SYMMETRIC_SIZE is not set (as NVIDIA's solver does).
        upcxx::extra::nvshmem_init_options init;
        const std::size_t wanted = 2 * slab_bytes + 2 * slab_bytes / 10;
        if (!std::getenv("NVSHMEM_SYMMETRIC_SIZE") && wanted > (std::size_t(1) << 30)) {
            init.heap_size = wanted;
            if (me == 0 && !o.csv) std::printf("Setting NVSHMEM_SYMMETRIC_SIZE = %zu\n", wanted);
        }
        upcxx::extra::nvshmem_init(init);  // collective: this rank's GPU, NVSHMEM bootstrapped by UPC++

        const int npes = nvshmem_n_pes(), mype = nvshmem_my_pe();
        agree(npes == n_ranks
                  ? ""
                  : "NVSHMEM has " + std::to_string(npes) + " PEs, UPC++ " + std::to_string(n_ranks) + " ranks",
              "nvshmem_init");
        agree(chunk_low >= 1 ? ""
                             : "the mesh has " + std::to_string(ny - 2) + " interior rows, fewer than the " +
                                   std::to_string(npes) + " PEs",
              "parameters");

        // The reference: the whole mesh on this rank's GPU.
        std::vector<real> ref(std::size_t(nx) * ny);
        std::string err;
        const double t_single = single_gpu(o, ref, !o.csv && mype == 0, err);
        agree(err, "single GPU reference");

        // This PE's slab: rows 1 .. chunk of each array (rows 0 and chunk + 1 are the halos), interior
        // rows first .. first + chunk - 1 of the mesh (0-based).
        const int num_low = npes * chunk_low + npes - (ny - 2);
        const int chunk = mype < num_low ? chunk_low : chunk_high;
        const int first = mype < num_low ? mype * chunk_low : num_low * chunk_low + (mype - num_low) * chunk_high;
        const int top_pe = (mype + npes - 1) % npes, bottom_pe = (mype + 1) % npes;
        const int top_iy = (top_pe < num_low ? chunk_low : chunk_high) + 1;  // the top PE's lower halo row
        const int bottom_iy = 0;                                             // the bottom PE's upper halo row

        std::array<real *, 2> buf{static_cast<real *>(nvshmem_malloc(slab_bytes)),
                                  static_cast<real *>(nvshmem_malloc(slab_bytes))};  // collective
        agree(buf[0] && buf[1] ? ""
                               : "nvshmem_malloc(" + std::to_string(slab_bytes) +
                                     ") failed (NVSHMEM_SYMMETRIC_SIZE too small for two slabs?)",
              "nvshmem_malloc");
        real *l2_d = nullptr;
        std::array<real *, 2> l2_h{nullptr, nullptr};  // pinned: one per iteration in flight
        cudaStream_t stream = nullptr;
        err = cuda_check(cudaMemset(buf[0], 0, slab_bytes), "cudaMemset");
        if (err.empty()) err = cuda_check(cudaMemset(buf[1], 0, slab_bytes), "cudaMemset");
        if (err.empty())
            err = cuda_check(jacobi::set_boundaries(buf[0], buf[1], first, chunk, nx, ny - 2), "set_boundaries");
        if (err.empty()) err = cuda_check(cudaMalloc(&l2_d, sizeof(real)), "cudaMalloc");
        for (real *&h : l2_h)
            if (err.empty()) err = cuda_check(cudaMallocHost(&h, sizeof(real)), "cudaMallocHost");
        if (err.empty())
            err = cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
        if (err.empty()) err = cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        agree(err, "set-up");

        upcxx::extra::nvshmem_heap heap;  // collective: both slabs on every PE, as UPC++ global pointers
        // The rows each iteration moves in copy and upcxx modes, for either array as the new one:
        // this PE's first and last row into the top PE's lower halo and the bottom PE's upper halo.
        // Columns 1 .. nx-2: the cells the sweep writes (as nvshmem_float_p in device mode).
        const std::size_t row_cells = std::size_t(nx) - 2;
        std::array<const_device_gptr, 2> my_first, my_last;
        std::array<device_gptr, 2> top_halo, bottom_halo;
        for (int b = 0; b < 2; b++) {
            my_first[b] = heap.to_global_ptr(buf[b] + nx + 1);
            my_last[b] = heap.to_global_ptr(buf[b] + std::size_t(chunk) * nx + 1);
            top_halo[b] = heap.to_global_ptr(buf[b] + std::size_t(top_iy) * nx + 1, top_pe);
            bottom_halo[b] = heap.to_global_ptr(buf[b] + std::size_t(bottom_iy) * nx + 1, bottom_pe);
        }
        // copy mode: both rows of either array, for one heap.copies_on_stream.
        std::array<std::array<upcxx::extra::stream_copy<real>, 2>, 2> rows;
        for (int b = 0; b < 2; b++)
            rows[b] = {{{my_first[b], top_halo[b], row_cells}, {my_last[b], bottom_halo[b], row_cells}}};

        if (mype == 0 && !o.csv) {
            std::printf("Jacobi relaxation: %d iterations on %d x %d mesh\n", o.niter, ny, nx);
            std::printf("Halo exchange: %s\n",
                        o.mode == halo::device ? "device (nvshmem_float_p in the sweep, nvshmemx_barrier_all_on_stream)"
                        : o.mode == halo::copy
                            ? "copy (heap.copies_on_stream after the sweep, nvshmemx_barrier_all_on_stream)"
                            : "upcxx (upcxx::copy after heap.after(stream), upcxx::barrier_async)");
        }

        // The loop. `cur` is the array holding the last iteration's values (NVIDIA's `a`).
        int cur = 0, iter = 0;
        bool stop = false;
        std::deque<pending_norm> pending;
        upcxx::promise<> landed;  // copy: every heap.copies_on_stream
        // Waits for every norm of an iteration before `until`, prints it, and whether it stops the
        // run (at most one is left each time: the previous iteration's). A local norm is summed
        // here, from the loop: every rank starts these reduce_all calls in iteration order.
        auto take_norms = [&](int until) {
            while (!pending.empty() && pending.front().iter < until) {
                const int k = pending.front().iter;
                const real local_or_sum = pending.front().value.wait();
                const real sum =
                    pending.front().summed ? local_or_sum : upcxx::reduce_all(local_or_sum, upcxx::op_fast_add).wait();
                const real norm = std::sqrt(sum);
                pending.pop_front();
                if (!o.csv && k % 100 == 0 && mype == 0) std::printf("%5d, %0.6f\n", k, norm);
                if (stop_check(o, k) && norm <= tol) stop = true;
            }
        };
        upcxx::barrier();
        const double t0 = now();
        while (!stop && iter < o.niter) {
            const int next = 1 - cur;
            const bool norm_here = norm_iteration(o, iter);
            real *const h = l2_h[iter % 2];
            CUDA_OR_EXIT(cudaMemsetAsync(l2_d, 0, sizeof(real), stream));
            const jacobi::sweep s{buf[next], buf[cur], l2_d, 1, chunk + 1, nx, top_pe, top_iy, bottom_pe, bottom_iy};
            CUDA_OR_EXIT(jacobi::launch_sweep(
                o.mode == halo::device ? jacobi::halo_write::nvshmem : jacobi::halo_write::none, s, stream));
            if (norm_here) CUDA_OR_EXIT(cudaMemcpyAsync(h, l2_d, sizeof(real), cudaMemcpyDeviceToHost, stream));
            upcxx::future<> gate = upcxx::make_future();  // what the next sweep waits for on the host
            if (o.mode == halo::upcxx) {
                // Once the sweep (and the norm's copy) is done: the two rows with upcxx::copy (a
                // copy may start in a callback; a collective may not). The host waits for them,
                // then starts the norm's reduce_all and the barrier from here, in one order on
                // every rank: after the barrier no PE reads the halos this iteration wrote before
                // the next sweep, and none is still reading them.
                upcxx::future<> rows = heap.after(stream).then([&, next]() {
                    return upcxx::when_all(upcxx::copy(my_first[next], top_halo[next], row_cells),
                                           upcxx::copy(my_last[next], bottom_halo[next], row_cells));
                });
                rows.wait();
                if (norm_here) pending.push_back({iter, upcxx::reduce_all(*h, upcxx::op_fast_add), true});
                gate = upcxx::barrier_async();
            } else {
                if (norm_here) {
                    // This PE's norm, once its sweep is done; take_norms sums it over the PEs.
                    pending.push_back({iter, heap.after(stream).then([h]() { return *h; }), false});
                }
                if (o.mode == halo::copy) {
                    // The rows, after the sweep in the stream's order; the barrier after them runs
                    // once they landed: every PE's rows are in place before any PE's next sweep,
                    // and no PE writes a halo before its owner's previous sweep (which read it) is
                    // done. Both rows in one call (small rows move in one launch of the heap's batch
                    // kernel).
                    heap.copies_on_stream(stream, rows[next], upcxx::operation_cx::as_promise(landed));
                }
                // device: the sweep's nvshmem_float_p are delivered (the barrier's quiet) and every
                // PE's sweep is done before any PE's next sweep.
                nvshmemx_barrier_all_on_stream(stream);
            }
            // Iteration iter + 1 runs unless the norm of iteration iter - 1 is below the tolerance;
            // the sweep of iteration iter is queued meanwhile.
            take_norms(iter);
            cur = next;
            iter++;
            gate.wait();
        }
        take_norms(INT_MAX);
        landed.finalize().wait();
        heap.after(stream).wait();
        upcxx::barrier();
        const double t_multi = now() - t0;
        // A CUDA error of the stream's work still made heap.after() ready; check_copies() has it.
        std::string stream_error;
        try {
            heap.check_copies();
        } catch (const upcxx::extra::nvshmem_error &e) {
            stream_error = e.what();
        }
        agree(stream_error, "the solver's stream");

        // Every cell of this slab against the reference.
        std::vector<real> mine(std::size_t(nx) * chunk);
        agree(cuda_check(cudaMemcpy(mine.data(), buf[cur] + nx, mine.size() * sizeof(real), cudaMemcpyDeviceToHost),
                         "cudaMemcpy"),
              "result");
        long wrong = 0;
        for (int r = 0; r < chunk; r++) {
            const int iy = first + 1 + r;  // the row of the mesh
            for (int ix = 0; ix < nx; ix++) {
                const real got = mine[std::size_t(r) * nx + ix], want = ref[std::size_t(iy) * nx + ix];
                if (std::fabs(got - want) > tol) {
                    if (wrong < 5)
                        std::fprintf(stderr, "ERROR on rank %d: a[%d * %d + %d] = %f does not match %f (reference)\n",
                                     me, iy, nx, ix, got, want);
                    wrong++;
                }
            }
        }
        const long all_wrong = upcxx::reduce_all(wrong, upcxx::op_fast_add).wait();
        if (mype == 0 && all_wrong == 0) {
            if (o.csv) {
                std::printf("upcxx-halo-%s, %d, %d, %d, %d, %d, 1, %f, %f\n", halo_name(o.mode), nx, ny, o.niter,
                            o.nccheck, npes, t_multi, t_single);
            } else {
                std::printf("Num GPUs: %d.\n", npes);
                std::printf("%dx%d: 1 GPU: %8.4f s, %d GPUs: %8.4f s, speedup: %8.2f, efficiency: %8.2f \n", ny, nx,
                            t_single, npes, t_multi, t_single / t_multi, t_single / (npes * t_multi) * 100);
            }
        }
        if (mype == 0 && all_wrong != 0)
            std::fprintf(stderr, "jacobi_upcxx: %ld cells differ from the single-GPU reference\n", all_wrong);
        rc = all_wrong == 0 ? 0 : 1;

        heap.destroy();  // collective: every copy through the heap landed
        nvshmem_free(buf[1]);
        nvshmem_free(buf[0]);
        cudaStreamDestroy(stream);
        for (real *h : l2_h) cudaFreeHost(h);
        cudaFree(l2_d);
        upcxx::extra::nvshmem_finalize();
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
