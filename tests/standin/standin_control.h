/* upcxx-extra-nvshmem test stand-in: the control API of the CUDA stand-in (libcuda.so.1 in
 * tests/standin). Tests call these to change the stand-in's behaviour at run time. Declared weak
 * by nothing: a test that calls them must run on the stand-in (link it first, see README.md).
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef UXN_STANDIN_CONTROL_H
#define UXN_STANDIN_CONTROL_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

/* 1 in a process running on the stand-in (use: dlsym(RTLD_DEFAULT, "uxn_standin_present")). */
int uxn_standin_present(void);

/* Every asynchronous copy enqueued from now on lands this many microseconds after it reaches the
 * head of its stream (env UXN_STANDIN_COPY_DELAY_US, default 200). Returns the previous value. */
unsigned uxn_standin_set_copy_delay_us(unsigned us);
unsigned uxn_standin_copy_delay_us(void);

/* The next n asynchronous copies (cudaMemcpyAsync, cudaMemcpyPeerAsync, cuMemcpy*Async;
 * process-wide, counted at enqueue) move no bytes; the failure is reported once, and only for
 * the work it covers: by the first event recorded after the copy on its stream (every query of
 * it: cudaEventQuery / cudaEventSynchronize: cudaErrorUnknown, cuEventQuery: CUDA_ERROR_UNKNOWN,
 * once the event has completed) or, when no such event reported it first, by the next
 * cudaStreamSynchronize / cudaDeviceSynchronize covering it. Later work on the stream is
 * unaffected (not sticky). This models the failure a copy engine could recover from; a real
 * GPU's asynchronous faults are sticky (every later call in the context fails), which the
 * stand-in does not model. n = 0 cancels. Returns how many were still pending. */
int uxn_standin_fail_next_copies(int n);
/* on = 1: a copy failure that a stream write (or a signalling batch kernel's word) reaches before
 * any event or synchronize reported it faults the context for good, as a GPU's asynchronous fault
 * does: every cuStreamQuery (of any stream), cuEventQuery and cuEventSynchronize reports
 * CUDA_ERROR_UNKNOWN, and no stream write or kernel's word stores from then on (the work
 * before them still runs). on = 0 (the default): such a fault is reported once and later
 * writes store. Either call clears a fault left by the sticky mode (a new context). Returns the
 * previous mode. */
int uxn_standin_sticky_faults(int on);
/* The next n cuLaunchKernel calls (the batched-copy kernel) fail at the call with
 * CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, enqueue nothing and leave no error behind, as a launch a
 * GPU refuses does. n = 0 cancels. Returns how many were still pending. */
int uxn_standin_fail_next_launches(int n);
/* How many injected copy failures have run so far (process-wide). */
long uxn_standin_failed_copies(void);
/* How many asynchronous copies have been enqueued so far (process-wide). */
long uxn_standin_async_copies(void);
/* Launches of the library's batched-copy kernel (uxn_copy_batch) so far, and the copies they
 * held (process-wide). A launch is one operation on its stream: it lands after one copy delay,
 * and an injected failure (uxn_standin_fail_next_copies counts a launch as one copy) fails all
 * of its copies. */
long uxn_standin_batch_launches(void);
long uxn_standin_batched_copies(void);

/* cuStreamWriteValue32 calls enqueued so far (the stream writes the word when it reaches the
 * write; a copy failure before it on its stream that no event or synchronize reported becomes a
 * fault the next cuStreamQuery, of any stream, reports once), and event records (cudaEventRecord,
 * cuEventRecord) so far (process-wide). */
long uxn_standin_stream_writes(void);
long uxn_standin_event_records(void);

/* Streams that upcxx-extra-nvshmem's library (the caller of cuStreamDestroy, by its shared
 * object) destroyed with work still queued on them, so far (process-wide). The stand-in runs that
 * work regardless, as CUDA does; a copy engine whose drain destroys its stream before its copies
 * landed is caught by a test that reads this. The program's and UPC++'s streams are not counted. */
long uxn_standin_busy_stream_destroys(void);

/* Registers [base, base + size) as device memory of `device` (what cudaMalloc'd memory is):
 * cuPointerGetAttribute, cudaPointerGetAttributes and cuMemGetAddressRange answer for it.
 * Used by the NVSHMEM stand-in for its heap chunks and peer mappings. 0 on success. */
int uxn_standin_register_device_range(void *base, size_t size, int device);
int uxn_standin_unregister_device_range(void *base);
/* The device of a registered pointer, or -1. */
int uxn_standin_device_of(const void *p);

/* Waits until every stream of every device is idle (test teardown). */
void uxn_standin_drain(void);

#ifdef __cplusplus
}
#endif
#endif
