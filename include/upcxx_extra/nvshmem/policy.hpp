// upcxx-extra-nvshmem: the C++ layer's policy, in one place. Part of <upcxx_extra/nvshmem.hpp>.
// SPDX-License-Identifier: BSD-3-Clause
//
// Every environment variable the C++ layer asks for or writes, and its choice of GPU, are here;
// the rest of the layer takes them as values (copy_policy, env_override, choose_device) and
// touches neither the environment nor the choice itself.
//
// Read (copy_policy::from_environment, once per heap, at construction; docs/copy.md), by the C
// library, which reads every variable (src/env.rs; upcxx_extra_nvshmem_copy_policy):
//   UPCXX_EXTRA_NVSHMEM_COPY=fast (default) | unbatched | upcxx
//   UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES=N (default 262144)
//   A value the library does not take fails the heap's construction on every rank (errc
//   bad_environment).
// Written (env_override, by nvshmem_init() only, for the duration of the call):
//   NVSHMEM_SYMMETRIC_SIZE, when nvshmem_init_options::heap_size is not 0 (NVSHMEM reads its
//   settings from the environment when it initialises); what was there is put back when
//   nvshmem_init() returns. No other thread may read or change the environment meanwhile.
// The GPU (choose_device, by nvshmem_init(); the CUDA calls that ask and set it are init.hpp's
// select_device): nvshmem_init_options::device when set; else the device of the CUDA context
// current on the calling thread; else upcxx::local_team().rank_me() modulo the visible devices.
// The heap then uses the device NVSHMEM's heap is on (upcxx_extra_nvshmem_heap_query), and every
// fast copy runs on it (the copy engine is made for that device, upcxx_extra_nvshmem_engine_new,
// and makes its stream in that device's primary context): not a choice of the layer.
// At build time, not run time: UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1 (a macro) forces the
// public-API mode (upcxx_internals.hpp, docs/compatibility.md).
#ifndef UPCXX_EXTRA_NVSHMEM_POLICY_HPP
#define UPCXX_EXTRA_NVSHMEM_POLICY_HPP

#include <cstddef>
#include <cstdlib>
#include <string>

#include "upcxx_extra/nvshmem/error.hpp"
#include "upcxx_extra_nvshmem.h"

namespace upcxx {
namespace extra {
namespace detail {

/// How heap.copy chooses its path, as the environment asks (a heap asks once, at construction;
/// docs/copy.md lists the knobs; the copy engine, copy_engine.hpp, takes it as a value, and
/// nvshmem_heap::set_copy_batch_bytes changes the batching limit at run time). The C library
/// reads and checks the variables (upcxx_extra_nvshmem_copy_policy, src/env.rs):
///   UPCXX_EXTRA_NVSHMEM_COPY=fast (default) | unbatched | upcxx
///     fast: the fast path, small copies with heap memory at both ends batched; unbatched: the
///     fast path, one cudaMemcpyAsync per copy; upcxx: every copy with a heap end is upcxx::copy.
///   UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES=N (default 262144): the largest copy batched; 0 batches
///     none. Above it a copy engine beats a kernel on one lone copy (BENCHMARKS.md).
struct copy_policy {
    static constexpr std::size_t default_batch_bytes = UPCXX_EXTRA_NVSHMEM_COPY_DEFAULT_BATCH_BYTES;
    bool upcxx_only = false;                        // every copy with a heap end is upcxx::copy
    std::size_t batch_bytes = default_batch_bytes;  // the largest copy batched (0: none)

    /// The policy the environment asks for (upcxx_extra_nvshmem_copy_policy); throws
    /// nvshmem_error (INVALID_ARGUMENT, errc bad_environment) with the library's message, which
    /// names the variable, its value and what it takes, for a value it does not take.
    static copy_policy from_environment() {
        upcxx_extra_nvshmem_copy_policy_t c{};
        const upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_copy_policy(&c);
        if (s == UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT)
            throw nvshmem_error(s, std::string("nvshmem_heap: ") + upcxx_extra_nvshmem_last_error(),
                                nvshmem_errc::bad_environment);
        if (s != UPCXX_EXTRA_NVSHMEM_STATUS_OK) throw c_error(s);  // NULL_ARGUMENT cannot come (&c)
        copy_policy p;
        p.upcxx_only = c.upcxx_only;
        p.batch_bytes = c.batch_bytes;
        return p;
    }
};

// Sets the environment variable `name` to `value` while it lives (NVSHMEM reads its settings from
// the environment when it initialises), then puts back what was there. `value` 0: no change.
class env_override {
public:
    env_override(const char *name, std::size_t value) : name_(name) {
        if (value == 0) return;
        if (const char *prev = std::getenv(name)) {
            had_ = true;
            prev_ = prev;
        }
        set_ = ::setenv(name, std::to_string(value).c_str(), 1) == 0;
    }
    ~env_override() {
        if (!set_) return;
        if (had_)
            ::setenv(name_, prev_.c_str(), 1);
        else
            ::unsetenv(name_);
    }
    env_override(const env_override &) = delete;
    env_override &operator=(const env_override &) = delete;

private:
    const char *name_;
    std::string prev_;
    bool had_ = false, set_ = false;
};

/// This rank's GPU among `count` visible devices (count > 0): `requested` when it is a device
/// index (the caller checked it is below `count`); else `current`, the device of the CUDA context
/// current on the calling thread (-1: none); else `local_rank` modulo `count`. `how` says which,
/// for nvshmem_init's messages.
inline int choose_device(int requested, int count, int current, int local_rank, std::string &how) {
    if (requested >= 0) {
        how = "asked for";
        return requested;
    }
    if (current >= 0) {
        how = "the current CUDA context's";
        return current;
    }
    how = "local rank " + std::to_string(local_rank) + " modulo " + std::to_string(count) + " devices";
    return local_rank % count;
}

}  // namespace detail
}  // namespace extra
}  // namespace upcxx

#endif  // UPCXX_EXTRA_NVSHMEM_POLICY_HPP
