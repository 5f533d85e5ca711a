// A stand-in for the CUDA runtime, for copy_engine_model_test only (the real part cannot run
// without a GPU): one stream whose copies land when the test (or its "GPU" thread) says so.
// Every copy gets the next sequence number; an event recorded after it reports ready once
// landed() has reached that number. Querying a destroyed event traps (a use after free).
// fail_records() makes the next cudaEventRecord calls fail; stream_waits() counts
// cudaStreamWaitEvent and waited_stream() is the stream the last waited event was recorded on.
// The C library's batch launch (upcxx_extra_nvshmem_copy_batch) puts its copies on the stream in
// order; fail_batches() makes the next launches fail, batch_launches() counts the others.
#ifndef UXN_MODEL_CUDA_RUNTIME_API_H
#define UXN_MODEL_CUDA_RUNTIME_API_H

#include "upcxx_extra_nvshmem.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

enum cudaError_t { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600, cudaErrorUnknown = 999 };
enum cudaMemcpyKind { cudaMemcpyDefault = 4 };
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2, cudaHostAllocPortable = 1, cudaHostAllocMapped = 2 };
enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
};
struct CUstream_st {};
struct CUevent_st {
    std::atomic<std::uint64_t> seq{0};
    std::atomic<int> alive{1};
    CUstream_st *recorded_on = nullptr;
};
typedef CUstream_st *cudaStream_t;
typedef CUevent_st *cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

namespace uxn_model {
inline std::atomic<std::uint64_t> &issued() {  // copies issued on the stream so far
    static std::atomic<std::uint64_t> v{0};
    return v;
}
inline std::atomic<std::uint64_t> &landed() {  // copies landed so far (in order)
    static std::atomic<std::uint64_t> v{0};
    return v;
}
inline std::atomic<long> &queries() {  // cudaEventQuery calls
    static std::atomic<long> v{0};
    return v;
}
inline std::atomic<int> &fail_records() {  // cudaEventRecord calls still to fail
    static std::atomic<int> v{0};
    return v;
}
inline std::atomic<int> &stream_waits() {  // cudaStreamWaitEvent calls
    static std::atomic<int> v{0};
    return v;
}
inline std::atomic<CUstream_st *> &waited_stream() {  // where the last waited event was recorded
    static std::atomic<CUstream_st *> v{nullptr};
    return v;
}
inline std::atomic<long> &batch_launches() {  // upcxx_extra_nvshmem_copy_batch calls that launched
    static std::atomic<long> v{0};
    return v;
}
inline std::atomic<int> &fail_batches() {  // upcxx_extra_nvshmem_copy_batch calls still to fail
    static std::atomic<int> v{0};
    return v;
}
}  // namespace uxn_model

inline const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "model error"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, int) {
    *s = new CUstream_st;
    return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete s;
    return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, int) {
    *e = new CUevent_st;
    return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    e->alive = 0;
    delete e;
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *, const void *, std::size_t, cudaMemcpyKind, cudaStream_t) {
    uxn_model::issued()++;
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (uxn_model::fail_records().load() > 0) {
        uxn_model::fail_records()--;
        return cudaErrorUnknown;
    }
    e->seq = uxn_model::issued().load();
    e->recorded_on = s;
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    uxn_model::queries()++;
    if (e->alive.load() != 1) __builtin_trap();
    return uxn_model::landed().load() >= e->seq.load() ? cudaSuccess : cudaErrorNotReady;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    while (cudaEventQuery(e) == cudaErrorNotReady) std::this_thread::yield();
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
    const std::uint64_t t = uxn_model::issued().load();
    while (uxn_model::landed().load() < t) std::this_thread::yield();
    return cudaSuccess;
}
// The stream operations' calls (copy_on_stream, after): no capture, one device, host memory.
inline cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus *st) {
    *st = cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
inline cudaError_t cudaHostAlloc(void **p, std::size_t n, unsigned) {
    *p = ::operator new(n);
    return cudaSuccess;
}
inline cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned) {
    *d = h;
    return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, int) {
    uxn_model::stream_waits()++;
    uxn_model::waited_stream() = e->recorded_on;
    return cudaSuccess;
}

#endif

// The C library's batch launch (include/upcxx_extra_nvshmem.h), as the model's stream sees it:
// the batch's copies, in order.
extern "C" inline upcxx_extra_nvshmem_status_t upcxx_extra_nvshmem_copy_batch(int, void *,
                                                                              const upcxx_extra_nvshmem_copy_desc_t *,
                                                                              size_t count) {
    if (uxn_model::fail_batches().load() > 0) {
        uxn_model::fail_batches()--;
        return UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR;
    }
    uxn_model::issued() += count;
    uxn_model::batch_launches()++;
    return UPCXX_EXTRA_NVSHMEM_STATUS_OK;
}
extern "C" inline const char *upcxx_extra_nvshmem_last_error(void) { return "model: no kernel"; }
extern "C" inline upcxx_extra_nvshmem_status_t upcxx_extra_nvshmem_stream_wait_value32(int, void *, const void *,
                                                                                       uint32_t) {
    return UPCXX_EXTRA_NVSHMEM_STATUS_OK;
}
