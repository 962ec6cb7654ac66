// Device kernels, declared for the host code of the CUDA extension. Each is instantiated in
// kernels.cu for every dtype (and op) that the host path supports. Every launcher checks its launch
// and throws when it failed.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "commbench/reduce.h"

namespace commbench {

// dst = op(dst, src) over n elements, calling the functor of reduce.h; 16-byte vector accesses over
// the part that both pointers can reach aligned (alignment.h).
template <typename T, typename Op>
void launch_reduce(T* dst, const T* src, std::size_t n, cudaStream_t stream);

// The exact pattern of pattern.h: rank r's values at pattern indices first, first + 1, ...
template <typename T>
void launch_fill(T* data, std::size_t n, std::size_t first, RedOp op, int rank, int nranks, cudaStream_t stream);

// Every element set to `value` (converted to T): the stale content of a receive buffer, a NaN.
template <typename T>
void launch_fill_value(T* data, std::size_t n, double value, cudaStream_t stream);

// Counts into *wrong (device memory) the elements that differ from the exact reduction over nranks
// (source < 0) or from rank source's values, at pattern indices first, first + 1, ...
// The counter is first set to the number of blocks, and each block takes one away as it finishes, so
// a check kernel that never ran leaves a non-zero count instead of a false "0 wrong".
template <typename T>
void launch_count_wrong(const T* data, std::size_t n, std::size_t first, RedOp op, int nranks, int source,
                        unsigned long long* wrong, cudaStream_t stream);

// The byte pattern of pattern.h (byte_pattern) for copy checks, and its count of wrong bytes, with
// the same sentinel as launch_count_wrong.
void launch_fill_bytes(void* data, std::size_t bytes, unsigned seed, cudaStream_t stream);
void launch_count_bytes_wrong(const void* data, std::size_t bytes, unsigned seed, unsigned long long* wrong,
                              cudaStream_t stream);

// Holds `stream` until the host stores `seq` (or later) into *flag, mapped host memory: one thread
// spins on it. After about kGateSeconds it gives up and adds one to *expired (mapped host memory too),
// so that a host that blocked while enqueueing behind the held stream cannot deadlock it.
constexpr double kGateSeconds = 2.0;
void launch_gate(const volatile unsigned* flag, unsigned seq, unsigned* expired, cudaStream_t stream);

// Holds `stream` for `seconds` of the device's clock: a rank's --delay, on its device after the ranks'
// device-side barrier, as a compute kernel queued ahead of the call would hold it.
void launch_spin(double seconds, cudaStream_t stream);

// A copy done by streaming multiprocessors (16-byte loads and stores where alignment allows), for
// peer memory that the copy engines would otherwise move.
void launch_sm_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

}  // namespace commbench
