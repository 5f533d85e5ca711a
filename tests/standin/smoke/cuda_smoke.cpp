// Smoke test (a) of the CUDA stand-in, no UPC++: devices, memory registration, streams, events,
// ordering (in-stream, cudaStreamWaitEvent, the legacy and per-thread default streams,
// non-blocking streams), copy delays, host functions, failure injection, the driver API, and
// fork() (a child of a process that never touched CUDA works; a child of one that did gets
// initialisation errors). Checks with the C++ tests' check.hpp (tests/cxx; without UPC++: "CHECK
// rank - PASS|FAIL: ..."), then prints "RESULT cuda_smoke PASS|FAIL: N failures".
// SPDX-License-Identifier: BSD-3-Clause
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "standin_control.h"
#define UXN_CHECK_NO_UPCXX
#include "check.hpp"  // tests/cxx/check.hpp

#define OK(e) CHECK((e) == cudaSuccess, "%s", #e)

static int child_status(pid_t p) {
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}
static bool wait_true(const std::atomic<int> &f, int ms) {
    for (int i = 0; i < ms && !f.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return f.load() != 0;
}
static void CUDART_CB host_fn(void *arg) {
    auto *a = static_cast<std::pair<const char *, std::atomic<int> *> *>(arg);
    a->second->store(a->first[0] == 7 ? 1 : 2);
}

int main() {
    // fork() before any CUDA call (as GASNet's smp conduit forks its ranks): the child works.
    pid_t p = fork();
    if (p == 0) {
        void *d = nullptr;
        _exit(cudaMalloc(&d, 64) == cudaSuccess && cudaFree(d) == cudaSuccess ? 0 : 1);
    }
    CHECK(child_status(p) == 0, "a child forked before any CUDA call uses CUDA");

    int n = -1;
    OK(cudaGetDeviceCount(&n));
    const char *env = std::getenv("UXN_STANDIN_GPUS");
    CHECK(n == (env ? std::atoi(env) : 1), "cudaGetDeviceCount: %d devices (UXN_STANDIN_GPUS)", n);
    CHECK(uxn_standin_present() == 1, "uxn_standin_present()");
    int dev = -1;
    OK(cudaGetDevice(&dev));
    CHECK(dev == 0, "cudaGetDevice: device 0");
    CHECK(cudaSetDevice(n) == cudaErrorInvalidDevice, "cudaSetDevice(n): cudaErrorInvalidDevice");
    CHECK(cudaGetLastError() == cudaErrorInvalidDevice, "cudaGetLastError after it: cudaErrorInvalidDevice");
    CHECK(cudaGetLastError() == cudaSuccess, "cudaGetLastError again: cleared");
    CUcontext ctx = nullptr;
    CHECK(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != nullptr, "cuCtxGetCurrent: a context");

    // Device memory: registered, answered for, and not host memory.
    const size_t N = 1 << 16;
    char *a = nullptr, *b = nullptr, *c = nullptr;
    OK(cudaMalloc(reinterpret_cast<void **>(&a), N));
    OK(cudaMalloc(reinterpret_cast<void **>(&b), N));
    OK(cudaMalloc(reinterpret_cast<void **>(&c), N));
    cudaPointerAttributes attr;
    OK(cudaPointerGetAttributes(&attr, a + 10));
    CHECK(attr.type == cudaMemoryTypeDevice && attr.device == 0, "cudaPointerGetAttributes(device memory): device 0");
    std::vector<char> host(N), host2(N);
    OK(cudaPointerGetAttributes(&attr, host.data()));
    CHECK(attr.type == cudaMemoryTypeUnregistered, "cudaPointerGetAttributes(host memory): unregistered");
    int ordinal = -1;
    CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CUdeviceptr(a + 5)) == CUDA_SUCCESS &&
              ordinal == 0,
          "cuPointerGetAttribute(DEVICE_ORDINAL) of device memory: 0");
    CHECK(
        cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CUdeviceptr(host.data())) != CUDA_SUCCESS,
        "cuPointerGetAttribute(DEVICE_ORDINAL) of host memory: an error");
    CUdeviceptr rb = 0;
    size_t rs = 0;
    CHECK(cuMemGetAddressRange(&rb, &rs, CUdeviceptr(b + 100)) == CUDA_SUCCESS && rb == CUdeviceptr(b) && rs == N,
          "cuMemGetAddressRange: the allocation's base and size");

    // An asynchronous copy lands after its delay; the event reports it.
    uxn_standin_set_copy_delay_us(50000);
    cudaStream_t s1, s2, nb;
    OK(cudaStreamCreateWithFlags(&s1, cudaStreamDefault));
    OK(cudaStreamCreateWithFlags(&s2, cudaStreamDefault));
    OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    cudaEvent_t e1, e2, e3;
    OK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
    OK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
    OK(cudaEventCreateWithFlags(&e3, cudaEventDisableTiming));
    OK(cudaMemset(a, 1, N));
    OK(cudaMemset(b, 0, N));
    OK(cudaMemcpyAsync(b, a, N, cudaMemcpyDeviceToDevice, s1));
    OK(cudaEventRecord(e1, s1));
    CHECK(cudaEventQuery(e1) == cudaErrorNotReady, "event after a delayed copy: not ready");
    CHECK(b[0] == 0 && b[N - 1] == 0, "the delayed copy has not landed yet");
    // Same stream: in order (b -> c sees a's bytes).
    OK(cudaMemcpyAsync(c, b, N, cudaMemcpyDeviceToDevice, s1));
    // cudaStreamWaitEvent: s2 after e1.
    OK(cudaStreamWaitEvent(s2, e1, 0));
    OK(cudaMemcpyAsync(host.data(), b, N, cudaMemcpyDeviceToHost, s2));
    OK(cudaStreamSynchronize(s2));
    CHECK(cudaEventQuery(e1) == cudaSuccess, "event ready after cudaStreamWaitEvent + synchronize");
    CHECK(host[0] == 1 && host[N - 1] == 1, "cudaStreamWaitEvent: the copy after the event sees its bytes");
    OK(cudaStreamSynchronize(s1));
    CHECK(c[0] == 1 && c[N - 1] == 1, "same stream: copies in order");

    // Host function after a copy in the same stream sees its bytes.
    std::atomic<int> ran{0};
    std::memset(host.data(), 7, N);
    OK(cudaMemcpyAsync(b, host.data(), N, cudaMemcpyHostToDevice, s1));
    std::pair<const char *, std::atomic<int> *> arg{b, &ran};
    OK(cudaLaunchHostFunc(s1, host_fn, &arg));
    CHECK(ran.load() == 0, "host function: not run before its stream");
    OK(cudaStreamSynchronize(s1));
    CHECK(ran.load() == 1, "host function: ran once, after the copy before it");

    // The legacy default stream waits for blocking streams; a non-blocking stream does not.
    OK(cudaMemset(c, 0, N));
    OK(cudaMemset(b, 3, N));
    OK(cudaMemcpyAsync(c, b, N, cudaMemcpyDeviceToDevice, s1));  // 50 ms
    OK(cudaEventRecord(e2, nb));
    OK(cudaEventSynchronize(e2));  // nb is not held up by the legacy stream
    CHECK(cudaEventQuery(e1) == cudaSuccess, "an earlier event stays complete");
    OK(cudaMemcpyAsync(host.data(), c, N, cudaMemcpyDeviceToHost, cudaStreamLegacy));
    OK(cudaStreamSynchronize(0));
    CHECK(host[0] == 3 && host[N - 1] == 3, "the legacy default stream waits for the blocking streams");
    // ... and a blocking stream waits for the legacy stream.
    OK(cudaMemset(c, 0, N));
    OK(cudaMemsetAsync(b, 4, N, 0));
    OK(cudaMemcpyAsync(c, b, N, cudaMemcpyDeviceToDevice, 0));  // 50 ms on the legacy stream
    OK(cudaMemcpyAsync(host.data(), c, N, cudaMemcpyDeviceToHost, s2));
    OK(cudaStreamSynchronize(s2));
    CHECK(host[0] == 4 && host[N - 1] == 4, "a blocking stream waits for the legacy stream");
    // A synchronous cudaMemcpy waits for the blocking streams too.
    OK(cudaMemset(b, 5, N));
    OK(cudaMemcpyAsync(c, b, N, cudaMemcpyDeviceToDevice, s1));
    OK(cudaMemcpy(host.data(), c, N, cudaMemcpyDeviceToHost));
    CHECK(host[0] == 5 && host[N - 1] == 5, "synchronous cudaMemcpy waits for the blocking streams");

    // cudaStreamPerThread is per thread: one thread's slow copy does not hold up another's.
    {
        std::atomic<int> other_done{0};
        OK(cudaMemcpyAsync(c, b, N, cudaMemcpyDeviceToDevice, cudaStreamPerThread));  // 50 ms
        std::thread t([&] {
            cudaEvent_t e;
            cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
            cudaEventRecord(e, cudaStreamPerThread);
            cudaEventSynchronize(e);
            cudaEventDestroy(e);
            other_done = 1;
        });
        CHECK(wait_true(other_done, 40), "cudaStreamPerThread: another thread's stream is not held up");
        CHECK(cudaStreamQuery(cudaStreamPerThread) == cudaErrorNotReady,
              "cudaStreamPerThread: this thread's slow copy still pending");
        t.join();
        OK(cudaStreamSynchronize(cudaStreamPerThread));
    }

    // A destroyed stream's pending work still runs, and cudaDeviceSynchronize waits for it; so does
    // the per-thread stream of a thread that exited.
    {
        cudaStream_t tmp;
        OK(cudaStreamCreateWithFlags(&tmp, cudaStreamNonBlocking));
        OK(cudaMemset(b, 6, N));
        OK(cudaMemset(c, 0, N));
        OK(cudaMemcpyAsync(c, b, N, cudaMemcpyDeviceToDevice, tmp));  // 50 ms
        OK(cudaStreamDestroy(tmp));
        CHECK(cudaStreamDestroy(tmp) == cudaErrorInvalidResourceHandle,
              "cudaStreamDestroy twice: cudaErrorInvalidResourceHandle");
        OK(cudaDeviceSynchronize());
        CHECK(c[0] == 6 && c[N - 1] == 6,
              "a destroyed stream's pending copy ran before cudaDeviceSynchronize returned");
        OK(cudaMemset(c, 0, N));
        std::thread([&] { cudaMemcpyAsync(c, b, N, cudaMemcpyDeviceToDevice, cudaStreamPerThread); }).join();
        OK(cudaDeviceSynchronize());
        CHECK(c[0] == 6 && c[N - 1] == 6,
              "an exited thread's per-thread stream ran before cudaDeviceSynchronize returned");
        for (int i = 0; i < 8; ++i) std::thread([&] { cudaStreamSynchronize(cudaStreamPerThread); }).join();
    }

    // Delay control: 0 makes copies land promptly.
    CHECK(uxn_standin_set_copy_delay_us(0) == 50000, "uxn_standin_set_copy_delay_us(0) returns the previous 50000");
    CHECK(uxn_standin_copy_delay_us() == 0, "uxn_standin_copy_delay_us() == 0");

    // Failure injection: the copy moves nothing; the event after it reports it (every query), and a
    // synchronize after that event does not report it again; without such an event, one
    // synchronize does.
    OK(cudaMemset(b, 9, N));
    OK(cudaMemset(c, 0, N));
    long failed0 = uxn_standin_failed_copies();
    CHECK(uxn_standin_fail_next_copies(1) == 0, "uxn_standin_fail_next_copies(1)");
    OK(cudaMemcpyAsync(c, b, N, cudaMemcpyDeviceToDevice, s1));  // enqueue succeeds
    OK(cudaEventRecord(e3, s1));
    CHECK(cudaEventSynchronize(e3) == cudaErrorUnknown,
          "an injected failure: cudaEventSynchronize reports cudaErrorUnknown");
    CHECK(cudaEventQuery(e3) == cudaErrorUnknown, "an injected failure: cudaEventQuery reports cudaErrorUnknown");
    CHECK(c[0] == 0 && c[N - 1] == 0, "an injected failure moves no bytes");
    CHECK(uxn_standin_failed_copies() == failed0 + 1, "uxn_standin_failed_copies() counts it");
    CHECK(cudaStreamSynchronize(s1) == cudaSuccess,
          "an injected failure its event reported: cudaStreamSynchronize does not report it again");
    uxn_standin_fail_next_copies(1);
    OK(cudaMemcpyAsync(c, b, N, cudaMemcpyDeviceToDevice, s1));
    CHECK(cudaStreamSynchronize(s1) == cudaErrorUnknown,
          "an injected failure no event reported: cudaStreamSynchronize reports cudaErrorUnknown");
    CHECK(cudaStreamSynchronize(s1) == cudaSuccess, "an injected failure is reported once, not sticky");
    OK(cudaMemcpyAsync(c, b, N, cudaMemcpyDeviceToDevice, s1));
    OK(cudaEventRecord(e3, s1));
    OK(cudaEventSynchronize(e3));
    CHECK(c[0] == 9, "the next copy on the stream lands");
    uxn_standin_fail_next_copies(1);
    OK(cudaMemcpyAsync(c, b, N, cudaMemcpyDeviceToDevice, s2));
    CHECK(cudaDeviceSynchronize() == cudaErrorUnknown,
          "an injected failure: cudaDeviceSynchronize reports cudaErrorUnknown");
    OK(cudaDeviceSynchronize());

    // The driver API, as UPC++ uses it.
    CHECK(cuInit(0) == CUDA_SUCCESS, "cuInit");
    int dn = 0;
    CHECK(cuDeviceGetCount(&dn) == CUDA_SUCCESS && dn == n, "cuDeviceGetCount: the runtime's count");
    CUcontext pctx = nullptr;
    CHECK(cuDevicePrimaryCtxRetain(&pctx, 0) == CUDA_SUCCESS, "cuDevicePrimaryCtxRetain");
    CHECK(cuCtxPushCurrent(pctx) == CUDA_SUCCESS, "cuCtxPushCurrent");
    CUstream cs;
    CUevent ce;
    CHECK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "cuStreamCreate(NON_BLOCKING)");
    CHECK(cuEventCreate(&ce, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS, "cuEventCreate(DISABLE_TIMING)");
    CUdeviceptr dp = 0;
    CHECK(cuMemAlloc(&dp, 256) == CUDA_SUCCESS, "cuMemAlloc");
    std::memset(host.data(), 0x42, 256);
    uxn_standin_set_copy_delay_us(20000);
    CHECK(cuMemcpyHtoDAsync(dp, host.data(), 256, cs) == CUDA_SUCCESS, "cuMemcpyHtoDAsync");
    CHECK(cuEventRecord(ce, cs) == CUDA_SUCCESS, "cuEventRecord after HtoD");
    CHECK(cuEventQuery(ce) == CUDA_ERROR_NOT_READY, "cuEventQuery: not ready before the delay");
    CUresult r;
    while ((r = cuEventQuery(ce)) == CUDA_ERROR_NOT_READY) std::this_thread::yield();
    CHECK(r == CUDA_SUCCESS, "cuEventQuery: HtoD landed");
    CHECK(cuMemcpyDtoHAsync(host2.data(), dp, 256, cs) == CUDA_SUCCESS, "cuMemcpyDtoHAsync");
    CHECK(cuEventRecord(ce, cs) == CUDA_SUCCESS, "cuEventRecord after DtoH");
    while ((r = cuEventQuery(ce)) == CUDA_ERROR_NOT_READY) std::this_thread::yield();
    CHECK(r == CUDA_SUCCESS && host2[0] == 0x42 && host2[255] == 0x42, "cuEventQuery: DtoH landed with the bytes");
    uxn_standin_fail_next_copies(1);
    CHECK(cuMemcpyDtoHAsync(host2.data(), dp, 256, cs) == CUDA_SUCCESS, "cuMemcpyDtoHAsync (failure injected)");
    CHECK(cuEventRecord(ce, cs) == CUDA_SUCCESS, "cuEventRecord after the failing copy");
    while ((r = cuEventQuery(ce)) == CUDA_ERROR_NOT_READY) std::this_thread::yield();
    CHECK(r == CUDA_ERROR_UNKNOWN, "cuEventQuery: CUDA_ERROR_UNKNOWN for the injected failure");
    const char *msg = nullptr;
    CHECK(cuGetErrorString(CUDA_ERROR_UNKNOWN, &msg) == CUDA_SUCCESS && msg != nullptr,
          "cuGetErrorString(CUDA_ERROR_UNKNOWN)");
    CUmodule m;
    CHECK(cuModuleLoadData(&m, ".version 6.0") != CUDA_SUCCESS,
          "cuModuleLoadData: refused (no kernels on the stand-in)");
    CHECK(cuMemFree(dp) == CUDA_SUCCESS, "cuMemFree");
    CHECK(cuEventDestroy(ce) == CUDA_SUCCESS, "cuEventDestroy");
    CHECK(cuStreamDestroy(cs) == CUDA_SUCCESS, "cuStreamDestroy");
    CUcontext popped = nullptr;
    CHECK(cuCtxPopCurrent(&popped) == CUDA_SUCCESS && popped == pctx, "cuCtxPopCurrent: the primary context");
    CHECK(cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS, "cuDevicePrimaryCtxRelease");
    uxn_standin_set_copy_delay_us(0);

    // fork() after CUDA was used: every call in the child fails with an initialisation error.
    p = fork();
    if (p == 0) {
        void *d = nullptr;
        int bad = 0;
        bad |= cudaMalloc(&d, 64) != cudaErrorInitializationError;
        bad |= cudaMemcpyAsync(d, d, 0, cudaMemcpyDefault, 0) != cudaErrorInitializationError;
        bad |= cudaStreamSynchronize(s1) != cudaErrorInitializationError;
        bad |= cuInit(0) != CUDA_ERROR_NOT_INITIALIZED;
        CUcontext x;
        bad |= cuCtxGetCurrent(&x) != CUDA_ERROR_NOT_INITIALIZED;
        _exit(bad);
    }
    CHECK(child_status(p) == 0, "a child forked after CUDA was used gets initialisation errors");

    OK(cudaStreamDestroy(s1));
    OK(cudaStreamDestroy(s2));
    OK(cudaStreamDestroy(nb));
    OK(cudaEventDestroy(e1));
    OK(cudaEventDestroy(e2));
    OK(cudaEventDestroy(e3));
    OK(cudaFree(a));
    OK(cudaFree(b));
    OK(cudaFree(c));
    CHECK(cudaFree(host.data()) == cudaErrorInvalidValue, "cudaFree(host memory): cudaErrorInvalidValue");
    return uxn_check::finish("cuda_smoke");
}
